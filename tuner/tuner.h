// The tuning job for one problem: generate and prune the space, compile every
// candidate through NVRTC in parallel, verify each on the GPU against the
// float64 reference, time the survivors, re-measure the best few, and pick a
// winner with measurement noise in mind.
//
// Expected outcomes (compile error, wrong answer) are recorded per candidate;
// only an unusable device or an invalid problem is an error status.
// Thread-compatible: one Tune at a time per Device.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/device.h"
#include "tuner/launch_recipe.h"
#include "tuner/measure.h"
#include "tuner/norm_config.h"
#include "tuner/norm_space.h"
#include "tuner/problem.h"

namespace ktune {

enum class CandidateStatus { kOk, kCompileError, kWrongAnswer, kLaunchError };
std::string CandidateStatusName(CandidateStatus status);

struct CandidateOutcome {
  NormConfig config;
  CandidateStatus status = CandidateStatus::kOk;
  Timing timing;       // when status == kOk
  std::string detail;  // compile log excerpt or verification failure
};

struct TuneProgress {
  std::string stage;  // "generated", "pruned", "compiled", "verified", "measured"
  int done = 0;
  int total = 0;
  double best_time_us = 0;  // 0 until something was measured
  std::string message;
  const CandidateOutcome* candidate = nullptr;  // set when one candidate finished
};

struct TuneOptions {
  MeasureOptions measure;
  int compile_threads = 0;  // 0 = all cores
  int remeasure_top = 3;    // re-time this many best before choosing
  SpaceOptions space;       // pruned: false only to measure what pruning costs
};

struct TuneResult {
  NormConfig config;
  LaunchRecipe recipe;  // with cubin and lowered names
  Timing timing;
  double throughput_tbs = 0;  // MinimumBytes / median time
  int candidates_generated = 0;
  int candidates_measured = 0;
  std::vector<CandidateOutcome> outcomes;
  double tune_seconds = 0;
};

using ProgressCallback = std::function<void(const TuneProgress&)>;

// Tunes `problem` on `device`. REQUIRES: ValidateNormProblem(problem).ok().
// INTERNAL if no candidate passes verification (a bug, never expected).
absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, Device* device,
                                    const TuneOptions& options,
                                    const ProgressCallback& progress = nullptr);

}  // namespace ktune
