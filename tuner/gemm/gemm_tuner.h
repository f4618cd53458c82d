// Tuning one GEMM problem over every candidate source under one measurement:
// our templates' pruned spaces (mma.sync, tuner/gemm/gemm_space.h; Hopper's wgmma
// on sm_90, tuner/gemm/gemm_wgmma_space.h; for M <= 16, tuner/gemm/gemm_skinny_space.h)
// and the
// algorithms cuBLASLt's heuristic returns (tuner/gpu/cublaslt.h). Every candidate
// is verified against the reference, timed by the protocol of
// tuner/run/measure.h; the fastest few, cuBLASLt's default choice and the best
// own template are re-measured together (in interleaved passes, on a GPU
// already busy: clocks fall under a large GEMM's power draw, see TuneGemm),
// and the winner is the fastest, unless cuBLASLt's default ties it (within
// how far the medians moved between passes, 1-3%). Problems of 100 us and
// more are decided by sustained finals instead: the fastest few, the best
// template and the default each timed after heat of its own, at the clocks
// its own power draw holds (GemmTuneOptions); where their tie window keeps
// the default against a faster finalist, the two are timed head to head,
// round by round, and that decides. So the answer is never
// measurably slower than what cuBLASLt would have run: adding a source can
// only make it faster.
//
// TuneGemm runs as stages of the one tuning pipeline (tuner/run/pipeline.h):
// its own finals and tie-breaks are GemmStages::Finish in gemm_tuner.cc.
// Candidates run on a CandidateExecutor: in ktuned the worker process
// (tuner/run/worker.h), so a candidate that faults or hangs fails alone (its
// outcome says so) and the tune goes on; in benchmarks, in process.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/gemm/gemm_runner.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/run/candidate.h"
#include "tuner/run/executor.h"
#include "tuner/run/measure.h"

