#include "tuner/norm/norm_tuner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_runner.h"
#include "tuner/run/executor.h"
#include "tuner/run/measure.h"
#include "tuner/run/pipeline.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxDetail = 2000;  // characters of a compile log kept per candidate

std::string Excerpt(const std::string& text) {
  if (text.size() <= kMaxDetail) return text;
  return absl::StrCat(text.substr(0, kMaxDetail), "\n... (", text.size() - kMaxDetail, " more characters)");
}

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// The norm tuner's stages: the space (NormSearchSpace) in its order, batches
// from the search strategy, progress as TuneProgress, and as finals the best
// `remeasure_top` re-timed, the earliest in space order among those tied with
// the fastest, then for a backward its reduce kernel's geometries.
class NormStages final : public TuneStages {
 public:
  NormStages(const NormProblem& problem, const DeviceInfo& info, const TuneOptions& options,
             const ProgressCallback& progress, Clock::time_point start, TuneResult* result)
      : problem_(problem), info_(info), options_(options), progress_(progress), start_(start), result_(*result) {}

  absl::StatusOr<int> Generate() override {
    // The space, already pruned by CanImplement and the grid's rules.
    space_ = NormSearchSpace(problem_, info_, options_.space);
    if (space_.empty()) {
      return absl::UnimplementedError(
          absl::StrCat("no kernel configuration implements ", CanonicalKey(problem_), " on ", Arch(info_)));
    }
    const int total = static_cast<int>(space_.size());
    strategy_ = options_.search == SearchKind::kGrid
                    ? NewGridSearch()
                    : NewCoordinateDescent(HeuristicNormConfig(problem_, info_), options_.budget);
    result_.strategy = strategy_->name();
    result_.candidates_generated = total;
    result_.outcomes.resize(total);
    for (int i = 0; i < total; ++i) result_.outcomes[i].config = space_[i];
    Emit({"generated", total, total, 0,
          absl::StrCat(total, " candidates for ", CanonicalKey(problem_), " (", strategy_->name(), ")"), nullptr});
    return total;
  }

  absl::StatusOr<LaunchRecipe> Recipe(int i) override { return NormLaunchRecipe(problem_, space_[i], info_); }

  std::vector<int> NextBatch(const Pipeline& pipeline) override {
    std::vector<std::optional<double>> measured_us(space_.size());
    for (size_t i = 0; i < space_.size(); ++i) {
      const CandidateRecord& r = pipeline.record(static_cast<int>(i));
      if (r.status == CandidateStatus::kOk) measured_us[i] = r.timing.median_us;
    }
    return strategy_->Next(space_, measured_us, pipeline.tried(), Seconds(start_));
  }

  std::string Name(int i) const override { return ToString(space_[i]); }

  void OnEvent(const Pipeline& pipeline, const PipelineEvent& e) override {
    const CandidateOutcome* candidate = nullptr;
    if (e.candidate >= 0) {
      Sync(pipeline, e.candidate);
      candidate = &result_.outcomes[e.candidate];
    }
    Emit({e.stage, e.done, e.total, e.best_us, e.message, candidate});
  }

  absl::Status Finish(Pipeline& pipeline) override {
    for (int i = 0; i < static_cast<int>(space_.size()); ++i) Sync(pipeline, i);
    if (absl::Status s = RemeasureAndPick(pipeline); !s.ok()) return s;
    if (absl::Status s = TuneReduce(pipeline); !s.ok()) return s;
    result_.candidates_measured = pipeline.measured;
    result_.compiled = pipeline.compiled;
    result_.kernel_cache_hits = pipeline.kernel_cache_hits;
    result_.compile_seconds = pipeline.compile_seconds;
    result_.prepare_seconds = pipeline.prepare_seconds;
    result_.verify_seconds = pipeline.verify_seconds;
    result_.time_seconds = pipeline.time_seconds;
    result_.run_seconds = pipeline.run_seconds + finals_seconds_;
    result_.throughput_tbs = result_.timing.median_us > 0 ? static_cast<double>(MinimumBytes(problem_)) /
                                                                (result_.timing.median_us * 1e-6) / 1e12
                                                          : 0;
    result_.tune_seconds = Seconds(start_);
    return absl::OkStatus();
  }

