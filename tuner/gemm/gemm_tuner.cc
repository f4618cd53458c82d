#include "tuner/gemm/gemm_tuner.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_interface.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/run/measure.h"
#include "tuner/run/pipeline.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxDetail = 500;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

std::string Short(const std::string& s) { return s.size() <= kMaxDetail ? s : s.substr(0, kMaxDetail) + " ..."; }

// What became of the first few candidates, for the error that says none ran:
// without it a caller (or a GPU test) learns only that every one failed.
std::string OutcomeDigest(const std::vector<GemmCandidateOutcome>& outcomes) {
  constexpr size_t kShown = 3;
  std::string digest;
  for (size_t i = 0; i < outcomes.size() && i < kShown; ++i) {
    absl::StrAppend(&digest, i == 0 ? "" : "; ", outcomes[i].name, ": ", Short(outcomes[i].status));
  }
  if (outcomes.size() > kShown) absl::StrAppend(&digest, "; and ", outcomes.size() - kShown, " more");
  return digest;
}

// Times each of `count` candidates once per round, `rounds` times, forward
// in even rounds and backward in odd ones: a drift within a round favours
// neither end of the order every time (PickGemmWinner compares round by
// round). Returns each candidate's timings, in round order. CANCELLED when
// `cancelled` says so between timings; any failure of `time` is returned as
// is (the candidates ran moments ago: a failure now is not theirs).
absl::StatusOr<std::vector<std::vector<Timing>>> TimeInAlternatingRounds(
    size_t count, int rounds, const std::function<bool()>& cancelled,
    const std::function<absl::StatusOr<Timing>(size_t)>& time) {
  std::vector<std::vector<Timing>> timings(count);
  for (int round = 0; round < std::max(rounds, 1); ++round) {
    for (size_t k = 0; k < count; ++k) {
      const size_t c = round % 2 == 0 ? k : count - 1 - k;
      if (cancelled()) return absl::CancelledError("the tune was cancelled");
      absl::StatusOr<Timing> t = time(c);
      if (!t.ok()) return t.status();
      timings[c].push_back(*t);
    }
  }
  return timings;
}

// The first of the fastest timings.
size_t IndexOfFastest(const std::vector<Timing>& timings) {
  return static_cast<size_t>(
      std::min_element(timings.begin(), timings.end(),
                       [](const Timing& x, const Timing& y) { return x.median_us < y.median_us; }) -
      timings.begin());
}

// Calls in one sustained window of a candidate that takes about `median_us`:
// sustained_ms worth, at least 20 and at most 2000.
int SustainedWindowCalls(const GemmTuneOptions& options, double median_us) {
  const double calls = options.sustained_ms * 1e3 / std::max(median_us, 1.0);
  return static_cast<int>(std::clamp(calls, 20.0, 2000.0));
}

}  // namespace

size_t PickGemmWinner(const std::vector<Timing>& finals, const std::vector<std::vector<Timing>>& passes,
                      std::optional<size_t> preferred) {
  size_t best = 0;
  for (size_t i = 1; i < finals.size(); ++i) {
    if (finals[i].median_us < finals[best].median_us) best = i;
  }
  if (!preferred || *preferred == best) return best;
  // The medians compared are of 100 calls in interleaved passes: how far the
  // fastest's moved between passes is their uncertainty, not the jitter of
  // single calls (the spread), which a power-limited fp8 GEMM keeps above 3%
  // (at fp8 8192 x 6144 x 4096 it kept cuBLASLt's default against a template
  // whose combined median was 2.9% faster:
  // bench/results/2026-11-30-norms-gemm-6cf1718.md, "GEMM tie window").
  // Why: bench/results/decisions/gemm-tie-break.md
  const double window = TieWindowUs(finals[best].pass_range, finals[best].median_us);
  if (finals[*preferred].median_us > finals[best].median_us + window) return best;
  // Within the window, pass by pass: the clocks' drift between passes moves
  // both alike, so a fastest that beat the default by at least the smallest
  // window (1%) in every pass is faster, however far the passes moved. (At
  // 6a2c972 the window alone kept cuBLASLt's default against a template 2.5%
  // faster at fp8 8192 x 4096 x 4096, as in two of six tunes of it at
  // fb2fcd5; bench/results/2026-11-30-gemm-fp8-promotion-6a2c972.md and
  // bench/results/2026-11-30-gemm-skinny-pipelined-fb2fcd5.md.)
  const std::vector<Timing>& mine = passes[best];
  const std::vector<Timing>& theirs = passes[*preferred];
  bool faster_every_pass = !mine.empty() && mine.size() == theirs.size();
  for (size_t p = 0; faster_every_pass && p < mine.size(); ++p) {
    faster_every_pass = theirs[p].median_us >= (1 + kMinTieWindow) * mine[p].median_us;
  }
  return faster_every_pass ? best : *preferred;
}

