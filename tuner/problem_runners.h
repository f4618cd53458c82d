// The one place that maps a problem's kind to its runner: NewProblemRunner
// (a NormRunner or a GemmRunner, tuner/run/problem_runner.h) for a v1::Problem,
// and the worker's fake-device test double. Executors (tuner/run/executor.h) and
// the worker (tuner/run/worker.h) never look at the kind themselves. (This
// switch is what the op registry will own.)
// Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/problem.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/gpu/device.h"
#include "tuner/run/executor.h"
#include "tuner/run/problem_runner.h"
#include "tuner/run/worker.h"

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

// Runs candidates of every op in this process on `device` (not owned):
// NewRunnerExecutor over NewProblemRunner. A faulting kernel poisons the
// process's CUDA context: use it where that is acceptable.
std::unique_ptr<CandidateExecutor> NewInProcessExecutor(Device* device, uint64_t seed = 1);

// What ktuned's worker process runs candidates on (RunWorker): every op's
// runners over its GPU, or the fake runners.
WorkerRunners BuiltinWorkerRunners();

}  // namespace ktune