namespace ktune {

struct GemmTuneOptions {
  GemmSpaceOptions space;
  int cublaslt_algos = 16;  // asked of cuBLASLt's heuristic
  // Before the first round the GPU is kept busy this long with one candidate,
  // so that every candidate is timed at the clocks of a busy GPU (see TuneGemm).
  double heat_ms = 200;
  MeasureOptions measure;  // the first round, every candidate
  int finalists = 5;       // re-measured, besides cuBLASLt's default and the best two templates
  // The finalists are re-measured in `final_passes` interleaved passes of
  // `final_measure` each; a finalist's timing is the median pass.
  MeasureOptions final_measure{2, 20};
  int final_passes = 5;
  // Sustained finals, for problems whose fastest finalist takes at least
  // `sustained_min_us`: the fastest `sustained_finalists` of the interleaved
  // finals, the best template among them and cuBLASLt's default are each
  // timed after `sustained_heat_ms` of itself, for about `sustained_ms` of
  // calls, in `sustained_rounds` rounds; these timings pick the winner (see
  // TuneGemm for why). 0 finalists: none.
  int sustained_finalists = 3;
  int sustained_rounds = 3;
  double sustained_heat_ms = 200;
  double sustained_ms = 100;
  double sustained_min_us = 100;
  // Where the sustained finals' tie window keeps cuBLASLt's default against a
  // faster median, the fastest and the default are timed head to head in
  // this many rounds (TimeHeadToHead) and the fastest answers if it wins
  // them (HeadToHeadFavoursFirst). 0: the window decides alone. (At fp8
  // 8192 x 6144 x 4096 the window kept the default against a template 2.3%
  // faster sustained, which then beat it by 2.8-4.0% in all 8 rounds:
  // bench/results/2026-12-01-gemm-tie-break-25d0244.md, "The head-to-head", a266442.)
  // Why: bench/results/decisions/gemm-tie-break.md
  int tie_break_rounds = 8;
  KernelCache* kernel_cache = nullptr;           // not owned; may be null
  const std::atomic<bool>* cancelled = nullptr;  // checked between candidates
  // Candidates (CandidateId, tuner/run/candidate.h) that faulted or hung before: not run.
  std::set<std::string> quarantined;
  // Called for a candidate that faulted or hung: reason "fault" or "timeout".
  QuarantineFn on_quarantine;  // tuner/run/candidate.h
};

// Two candidates timed against each other as the sustained finals time each
// finalist: after `heat_ms` of itself, `calls` calls, in `rounds` rounds, `a`
// first in even rounds and `b` first in odd ones. On a power-limited GPU a
// timing of one window mostly reads where the power controller has left the
// clocks (they wander +-4% from window to window:
// bench/results/2026-12-01-gemm-power-tail-split-54c97c5.md), and the two
// timings of one round see nearly the same state; so each round gives a
// ratio, and their median compares the two with much less of that noise
// than one median per candidate over rounds seconds apart.
struct HeadToHead {
  std::vector<double> a_us, b_us;  // per round, each a window's median
  std::vector<double> ratios;      // per round, b_us / a_us: above 1 where a ran faster
  double median_ratio = 0;
};
// INVALID_ARGUMENT for rounds < 1 or calls < 1; CANCELLED when `cancelled`
// (may be null) says so between timings; any failure of the executor as is.
absl::StatusOr<HeadToHead> TimeHeadToHead(CandidateExecutor* executor, const LaunchRecipe& a, const LaunchRecipe& b,
                                          int rounds, double heat_ms, int calls,
                                          const std::atomic<bool>* cancelled = nullptr);
// Whether `a` won the head-to-head: faster in every round but at most one,
// and by at least the smallest tie window (1%) at the median round. One
// round may go the other way: a single window can meet a sudden clock step;
// a drift that lasts touches both sides of a round.
bool HeadToHeadFavoursFirst(const HeadToHead& h);

struct GemmCandidateOutcome {
  std::string name;    // GemmCandidate::Name()
  std::string status;  // "ok", "wrong: <detail>", "fault: <error>", "timeout: <error>",
                       // "failed: <error>", "quarantined", "compile failed: <log>"
  Timing timing;       // final measurement for finalists (CombinePasses), else the first round's
  // Whether `timing` is from the final passes. The two rounds are not
  // comparable: the finals run back to back on a GPU the first round has
  // heated, and read a few percent slower than first-round figures.
  bool finalist = false;
  // Sustained finalists only: their rounds combined (CombinePasses).
  std::optional<Timing> sustained = std::nullopt;
};

// The three timings compared are of one protocol: the sustained finals' where
// they ran (`sustained`), else the interleaved finals'.
struct GemmTuneResult {
  GemmCandidate winner;
  Timing winner_timing;
  std::optional<Timing> cublaslt_default;  // cuBLASLt's own choice, measured with the finalists
  std::optional<Timing> best_template;     // the fastest own template among the finalists
  std::string best_template_name;
  // The candidates behind those two timings, so a caller can time them again
  // side by side (bench/gemm_bench.cc's head-to-head rounds).
  std::optional<GemmCandidate> cublaslt_default_candidate;
  std::optional<GemmCandidate> best_template_candidate;
  bool sustained = false;  // whether the sustained finals ran and picked the winner
  // Where the tie-break ran (GemmTuneOptions::tie_break_rounds): the fastest
  // sustained finalist (`tie_break_challenger`) against the default.
  std::optional<HeadToHead> tie_break;
  std::string tie_break_challenger;
  std::vector<GemmCandidateOutcome> outcomes;
  int template_candidates = 0;
  int cublaslt_candidates = 0;
  int compiled = 0;           // template candidates compiled by NVRTC in this tune
  int kernel_cache_hits = 0;  // template candidates found compiled
  double compile_seconds = 0;
  double tune_seconds = 0;
};

// The finalists' winner: the fastest median, unless `preferred` (cuBLASLt's
// default) is within the tie window of it (the fastest's pass_range clamped
// to [1%, 3%]) and the fastest did not beat it by at least 1% in every one
// of their interleaved passes (`passes[f]`: finalist f's passes, pass p of
// every finalist timed in the same round); returns the index into
// `finals`. Other candidates get no preference: among them a tie goes to
// the faster, since nothing is safer about one template config or cuBLASLt
// algorithm than another (a tie-break by space order answered four of five
// fp8 8192 x 4096 x 4096 tunes with a wgmma config 1.5-2.6% slower than the
// fastest finalist: bench/results/2026-11-30-gemm-skinny-pipelined-fb2fcd5.md,
// "Five tunes of one fp8 shape", fb2fcd5).
// REQUIRES: finals non-empty; passes.size() == finals.size(); preferred, if
// any, < finals.size().
size_t PickGemmWinner(const std::vector<Timing>& finals, const std::vector<std::vector<Timing>>& passes,
                      std::optional<size_t> preferred);

// Keeps the GPU busy running `recipe` for about heat_ms (20 to 5000 calls,
// sized by a 20-call probe), so what is timed next runs at the clocks a
// power-limited GPU holds under load, not those it starts from idle.
absl::Status HeatUp(CandidateExecutor* executor, const LaunchRecipe& recipe, double heat_ms);

// One timing from interleaved passes over the same candidate: the median of
// the pass medians and percentiles, the repetitions summed, pass_range set,
// and the spread widened to cover it.
// REQUIRES: passes non-empty.
Timing CombinePasses(const std::vector<Timing>& passes);

// REQUIRES: ValidateGemmProblem(problem) OK. NOT_FOUND if no candidate of
// any source ran the problem correctly; UNAVAILABLE if the executor is gone;
// CANCELLED if options.cancelled was set.
absl::StatusOr<GemmTuneResult> TuneGemm(const v1::GemmProblem& problem, CandidateExecutor* executor,
                                        const GemmTuneOptions& options = GemmTuneOptions());

}  // namespace ktune
