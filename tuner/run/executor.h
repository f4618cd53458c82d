// Where candidates run. The tuner hands every compiled candidate of one
// problem to a CandidateExecutor, which verifies it against the problem's
// reference and times it. Two implementations: in this process on a Device
// (tests, benchmarks), and in a worker process (tuner/run/worker.h), which is what
// ktuned uses so that a faulting or hanging candidate cannot take it down.
// Neither knows the kinds of problems: Prepare hands the v1::Problem to
// NewProblemRunner (tuner/problem_runners.h), and every later call goes to
// the ProblemRunner it made (tuner/run/problem_runner.h).
//
// Outcomes: a wrong answer is a value (VerifyResult::ok == false). A candidate
// that faulted is ABORTED, one that hung past the watchdog DEADLINE_EXCEEDED;
// after either the executor is usable again (the worker was restarted and the
// problem prepared again). UNAVAILABLE means the executor cannot run anything
// (tuner/run/candidate.h: StatusOfRunFailure, EndsTune).
// Thread-compatible.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/gpu/device.h"
#include "tuner/run/measure.h"
#include "tuner/run/problem_runner.h"

namespace ktune {

class CandidateExecutor {
 public:
  virtual ~CandidateExecutor() = default;

  // The device candidates run on.
  virtual const DeviceInfo& device() const = 0;
  // Allocates inputs and outputs for `problem` (any kind NewProblemRunner
  // knows; the previous problem's are freed first); later calls run its
  // candidates. INVALID_ARGUMENT for a problem that does not validate.
  virtual absl::Status Prepare(const v1::Problem& problem) = 0;
  // Up to `max` candidates a library offers for the prepared problem
  // (ProblemRunner::LibraryCandidates: for GEMM, cuBLASLt's heuristic), best
  // first. FAILED_PRECONDITION before Prepare.
  virtual absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) = 0;
  virtual absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) = 0;
  // REQUIRES: Verify(recipe) passed.
  virtual absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) = 0;

  // For status: the process candidates run in (0: this one) and how often
  // it was restarted after a fault or hang. Unlike the rest, safe to call
  // from any thread while candidates run.
  virtual pid_t pid() const { return 0; }
  virtual int restarts() const { return 0; }
};

// Makes the runner of a prepared problem.
using ProblemRunnerFactory = std::function<absl::StatusOr<std::unique_ptr<ProblemRunner>>(const v1::Problem&)>;

// An executor on `device` whose Prepare asks `factory` for the problem's
// runner and whose other calls go to that runner: the in-process executor,
// the worker's fake device, and tests' fake runners.
std::unique_ptr<CandidateExecutor> NewRunnerExecutor(const DeviceInfo& device, ProblemRunnerFactory factory);

}  // namespace ktune
