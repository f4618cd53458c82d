// The tuning pipeline, written once for every op: generate -> prune
// (quarantine) -> compile through the kernel cache -> verify and time on a
// CandidateExecutor -> finals -> pick. What differs between ops is behind
// TuneStages, which the norm tuner (tuner/norm/norm_tuner.cc, TuneNorm) and the GEMM
// tuner (tuner/gemm/gemm_tuner.cc, TuneGemm) implement: which candidates exist
// and in what order, which to measure next, what runs just before a first
// timing (GEMM's heat-up), and the finals and pick that turn the first
// round's records into a winner and the op's result.
//
// The first round, per candidate, in the order NextBatch proposes them:
//   1. its recipe (TuneStages::Recipe; a failure is a kCompileError record);
//   2. a candidate whose CandidateId is in `quarantined` is not compiled or
//      run (kQuarantined, a "pruned" event);
//   3. the batch compiles through the kernel cache (CompileThroughCache,
//      tuner/compile/compile_through_cache.h; "compiled" events; a compile error is
//      a kCompileError record with the NVRTC log);
//   4. each compiled candidate, after a cancellation check, is verified
//      (a wrong answer is kWrongAnswer; "verified" when correct), then
//      timed by `measure` ("measured"). A failed Verify or Time is read by
//      StatusOfRunFailure (tuner/run/candidate.h): a fault or timeout is reported
//      to on_quarantine and the tune goes on; UNAVAILABLE (the executor is
//      gone) ends it.
// Library candidates (CandidateExecutor::LibraryCandidates, asked for after
// Prepare when PipelineOptions::library_candidates > 0) join the list after
// the generated ones; they need no compile.
//
// Errors: a stage's error, Prepare's, UNAVAILABLE from the executor, and
// CANCELLED (checked before every run and by the stages' finals) end the
// tune; everything a candidate does wrong is a record.
// Thread-compatible: one Run per Pipeline; events may come from compile
// threads, serialized.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/compile/compile_through_cache.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/run/candidate.h"
#include "tuner/run/executor.h"
#include "tuner/run/measure.h"

namespace ktune {

// One candidate's first round.
struct CandidateRecord {
  CandidateStatus status = CandidateStatus::kNotMeasured;
  Timing timing;         // the first round's, when kOk
  std::string phase;     // "verify" or "time": where a run failed
  std::string message;   // the failure's message, the wrong answer's detail, or the NVRTC log
  bool library = false;  // a library candidate (LibraryCandidates)
};

// What the pipeline tells the stages as it goes (TuneStages::OnEvent).
struct PipelineEvent {
  std::string stage;  // "pruned", "compiled", "verified", "measured"
  int done = 0;
  int total = 0;
  double best_us = 0;  // the fastest first-round median so far; 0 before any
  std::string message;
  int candidate = -1;  // the candidate it is about, or -1
};

struct PipelineOptions {
  MeasureOptions measure;                              // the first round
  int compile_threads = 0;                             // 0 = all cores
  int library_candidates = 0;                          // asked of LibraryCandidates after Prepare; 0: not asked
  KernelCache* kernel_cache = nullptr;                 // not owned; may be null
  const std::atomic<bool>* cancelled = nullptr;        // not owned; may be null
  const std::set<std::string>* quarantined = nullptr;  // CandidateIds not to run; not owned; may be null
  QuarantineFn on_quarantine;                          // may be empty
};

// The options an op's own options carry under the same names (TuneOptions,
// GemmTuneOptions): measure, kernel_cache, cancelled, quarantined (kept by
// pointer: `o` must outlive the pipeline) and on_quarantine.
template <typename OpOptions>
PipelineOptions CommonPipelineOptions(const OpOptions& o) {
  PipelineOptions p;
  p.measure = o.measure;
  p.kernel_cache = o.kernel_cache;
  p.cancelled = o.cancelled;
  p.quarantined = &o.quarantined;
  p.on_quarantine = o.on_quarantine;
  return p;
}

class Pipeline;

// The per-op stages. Indices are into the candidate list: Generate's
// candidates first (0 .. Generate() - 1, in the op's fixed order, the tie
// order), then the library's.
class TuneStages {
 public:
  virtual ~TuneStages() = default;

