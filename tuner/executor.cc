#include "tuner/executor.h"

#include "spdlog/spdlog.h"
#include "tuner/cublaslt.h"
#include "tuner/gemm_runner.h"

namespace ktune {
namespace {

class InProcessExecutor final : public CandidateExecutor {
 public:
  InProcessExecutor(Device* device, uint64_t seed) : device_(device), seed_(seed) {}

  const DeviceInfo& device() const override { return device_->info(); }

  absl::Status Prepare(const NormProblem& problem) override {
    runner_.reset();  // free the previous problem's buffers first
    gemm_runner_.reset();
    absl::StatusOr<std::unique_ptr<NormRunner>> runner = NormRunner::Create(problem, device_, seed_);
    if (!runner.ok()) return runner.status();
    runner_ = *std::move(runner);
    return absl::OkStatus();
  }

  absl::Status PrepareGemm(const v1::GemmProblem& problem) override {
    runner_.reset();
    gemm_runner_.reset();
    if (!cublaslt_tried_) {  // opened once, on the first GEMM; without it, templates only
      cublaslt_tried_ = true;
      absl::StatusOr<std::unique_ptr<CublasLt>> lt = CublasLt::Open();
      if (lt.ok()) {
        cublaslt_ = *std::move(lt);
      } else {
        spdlog::warn("event=cublaslt_unavailable reason=\"{}\"", std::string(lt.status().message()));
      }
    }
    absl::StatusOr<std::unique_ptr<GemmRunner>> runner = GemmRunner::Create(problem, device_, cublaslt_.get(), seed_);
    if (!runner.ok()) return runner.status();
    gemm_runner_ = *std::move(runner);
    gemm_problem_ = problem;
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<LaunchRecipe>> CublasLtCandidates(int max) override {
    if (!gemm_runner_) return absl::FailedPreconditionError("CublasLtCandidates before PrepareGemm");
    std::vector<LaunchRecipe> out;
    if (cublaslt_ == nullptr || !CublasLtCanServe(gemm_problem_).ok()) return out;
    absl::Status variants;
    absl::StatusOr<std::vector<CublasLtAlgo>> algos =
        cublaslt_->Candidates(gemm_problem_, max, device_->info().cc_major >= 9, &variants);
    if (!algos.ok()) return algos.status();
    if (!variants.ok()) {
      spdlog::warn("event=cublaslt_variants_failed reason=\"{}\"", std::string(variants.message()));
    }
    for (const CublasLtAlgo& a : *algos) {
      out.push_back(CublasLtRecipe(a, cublaslt_->version()));
      out.back().arch = Arch(device_->info());
    }
    return out;
  }

  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override {
    if (gemm_runner_) return gemm_runner_->Verify(recipe);
    if (!runner_) return absl::FailedPreconditionError("Verify before Prepare");
    return runner_->Verify(recipe);
  }

  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    if (gemm_runner_) return gemm_runner_->Time(recipe, options);
    if (!runner_) return absl::FailedPreconditionError("Time before Prepare");
    return runner_->Time(recipe, options);
  }

 private:
  Device* const device_;
  const uint64_t seed_;
  std::unique_ptr<NormRunner> runner_;
  // GEMM: cuBLASLt, declared before the runner that uses it so that it
  // outlives it (members are destroyed in reverse order), and the runner.
  std::unique_ptr<CublasLt> cublaslt_;
  bool cublaslt_tried_ = false;
  v1::GemmProblem gemm_problem_;
  std::unique_ptr<GemmRunner> gemm_runner_;
};

}  // namespace

std::unique_ptr<CandidateExecutor> NewInProcessExecutor(Device* device, uint64_t seed) {
  return std::make_unique<InProcessExecutor>(device, seed);
}

}  // namespace ktune
