// What runs the candidates of one prepared problem on a Device: the
// per-problem half of a CandidateExecutor (tuner/run/executor.h). A runner owns
// the problem's inputs, outputs and reference; it verifies a compiled
// candidate against that reference and times it by the one measurement
// protocol (tuner/run/measure.h). NormRunner (tuner/norm/norm_runner.h) and
// GemmRunner (tuner/gemm/gemm_runner.h) implement it; NewProblemRunner
// (tuner/problem_runners.h) is the one place that picks the runner for a
// problem's kind.
//
// Outcomes: a wrong answer is a value (VerifyResult::ok == false); a launch
// failure or fault is an error status (the caller reads it with
// StatusOfRunFailure, tuner/run/candidate.h).
// Thread-compatible: one call at a time.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/run/measure.h"

namespace ktune {

struct VerifyResult {
  bool ok = false;
  std::string detail;    // first mismatch, unwritten element, or NaN when !ok
  double max_error = 0;  // max |out - ref| / (atol + rtol * |ref|) over the outputs
};

class ProblemRunner {
 public:
  virtual ~ProblemRunner() = default;

  // Runs the compiled recipe once on fresh (poisoned) outputs and checks
  // every output element against the reference.
  virtual absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) = 0;

  // Times the recipe, inputs rotated past the L2. REQUIRES: Verify passed.
  virtual absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) = 0;

  // Up to `max` candidates a library offers for this problem (for GEMM,
  // cuBLASLt's heuristic), as recipes that need no compile, best first (the
  // first is the library's own choice). Empty when no library serves the
  // problem or none is available here.
  virtual absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) = 0;
};

}  // namespace ktune
