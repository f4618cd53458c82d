// Where candidates run. The tuner hands every compiled candidate of one
// problem to a CandidateExecutor, which verifies it against the reference
// (float64 for norms, tuner/gemm_runner.h for GEMM) and times it. Two implementations: in this process on a Device
// (tests, benchmarks), and in a worker process (tuner/worker.h), which is what
// ktuned uses so that a faulting or hanging candidate cannot take it down.
//
// Outcomes: a wrong answer is a value (VerifyResult::ok == false). A candidate
// that faulted is ABORTED, one that hung past the watchdog DEADLINE_EXCEEDED;
// after either the executor is usable again (the worker was restarted and the
// problem prepared again). Other errors mean the executor cannot run anything.
// Thread-compatible.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/device.h"
#include "tuner/launch_recipe.h"
#include "tuner/measure.h"
#include "tuner/norm_runner.h"
#include "tuner/problem.h"

namespace ktune {

class CandidateExecutor {
 public:
  virtual ~CandidateExecutor() = default;

  // The device candidates run on.
  virtual const DeviceInfo& device() const = 0;
  // Allocates inputs and outputs for `problem`; later calls run its candidates.
  virtual absl::Status Prepare(const NormProblem& problem) = 0;
  // The same for a GEMM problem; its candidates are kernel recipes of the
  // GEMM templates or cuBLASLt recipes (CublasLtCandidates).
  virtual absl::Status PrepareGemm(const v1::GemmProblem& problem) = 0;
  // Up to `max` algorithms of cuBLASLt's heuristic for the prepared GEMM, as
  // recipes, best first (the first is cuBLASLt's default). Empty when
  // cuBLASLt is not available here or does not serve the problem.
  virtual absl::StatusOr<std::vector<LaunchRecipe>> CublasLtCandidates(int max) = 0;
  virtual absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) = 0;
  // REQUIRES: Verify(recipe) passed.
  virtual absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) = 0;
};

// Runs candidates in this process on `device` (not owned). A faulting kernel
// poisons the process's CUDA context: use it where that is acceptable.
std::unique_ptr<CandidateExecutor> NewInProcessExecutor(Device* device, uint64_t seed = 1);

}  // namespace ktune
