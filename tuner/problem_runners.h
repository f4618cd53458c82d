// From a problem to what runs its candidates, over the op families of this
// build (BuiltinOps): each family makes its own runner (Op::NewRunner,
// Op::NewFakeRunner), so executors (tuner/run/executor.h), the worker
// (tuner/run/worker.h) and this file never look at the kind.
// Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/gpu/device.h"
#include "tuner/run/executor.h"
#include "tuner/run/problem_runner.h"
#include "tuner/run/runner_libraries.h"
#include "tuner/run/worker.h"

namespace ktune {

// The runner of `problem`'s family (Op::NewRunner) on `device` (not owned),
// inputs drawn from `seed`. The registry's error for a problem of no kind
// or of a kind no op serves.
absl::StatusOr<std::unique_ptr<ProblemRunner>> NewProblemRunner(const v1::Problem& problem, Device* device,
                                                                uint64_t seed, RunnerLibraries* libraries);

// Tests only (the worker's KTUNE_WORKER_FAKE_DEVICE=1): the family's fake
// runner (Op::NewFakeRunner, tuner/run/fake_runner.h), no GPU.
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