 private:
  void Emit(const TuneProgress& p) {
    if (progress_) progress_(p);
  }

  // The pipeline's record of candidate i, as the result's outcome.
  void Sync(const Pipeline& pipeline, int i) {
    const CandidateRecord& r = pipeline.record(i);
    CandidateOutcome& o = result_.outcomes[i];
    o.status = r.status;
    switch (r.status) {
      case CandidateStatus::kOk:
        o.timing = r.timing;
        break;
      case CandidateStatus::kCompileError:
        o.detail = Excerpt(r.message);
        break;
      case CandidateStatus::kLaunchError:
      case CandidateStatus::kFault:
      case CandidateStatus::kTimeout:
        o.detail = absl::StrCat(r.phase, ": ", r.message);
        break;
      default:
        o.detail = r.message;
    }
  }

  // The best few re-measured (fastest first), then the winner chosen with
  // noise in mind: the earliest in space order among those within the tie
  // window of the fastest.
  absl::Status RemeasureAndPick(Pipeline& pipeline) {
    std::vector<CandidateOutcome>& outcomes = result_.outcomes;
    const int total = static_cast<int>(space_.size());
    std::vector<int> ranked;
    for (int i = 0; i < total; ++i) {
      if (outcomes[i].status == CandidateStatus::kOk) ranked.push_back(i);
    }
    if (ranked.empty()) {
      std::string why;
      for (const CandidateOutcome& o : outcomes) {
        if (o.status == CandidateStatus::kNotMeasured || why.size() > 4000) continue;
        absl::StrAppend(&why, "\n  ", ToString(o.config), ": ", CandidateStatusName(o.status), ": ",
                        o.detail.substr(0, 300));
      }
      return absl::InternalError(
          absl::StrCat("no candidate for ", CanonicalKey(problem_), " passed verification:", why));
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](int a, int b) { return outcomes[a].timing.median_us < outcomes[b].timing.median_us; });
    const int finalists = std::clamp(options_.remeasure_top, 1, static_cast<int>(ranked.size()));
    ranked.resize(finalists);
    const auto remeasure_start = Clock::now();
    for (int r = 0; r < finalists; ++r) {
      if (pipeline.cancelled()) return absl::CancelledError("the tune was cancelled");
      const int i = ranked[r];
      absl::StatusOr<Timing> t = pipeline.Time(pipeline.recipe(i), options_.measure);
      if (!t.ok()) return t.status();  // it ran moments ago: a failure now is not the candidate's
      outcomes[i].timing = *t;
      pipeline.best_us = std::min(pipeline.best_us, t->median_us);
      Emit({"measured", r + 1, finalists, pipeline.best_us,
            absl::StrFormat("re-measured %s: %.2f us (spread %.1f%%)", ToString(space_[i]), t->median_us,
                            100 * t->spread),
            &outcomes[i]});
    }
    finals_seconds_ += Seconds(remeasure_start);
    int best = ranked[0];
    for (int i : ranked) {
      if (outcomes[i].timing.median_us < outcomes[best].timing.median_us) best = i;
    }
    const Timing& best_timing = outcomes[best].timing;
    const double window = TieWindowUs(best_timing.spread, best_timing.median_us);
    int winner = best;
    for (int i : ranked) {  // the earliest in space order among the tied
      if (outcomes[i].timing.median_us <= best_timing.median_us + window && i < winner) winner = i;
    }
    result_.config = space_[winner];
    result_.recipe = pipeline.recipe(winner);
    result_.timing = outcomes[winner].timing;
    return absl::OkStatus();
  }

  // Backward: the partials' reduce kernel, tuned with the fused kernel fixed
  // (its geometry does not change the fused kernel's time, so a second,
  // one-knob search replaces multiplying the space). The winner (derived
  // geometry) is re-timed beside the variants; a variant replaces it only
  // when faster by more than the tie window.
  absl::Status TuneReduce(Pipeline& pipeline) {
    const std::vector<int> reduce_rows =
        options_.tune_reduce ? ReduceRowsCandidates(problem_, result_.config) : std::vector<int>();
    if (reduce_rows.empty()) return absl::OkStatus();
    const auto reduce_start = Clock::now();
    std::vector<NormConfig> variants;
    std::vector<LaunchRecipe> recipes;
    for (int rows : reduce_rows) {
      NormConfig c = result_.config;
      c.reduce_rows = rows;
      absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(problem_, c, info_);
      if (!r.ok() || pipeline.quarantined(*r)) continue;
      variants.push_back(c);
      recipes.push_back(*std::move(r));
    }
    std::vector<LaunchRecipe*> pointers;
    for (LaunchRecipe& r : recipes) pointers.push_back(&r);
    const CompileBatchResult compiled = pipeline.Compile(pointers);
    absl::StatusOr<Timing> base = pipeline.Time(result_.recipe, options_.measure);
    if (!base.ok()) return base.status();  // it ran moments ago: not the candidate's fault
    Timing best = *base;
    for (size_t v = 0; v < variants.size(); ++v) {
      if (!compiled.results[v].ok) continue;
      if (pipeline.cancelled()) return absl::CancelledError("the tune was cancelled");
      absl::StatusOr<VerifyResult> ok = pipeline.Verify(recipes[v]);
      if (!ok.ok() && EndsTune(ok.status())) return ok.status();
      if (!ok.ok()) {
        ClassifyRunFailure(ok.status(), recipes[v], options_.on_quarantine, std::string(ok.status().message()));
        continue;
      }
      if (!ok->ok) continue;
      absl::StatusOr<Timing> t = pipeline.Time(recipes[v], options_.measure);
      if (!t.ok() && EndsTune(t.status())) return t.status();
      if (!t.ok()) continue;
      ++result_.reduce_variants_measured;
      Emit({"measured", pipeline.measured, pipeline.proposed, pipeline.best_us,
            absl::StrFormat("%s: %.2f us (reduce kernel)", ToString(variants[v]), t->median_us), nullptr});
      const double window = TieWindowUs(base->spread, base->median_us);
      if (t->median_us < base->median_us - window && t->median_us < best.median_us) {
        best = *t;
        result_.config = variants[v];
        result_.recipe = recipes[v];
        result_.timing = *t;
      }
    }
    finals_seconds_ += Seconds(reduce_start);
    return absl::OkStatus();
  }

  const NormProblem& problem_;
  const DeviceInfo& info_;
  const TuneOptions& options_;
  const ProgressCallback& progress_;
  const Clock::time_point start_;
  TuneResult& result_;
  std::vector<NormConfig> space_;
  std::unique_ptr<SearchStrategy> strategy_;
  double finals_seconds_ = 0;  // wall time of the re-measurement and the reduce pass
};

}  // namespace

absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, Device* device, const TuneOptions& options,
                                    const ProgressCallback& progress) {
  if (device == nullptr) return absl::FailedPreconditionError("TuneNorm needs a device");
  std::unique_ptr<CandidateExecutor> executor = NewRunnerExecutor(
      device->info(), [device](const v1::Problem& p) { return NormProblemRunner(p.norm(), device, 1); });
  return TuneNorm(problem, executor.get(), options, progress);
}

absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, CandidateExecutor* executor, const TuneOptions& options,
                                    const ProgressCallback& progress) {
  const auto start = Clock::now();
  if (absl::Status s = ValidateNormProblem(problem); !s.ok()) return s;
  if (executor == nullptr) return absl::FailedPreconditionError("TuneNorm needs an executor");
  TuneResult result;
  NormStages stages(problem, executor->device(), options, progress, start, &result);
  PipelineOptions pipeline_options = CommonPipelineOptions(options);
  pipeline_options.compile_threads = options.compile_threads;
  Pipeline pipeline(ProblemOf(problem), executor, &stages, std::move(pipeline_options));
  if (absl::Status s = pipeline.Run(); !s.ok()) return s;
  return result;
}

}  // namespace ktune
