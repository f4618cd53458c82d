#include "tuner/run/runner_libraries.h"

#include <string>

#include "spdlog/spdlog.h"

namespace ktune {

CublasLt* RunnerLibraries::cublaslt() {
  if (!cublaslt_tried_) {  // opened once, on the first GEMM; without it, templates only
    cublaslt_tried_ = true;
    absl::StatusOr<std::unique_ptr<CublasLt>> lt = CublasLt::Open();
    if (lt.ok()) {
      cublaslt_ = *std::move(lt);
    } else {
      spdlog::warn("event=cublaslt_unavailable reason=\"{}\"", std::string(lt.status().message()));
    }
  }
  return cublaslt_.get();
}

}  // namespace ktune
