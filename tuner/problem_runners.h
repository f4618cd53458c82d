// The one place that maps a problem's kind to its runner: NewProblemRunner
// (a NormRunner or a GemmRunner, tuner/problem_runner.h) for a v1::Problem,
// and the worker's fake-device test double. Executors (tuner/executor.h) and
// the worker (tuner/worker.h) never look at the kind themselves. (This
// switch is what the op registry will own.)
// Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/cublaslt.h"
#include "tuner/device.h"
#include "tuner/fingerprint.h"
#include "tuner/problem.h"
#include "tuner/problem_runner.h"

namespace ktune {

// Libraries that runners call and that are opened once per process, on first
// use: cuBLASLt (dlopen'ed; without it GEMM gets templates only, logged once).
// Must outlive every runner created with it.
class RunnerLibraries {
 public:
  // cuBLASLt, opened on the first call; null if it is not available here.
  CublasLt* cublaslt();

 private:
  bool cublaslt_tried_ = false;
  std::unique_ptr<CublasLt> cublaslt_;
};

// A runner for `problem` on `device` (not owned), inputs drawn from `seed`:
// allocates its buffers and computes the reference. INVALID_ARGUMENT for a
// problem that does not validate (ValidateNormProblem, ValidateGemmProblem)
// or of no known kind; device errors as the runner returns them.
// `libraries` (not owned, not null) must outlive the runner.
absl::StatusOr<std::unique_ptr<ProblemRunner>> NewProblemRunner(const v1::Problem& problem, Device* device,
                                                                uint64_t seed, RunnerLibraries* libraries);

// Tests only (the worker's KTUNE_WORKER_FAKE_DEVICE=1): no GPU. Verify passes
// every recipe with a cubin or a cuBLASLt algorithm; timings are made up from
// the name expression (10-20 us; a GEMM over 10 us at 500 TFLOP/s takes up to
// twice that, so large GEMMs get sustained finals here too); a GEMM gets three
// made-up cuBLASLt algorithms (64 distinct bytes each) for `device`'s arch.
absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeProblemRunner(const v1::Problem& problem,
                                                                    const DeviceInfo& device);

// The v1::Problem of a norm or GEMM problem.
v1::Problem ProblemOf(const NormProblem& problem);
v1::Problem ProblemOf(const v1::GemmProblem& problem);

}  // namespace ktune
