// The tuning job for one norm problem, as stages of the one pipeline
// (tuner/run/pipeline.h): a search strategy proposes candidates from the
// (pruned) space; each batch is compiled through NVRTC in parallel (the
// compiled-kernel cache first), then every candidate runs on a
// CandidateExecutor, verified against the float64 reference and timed; the
// best few are re-measured and the winner is chosen with measurement noise in
// mind: candidates within noise of the fastest are a tie, broken by space
// order, so the same machine keeps giving the same winner. A backward's
// winner then has its reduce kernel's geometry tuned (TuneOptions::tune_reduce).
//
// Expected outcomes (compile error, wrong answer, fault, timeout, quarantined)
// are recorded per candidate; a candidate that faulted or hung is reported to
// `on_quarantine` so it is never run again in this environment. Only an
// invalid problem, an unusable executor or a cancellation is an error status.
// Thread-compatible: one tune at a time per executor.
#pragma once

#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/norm_config.h"
#include "tuner/core/problem.h"
#include "tuner/gpu/device.h"
#include "tuner/norm/norm_space.h"
#include "tuner/norm/search_strategy.h"
#include "tuner/run/candidate.h"  // CandidateStatus, CandidateId
#include "tuner/run/executor.h"
#include "tuner/run/measure.h"

namespace ktune {

struct CandidateOutcome {
  NormConfig config;
  CandidateStatus status = CandidateStatus::kNotMeasured;
  Timing timing;       // when status == kOk
  std::string detail;  // compile log excerpt, verification failure, fault
};

struct TuneProgress {
  std::string stage;  // "generated", "pruned", "compiled", "verified", "measured"
  int done = 0;
  int total = 0;
  double best_time_us = 0;  // 0 until something was measured
  std::string message;
  const CandidateOutcome* candidate = nullptr;  // set when one candidate finished
};

enum class SearchKind { kGrid, kCoordinateDescent };

struct TuneOptions {
  MeasureOptions measure;
  int compile_threads = 0;  // 0 = all cores
  int remeasure_top = 3;    // re-time this many best before choosing
  SpaceOptions space;       // pruned: false only to measure what pruning costs
  SearchKind search = SearchKind::kGrid;
  SearchBudget budget;                  // for kCoordinateDescent
  KernelCache* kernel_cache = nullptr;  // not owned; may be null
  // Backward: after the winner, try its reduce kernel's other geometries
  // (ReduceRowsCandidates) with the fused kernel fixed.
  bool tune_reduce = true;
  const std::atomic<bool>* cancelled = nullptr;  // checked between candidates
  // Candidates (CandidateId) that faulted or hung before: not run.
  std::set<std::string> quarantined;
  // Called for a candidate that faulted or hung: reason "fault" or "timeout".
  QuarantineFn on_quarantine;  // tuner/run/candidate.h
};

struct TuneResult {
  NormConfig config;
  LaunchRecipe recipe;  // with cubin and lowered names
  Timing timing;
  double throughput_tbs = 0;               // MinimumBytes / median time
  int candidates_generated = 0;            // the space
  int candidates_measured = 0;             // timed
  std::vector<CandidateOutcome> outcomes;  // one per space entry, in space order
  std::string strategy;
  double tune_seconds = 0;
  double compile_seconds = 0;  // NVRTC time summed over candidates compiled
  double run_seconds = 0;      // wall time verifying and timing on the device
  // Where the time went, for a tune that takes longer than it should: the
  // inputs and float64 reference (Prepare), every Verify call (run, the
  // device check, small outputs checked on the host; the first also walks
  // the whole output on the host) and every Time call, each summed wall time.
  double prepare_seconds = 0;
  double verify_seconds = 0;
  double time_seconds = 0;
  int kernel_cache_hits = 0;
  int compiled = 0;                  // candidates compiled by NVRTC in this tune
  int reduce_variants_measured = 0;  // backward: reduce geometries tried after the winner
};

using ProgressCallback = std::function<void(const TuneProgress&)>;

// Tunes `problem` on `executor`. REQUIRES: ValidateNormProblem(problem).ok().
// CANCELLED if options.cancelled was set; INTERNAL if no candidate passes
// verification (a bug, never expected).
absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, CandidateExecutor* executor, const TuneOptions& options,
                                    const ProgressCallback& progress = nullptr);

// The same, in this process on `device` (tests and benchmarks).
absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, Device* device, const TuneOptions& options,
                                    const ProgressCallback& progress = nullptr);

}  // namespace ktune