absl::Status HeatUp(CandidateExecutor* executor, const LaunchRecipe& recipe, double heat_ms) {
  absl::StatusOr<Timing> probe = executor->Time(recipe, {1, 20});
  if (!probe.ok()) return probe.status();
  const double reps = heat_ms * 1e3 / std::max(probe->median_us, 1.0);
  return executor->Time(recipe, {0, static_cast<int>(std::clamp(reps, 20.0, 5000.0))}).status();
}

Timing CombinePasses(const std::vector<Timing>& passes) {
  auto median_of = [&](double Timing::*field) {
    std::vector<double> v;
    for (const Timing& t : passes) v.push_back(t.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Timing t;
  t.median_us = median_of(&Timing::median_us);
  t.p10_us = median_of(&Timing::p10_us);
  t.p90_us = median_of(&Timing::p90_us);
  double lo = passes[0].median_us, hi = lo;
  for (const Timing& p : passes) {
    lo = std::min(lo, p.median_us);
    hi = std::max(hi, p.median_us);
    t.repetitions += p.repetitions;
  }
  t.pass_range = t.median_us > 0 ? (hi - lo) / t.median_us : 0.0;
  t.spread = std::max(median_of(&Timing::spread), t.pass_range);
  return t;
}

absl::StatusOr<HeadToHead> TimeHeadToHead(CandidateExecutor* executor, const LaunchRecipe& a, const LaunchRecipe& b,
                                          int rounds, double heat_ms, int calls, const std::atomic<bool>* cancelled) {
  if (rounds < 1) return absl::InvalidArgumentError(absl::StrCat("head-to-head rounds: ", rounds, " (at least 1)"));
  if (calls < 1) return absl::InvalidArgumentError(absl::StrCat("head-to-head calls: ", calls, " (at least 1)"));
  const LaunchRecipe* recipes[2] = {&a, &b};
  absl::StatusOr<std::vector<std::vector<Timing>>> timed = TimeInAlternatingRounds(
      2, rounds, [&] { return cancelled != nullptr && cancelled->load(); },
      [&](size_t c) -> absl::StatusOr<Timing> {
        if (absl::Status heat = HeatUp(executor, *recipes[c], heat_ms); !heat.ok()) return heat;
        return executor->Time(*recipes[c], {0, calls});
      });
  if (!timed.ok()) return timed.status();
  HeadToHead h;
  for (int r = 0; r < rounds; ++r) {
    h.a_us.push_back((*timed)[0][r].median_us);
    h.b_us.push_back((*timed)[1][r].median_us);
    h.ratios.push_back(h.a_us.back() > 0 ? h.b_us.back() / h.a_us.back() : 0.0);
  }
  std::vector<double> sorted = h.ratios;
  std::sort(sorted.begin(), sorted.end());
  // An even count: the mean of the middle two, so neither side's luck in one round decides.
  h.median_ratio = rounds % 2 == 1 ? sorted[rounds / 2] : (sorted[rounds / 2 - 1] + sorted[rounds / 2]) / 2;
  return h;
}

bool HeadToHeadFavoursFirst(const HeadToHead& h) {
  const auto lost = std::count_if(h.ratios.begin(), h.ratios.end(), [](double r) { return r <= 1.0; });
  return !h.ratios.empty() && lost <= 1 && h.median_ratio >= 1 + kMinTieWindow;
}

namespace {

// The GEMM tuner's stages: our templates' candidates (in their spaces'
// order) and cuBLASLt's as the library's, all in one batch; the first
// candidate that passes verification heats the GPU before it is timed; as
// finals the interleaved passes, the sustained finals and the head-to-head
// tie-break, with PickGemmWinner's preference for cuBLASLt's default.
class GemmStages final : public TuneStages {
 public:
  GemmStages(const v1::GemmProblem& problem, const DeviceInfo& info, const GemmTuneOptions& options,
             Clock::time_point start, GemmTuneResult* result)
      : problem_(problem), info_(info), options_(options), start_(start), result_(*result) {}

  absl::StatusOr<int> Generate() override {
    // Our templates: wgmma on sm_90; mma.sync where wgmma does not serve or
    // M <= 16; skinny for M <= 16.
    const std::vector<WgmmaTileConfig> wgmma_space = WgmmaSearchSpace(problem_, info_, options_.space);
    // Where the wgmma template serves M > 16, mma.sync's best ran 1.3-2.0x
    // slower than the best other template at all 13 such bench shapes, in two
    // H200 runs (bench/results/2026-11-29-gemm-5237382.md: runs 7 and 8, the latter
    // at 5237382): not worth its compiles and measurements there. At M <= 16 it
    // came within 2% of the skinny template once, so it stays. B as [K, N]
    // (which wgmma reads too) alike: at four bench shapes its best ran 2.1-2.2x
    // faster than mma.sync's (bench/results/2026-11-30-wgmma-kn-norm-clusters-c3fea25.md,
    // "wgmma with B as [K, N]", 723fbce).
    const bool try_mma_sync = wgmma_space.empty() || problem_.m() <= 16;
    for (const GemmTileConfig& t :
         try_mma_sync ? GemmSearchSpace(problem_, info_, options_.space) : std::vector<GemmTileConfig>()) {
      absl::StatusOr<LaunchRecipe> r = GemmLaunchRecipe(problem_, t, info_);
      if (!r.ok()) return r.status();  // the space offered what CanImplementGemm refuses: a bug
      all_.emplace_back().tile = t;
      all_.back().recipe = *std::move(r);
    }
    for (const WgmmaTileConfig& t : wgmma_space) {
      absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(problem_, t, info_);
      if (!r.ok()) return r.status();
      all_.emplace_back().wgmma = t;
      all_.back().recipe = *std::move(r);
    }
    for (const SkinnyConfig& t : SkinnySearchSpace(problem_, info_)) {
      absl::StatusOr<LaunchRecipe> r = SkinnyLaunchRecipe(problem_, t, info_);
      if (!r.ok()) return r.status();
      all_.emplace_back().skinny = t;
      all_.back().recipe = *std::move(r);
    }
    own_ = static_cast<int>(all_.size());
    result_.template_candidates = own_;
    return own_;
  }

  absl::StatusOr<LaunchRecipe> Recipe(int i) override { return all_[i].recipe; }

  // cuBLASLt's heuristic (each algorithm within the runner's workspace).
  absl::Status OnLibraryCandidates(int first, const absl::StatusOr<std::vector<LaunchRecipe>>& lt) override {
    if (!lt.ok()) {
      library_failure_ = absl::StrCat("failed: ", lt.status().message());
      return absl::OkStatus();
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      GemmCandidate& c = all_.emplace_back();
      c.recipe = (*lt)[i];
      // The runner lists algorithms; the call they are measured in, and
      // served with, is the problem's (CublasLt::Run follows the same).
      if (absl::Status s = WriteGemmInterface(problem_, &c.recipe); !s.ok()) return s;
      c.cublaslt_rank = static_cast<int>(i);
    }
    (void)first;  // == own_: the library's candidates follow ours
    result_.cublaslt_candidates = static_cast<int>(lt->size());
    return absl::OkStatus();
  }

  // Every candidate in one round.
  std::vector<int> NextBatch(const Pipeline& pipeline) override {
    if (batched_) return {};
    batched_ = true;
    std::vector<int> all(pipeline.count());
    for (int i = 0; i < pipeline.count(); ++i) all[i] = i;
    return all;
  }

  std::string Name(int i) const override { return all_[i].Name(); }

  // A large GEMM (fp8 above all) draws the board to its power limit within
  // tens of milliseconds and the clocks fall: on the H200 an fp8 8192^3
  // algorithm timed from an idle GPU read 15-20% faster than the same one
  // timed a moment later, so whichever candidates ran first looked best. Every
  // candidate is therefore timed on a GPU already busy (the first to pass
  // verification runs for options.heat_ms first), and the finalists in
  // interleaved passes, so a drift left over touches them all alike.
  absl::Status BeforeTime(Pipeline& pipeline, int i) override {
    if (heated_ || options_.heat_ms <= 0) return absl::OkStatus();
    heated_ = true;
    return HeatUp(pipeline.executor(), pipeline.recipe(i), options_.heat_ms);
  }

  // The quarantine stores the error as the executor gave it.
  std::string QuarantineDetail(const std::string&, const absl::Status& s) const override {
    return std::string(s.message());
  }

  absl::Status Finish(Pipeline& pipeline) override {
    CandidateExecutor* executor = pipeline.executor();
    auto cancelled = [&] { return pipeline.cancelled(); };
    result_.compiled = pipeline.compiled;
    result_.kernel_cache_hits = pipeline.kernel_cache_hits;
    result_.compile_seconds = pipeline.compile_wall_seconds;
    // The outcomes in the order the tuner has always listed them: compile
    // failures, cuBLASLt's failure, then every candidate that could run.
    std::vector<GemmCandidate> candidates;
    std::vector<int> index_of;  // into the pipeline, per candidate
    for (int i = 0; i < own_; ++i) {
      const CandidateRecord& r = pipeline.record(i);
      if (r.status == CandidateStatus::kCompileError) {
        result_.outcomes.push_back({all_[i].Name(), absl::StrCat("compile failed: ", Short(r.message)), {}});
      }
    }
    if (!library_failure_.empty()) result_.outcomes.push_back({"cublaslt", library_failure_, {}});
    for (int i = 0; i < pipeline.count(); ++i) {
      if (pipeline.record(i).status == CandidateStatus::kCompileError) continue;
      candidates.push_back(all_[i]);
      candidates.back().recipe = pipeline.recipe(i);
      index_of.push_back(i);
    }
    if (candidates.empty()) return absl::NotFoundError("no GEMM candidate of any source serves the problem");

    // Round 1, as the pipeline ran it.
    std::vector<size_t> measured;  // indices into candidates
    std::vector<Timing> first(candidates.size());
    std::vector<size_t> outcome_of(candidates.size());
    for (size_t c = 0; c < candidates.size(); ++c) {
      const CandidateRecord& r = pipeline.record(index_of[c]);
      outcome_of[c] = result_.outcomes.size();
      result_.outcomes.push_back({candidates[c].Name(), StatusText(r), {}});
      if (r.status != CandidateStatus::kOk) continue;
      first[c] = r.timing;
      result_.outcomes.back().timing = r.timing;
      measured.push_back(c);
    }
    if (measured.empty()) {
      return absl::NotFoundError(absl::StrCat("no GEMM candidate ran correctly: ", OutcomeDigest(result_.outcomes)));
    }

    // Round 2: the fastest few, cuBLASLt's default and the best two templates,
    // together (two: first-round times of neighbours can swap under the
    // clock swings of a power-limited GPU).
    std::vector<size_t> by_time = measured;
    std::stable_sort(by_time.begin(), by_time.end(),
                     [&](size_t x, size_t y) { return first[x].median_us < first[y].median_us; });
    std::vector<size_t> finalists(by_time.begin(),
                                  by_time.begin() + std::min<size_t>(by_time.size(), std::max(options_.finalists, 1)));
    auto add = [&](size_t i) {
      if (std::find(finalists.begin(), finalists.end(), i) == finalists.end()) finalists.push_back(i);
    };
    std::optional<size_t> default_index;
    int templates_added = 0;
    for (size_t i : by_time) {
      if (candidates[i].cublaslt_rank == 0) default_index = i;
      if (candidates[i].is_template() && templates_added < 2) {
        add(i);
        ++templates_added;
      }
    }
    if (default_index) add(*default_index);
    absl::StatusOr<std::vector<std::vector<Timing>>> timed_passes = TimeInAlternatingRounds(
        finalists.size(), options_.final_passes, cancelled,
        [&](size_t f) { return executor->Time(candidates[finalists[f]].recipe, options_.final_measure); });
    if (!timed_passes.ok()) return timed_passes.status();
    const std::vector<std::vector<Timing>>& passes = *timed_passes;
    std::vector<Timing> finals;
    std::optional<size_t> default_final;  // cuBLASLt's default among the finalists
    for (size_t f = 0; f < finalists.size(); ++f) {
      const size_t i = finalists[f];
      finals.push_back(CombinePasses(passes[f]));
      result_.outcomes[outcome_of[i]].timing = finals.back();
      result_.outcomes[outcome_of[i]].finalist = true;
      if (default_index && i == *default_index) default_final = f;
    }
    // The default's and the best template's timings, of one protocol:
    // `timings[t]` is finalist `timed[t]`'s.
    auto report_peers = [&](const std::vector<size_t>& timed, const std::vector<Timing>& timings) {
      result_.best_template.reset();
      result_.best_template_candidate.reset();
      for (size_t t = 0; t < timed.size(); ++t) {
        const GemmCandidate& c = candidates[finalists[timed[t]]];
        if (c.cublaslt_rank == 0) {
          result_.cublaslt_default = timings[t];
          result_.cublaslt_default_candidate = c;
        }
        if (c.is_template() && (!result_.best_template || timings[t].median_us < result_.best_template->median_us)) {
          result_.best_template = timings[t];
          result_.best_template_name = c.Name();
          result_.best_template_candidate = c;
        }
      }
    };
    std::vector<size_t> order(finalists.size());  // into finalists
    std::iota(order.begin(), order.end(), 0);
    const size_t w = PickGemmWinner(finals, passes, default_final);
    result_.winner = candidates[finalists[w]];
    result_.winner_timing = finals[w];
    report_peers(order, finals);
    const double fastest_us = finals[IndexOfFastest(finals)].median_us;
    if (options_.sustained_finalists <= 0 || fastest_us < options_.sustained_min_us) {
      result_.tune_seconds = Seconds(start_);
      return absl::OkStatus();
    }

    // Sustained finals. Interleaved passes of 20 calls each keep the clocks
    // where the mix of finalists holds them, so they compare cycles at one
    // clock. A large GEMM run back to back settles at the clocks its own power
    // draw allows, and a kernel that draws less per FLOP holds higher ones: at
    // fp8 8192 x 14336 x 4096 a wgmma config 0.6% faster than cuBLASLt's
    // default interleaved was 9% faster timed after its own heat
    // (bench/results/2026-12-01-gemm-sustained-finals-0fa526c.md, "Interleaved
    // finals and sustained timing disagree", e1d90dd). So the fastest few, the best template and the
    // default are each timed after sustained_heat_ms of itself, and those timings
    // decide, with the same preference for the default.
    // Why: bench/results/decisions/gemm-sustained-finals.md
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return finals[x].median_us < finals[y].median_us; });
    std::vector<size_t> chosen;  // into finalists
    auto choose = [&](size_t f) {
      if (std::find(chosen.begin(), chosen.end(), f) == chosen.end()) chosen.push_back(f);
    };
    for (size_t k = 0; k < order.size() && k < static_cast<size_t>(options_.sustained_finalists); ++k) choose(order[k]);
    for (size_t f : order) {
      if (candidates[finalists[f]].is_template()) {
        choose(f);
        break;
      }
    }
    if (default_final) choose(*default_final);
    absl::StatusOr<std::vector<std::vector<Timing>>> timed_rounds = TimeInAlternatingRounds(
        chosen.size(), options_.sustained_rounds, cancelled, [&](size_t c) -> absl::StatusOr<Timing> {
          const size_t f = chosen[c];
          const LaunchRecipe& recipe = candidates[finalists[f]].recipe;
          absl::Status heat = HeatUp(executor, recipe, options_.sustained_heat_ms);
          if (!heat.ok()) return heat;
          return executor->Time(recipe, {0, SustainedWindowCalls(options_, finals[f].median_us)});
        });
    if (!timed_rounds.ok()) return timed_rounds.status();
    const std::vector<std::vector<Timing>>& rounds = *timed_rounds;
    std::vector<Timing> sustained;
    std::optional<size_t> default_sustained;
    for (size_t c = 0; c < chosen.size(); ++c) {
      sustained.push_back(CombinePasses(rounds[c]));
      result_.outcomes[outcome_of[finalists[chosen[c]]]].sustained = sustained.back();
      if (default_final && chosen[c] == *default_final) default_sustained = c;
    }
    report_peers(chosen, sustained);
    size_t s = PickGemmWinner(sustained, rounds, default_sustained);
    // The window kept the default against a faster median: their windows were
    // seconds apart, and the clocks wander by more than the gap between them.
    // A head-to-head, whose two windows of a round see nearly the same clocks,
    // tells them apart (bench/results/2026-12-01-gemm-tie-break-25d0244.md, "The
    // head-to-head", a266442).
    // Why: bench/results/decisions/gemm-tie-break.md
    const size_t fastest = IndexOfFastest(sustained);
    if (options_.tie_break_rounds > 0 && default_sustained && s == *default_sustained && fastest != s) {
      const GemmCandidate& challenger = candidates[finalists[chosen[fastest]]];
      absl::StatusOr<HeadToHead> h = TimeHeadToHead(
          executor, challenger.recipe, candidates[finalists[chosen[s]]].recipe, options_.tie_break_rounds,
          options_.sustained_heat_ms, SustainedWindowCalls(options_, sustained[fastest].median_us), options_.cancelled);
      if (!h.ok()) return h.status();
      result_.tie_break = *h;
      result_.tie_break_challenger = challenger.Name();
      if (HeadToHeadFavoursFirst(*h)) s = fastest;
    }
    result_.winner = candidates[finalists[chosen[s]]];
    result_.winner_timing = sustained[s];
    result_.sustained = true;
    result_.tune_seconds = Seconds(start_);
    return absl::OkStatus();
  }

 private:
  // An outcome's status text: "ok", "wrong: <detail>", "fault: <error>",
  // "timeout: <error>", "failed: <error>" or "quarantined".
  static std::string StatusText(const CandidateRecord& r) {
    switch (r.status) {
      case CandidateStatus::kOk:
        return "ok";
      case CandidateStatus::kWrongAnswer:
        return absl::StrCat("wrong: ", r.message);
      case CandidateStatus::kFault:
      case CandidateStatus::kTimeout:
        return absl::StrCat(CandidateStatusName(r.status), ": ", r.message);
      case CandidateStatus::kQuarantined:
        return "quarantined";
      default:
        return absl::StrCat("failed: ", r.message);
    }
  }

  const v1::GemmProblem& problem_;
  const DeviceInfo& info_;
  const GemmTuneOptions& options_;
  const Clock::time_point start_;
  GemmTuneResult& result_;
  std::vector<GemmCandidate> all_;  // ours (own_ of them), then cuBLASLt's
  int own_ = 0;
  std::string library_failure_;  // cuBLASLt's heuristic failed: the outcome's status
  bool batched_ = false;
  bool heated_ = false;
};

}  // namespace

absl::StatusOr<GemmTuneResult> TuneGemm(const v1::GemmProblem& problem, CandidateExecutor* executor,
                                        const GemmTuneOptions& options) {
  const auto start = Clock::now();
  GemmTuneResult result;
  GemmStages stages(problem, executor->device(), options, start, &result);
  PipelineOptions pipeline_options = CommonPipelineOptions(options);
  pipeline_options.library_candidates = options.cublaslt_algos;
  Pipeline pipeline(ProblemOf(problem), executor, &stages, std::move(pipeline_options));
  if (absl::Status s = pipeline.Run(); !s.ok()) return s;
  return result;
}

}  // namespace ktune