  // The candidates: returns how many, in their fixed order. An error ends the
  // tune before Prepare.
  virtual absl::StatusOr<int> Generate() = 0;
  // Candidate i's recipe, uncompiled; asked once, when it is first proposed.
  // REQUIRES: i < Generate()'s count. An error is a kCompileError record.
  virtual absl::StatusOr<LaunchRecipe> Recipe(int i) = 0;
  // The library's candidates joined the list at indices first, first + 1, ...
  // (recipes: what LibraryCandidates returned, or its error other than
  // UNAVAILABLE). An error ends the tune.
  virtual absl::Status OnLibraryCandidates(int first, const absl::StatusOr<std::vector<LaunchRecipe>>& recipes);
  // The next candidates to measure (empty: the first round is over). Each is
  // proposed once; `pipeline` has every record so far.
  virtual std::vector<int> NextBatch(const Pipeline& pipeline) = 0;
  // Candidate i's name in event messages.
  virtual std::string Name(int i) const = 0;
  // Runs after a candidate passed verification and before it is first timed;
  // a failure is that candidate's (read as a failed Time).
  virtual absl::Status BeforeTime(Pipeline& pipeline, int i);
  // The detail passed to on_quarantine for a run that failed in `phase`;
  // by default "<phase>: <message>".
  virtual std::string QuarantineDetail(const std::string& phase, const absl::Status& s) const;
  // Every event, as it happens (possibly from compile threads, serialized).
  virtual void OnEvent(const Pipeline& pipeline, const PipelineEvent& event);
  // After the first round: finals and pick. Its error is the tune's.
  virtual absl::Status Finish(Pipeline& pipeline) = 0;
};

class Pipeline {
 public:
  // None of the pointers is owned; all must outlive Run.
  Pipeline(v1::Problem problem, CandidateExecutor* executor, TuneStages* stages, PipelineOptions options);

  // Runs the tune: Generate, Prepare, library candidates, the first round in
  // batches, then Finish.
  absl::Status Run();

  // For the stages.
  CandidateExecutor* executor() const { return executor_; }
  const PipelineOptions& options() const { return options_; }
  bool cancelled() const { return options_.cancelled != nullptr && options_.cancelled->load(); }
  bool quarantined(const LaunchRecipe& recipe) const;
  int count() const { return static_cast<int>(records_.size()); }
  const CandidateRecord& record(int i) const { return records_[i]; }
  // Whether NextBatch proposed candidate i, for each i.
  const std::vector<bool>& tried() const { return proposed_; }
  // Candidate i's recipe: compiled once its record is past compile.
  const LaunchRecipe& recipe(int i) const { return recipes_[i]; }
  // Verify and Time through the executor, their wall time summed.
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe);
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options);
  // Sends an event to the stages (serialized with the compile threads').
  void Emit(PipelineEvent event);
  // Compiles through the kernel cache with the pipeline's threads, counted
  // into the totals below.
  CompileBatchResult Compile(const std::vector<LaunchRecipe*>& recipes,
                             const std::function<void(int)>& on_compiled = nullptr);

  // Totals. best_us: the fastest first-round median (stages may lower it).
  double best_us = 0;
  int proposed = 0;  // candidates proposed by NextBatch
  int verified = 0;  // first-round Verify calls
  int measured = 0;  // first-round Time calls
  int compiled = 0;  // recipes NVRTC compiled
  int kernel_cache_hits = 0;
  double compile_seconds = 0;       // NVRTC time, summed over recipes
  double compile_wall_seconds = 0;  // wall time of the NVRTC steps
  double prepare_seconds = 0;
  double verify_seconds = 0;  // every Verify
  double time_seconds = 0;    // every Time
  double run_seconds = 0;     // wall time of the first round's runs (stages add their finals')

 private:
  absl::Status RunBatch(const std::vector<int>& batch);
  absl::Status RunCandidate(int i);

  const v1::Problem problem_;
  CandidateExecutor* const executor_;
  TuneStages* const stages_;
  const PipelineOptions options_;
  std::vector<CandidateRecord> records_;
  std::vector<LaunchRecipe> recipes_;
  std::vector<bool> proposed_;
  std::mutex event_mu_;  // events may come from compile threads
};

}  // namespace ktune
