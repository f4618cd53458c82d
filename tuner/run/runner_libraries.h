// Libraries that runners call and that are opened once per process, on first
// use: cuBLASLt (dlopen'ed; without it GEMM gets templates only, logged
// once). Must outlive every runner created with it.
// Thread-compatible: one executor or worker owns one.
#pragma once

#include <memory>

#include "tuner/gpu/cublaslt.h"

namespace ktune {

class RunnerLibraries {
 public:
  // cuBLASLt, opened on the first call; null if it is not available here.
  CublasLt* cublaslt();

 private:
  bool cublaslt_tried_ = false;
  std::unique_ptr<CublasLt> cublaslt_;
};

}  // namespace ktune
