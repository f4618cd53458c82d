#include "tuner/tuner.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tuner/measure.h"
#include "tuner/nvrtc_compiler.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxDetail = 2000;  // characters of a compile log kept per candidate

std::string Excerpt(const std::string& text) {
  if (text.size() <= kMaxDetail) return text;
  return absl::StrCat(text.substr(0, kMaxDetail), "\n... (", text.size() - kMaxDetail, " more characters)");
}

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// What a failed run says about the candidate: a fault or a hang is the
// candidate's (and quarantines it); UNAVAILABLE means the executor itself is
// gone, which ends the tune.
CandidateStatus StatusOfFailure(const absl::Status& s) {
  if (absl::IsAborted(s)) return CandidateStatus::kFault;
  if (absl::IsDeadlineExceeded(s)) return CandidateStatus::kTimeout;
  return CandidateStatus::kLaunchError;
}

}  // namespace

std::string CandidateStatusName(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::kOk:
      return "ok";
    case CandidateStatus::kCompileError:
      return "compile_error";
    case CandidateStatus::kWrongAnswer:
      return "wrong_answer";
    case CandidateStatus::kLaunchError:
      return "launch_error";
    case CandidateStatus::kFault:
      return "fault";
    case CandidateStatus::kTimeout:
      return "timeout";
    case CandidateStatus::kQuarantined:
      return "quarantined";
    case CandidateStatus::kNotMeasured:
      return "not_measured";
  }
  return "unknown";
}

std::string CandidateId(const LaunchRecipe& recipe) {
  if (recipe.is_cublaslt_call()) {  // no kernels: the algorithm is the identity
    return absl::StrCat("cublaslt:", absl::BytesToHexString(recipe.cublaslt_algo));
  }
  std::vector<std::string> names;
  for (const KernelLaunch& k : recipe.kernels) names.push_back(k.name_expression);
  return absl::StrJoin(names, ";");
}

absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, Device* device, const TuneOptions& options,
                                    const ProgressCallback& progress) {
  if (device == nullptr) return absl::FailedPreconditionError("TuneNorm needs a device");
  std::unique_ptr<CandidateExecutor> executor = NewInProcessExecutor(device);
  return TuneNorm(problem, executor.get(), options, progress);
}

absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, CandidateExecutor* executor, const TuneOptions& options,
                                    const ProgressCallback& progress) {
  const auto start = Clock::now();
  if (absl::Status s = ValidateNormProblem(problem); !s.ok()) return s;
  if (executor == nullptr) return absl::FailedPreconditionError("TuneNorm needs an executor");
  const DeviceInfo& info = executor->device();
  std::mutex progress_mu;  // progress may be called from compile workers
  auto emit = [&](TuneProgress p) {
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress_mu);
    progress(p);
  };
  auto cancelled = [&] { return options.cancelled != nullptr && options.cancelled->load(); };

  // 1. The space, already pruned by CanImplement and the grid's rules.
  const std::vector<NormConfig> space = NormSearchSpace(problem, info, options.space);
  if (space.empty()) {
    return absl::UnimplementedError(
        absl::StrCat("no kernel configuration implements ", CanonicalKey(problem), " on ", Arch(info)));
  }
  const int total = static_cast<int>(space.size());
  std::unique_ptr<SearchStrategy> strategy =
      options.search == SearchKind::kGrid ? NewGridSearch()
                                          : NewCoordinateDescent(HeuristicNormConfig(problem, info), options.budget);
  TuneResult result;
  result.strategy = strategy->name();
  result.candidates_generated = total;
  result.outcomes.resize(total);
  for (int i = 0; i < total; ++i) result.outcomes[i].config = space[i];
  emit({"generated", total, total, 0,
        absl::StrCat(total, " candidates for ", CanonicalKey(problem), " (", strategy->name(), ")"), nullptr});

  const auto prepare_start = Clock::now();
  if (absl::Status s = executor->Prepare(problem); !s.ok()) return s;
  result.prepare_seconds = Seconds(prepare_start);
  // Verify and Time, each timed into the result's phase totals.
  auto verify_phase = [&](const LaunchRecipe& recipe) {
    const auto phase_start = Clock::now();
    absl::StatusOr<VerifyResult> v = executor->Verify(recipe);
    result.verify_seconds += Seconds(phase_start);
    return v;
  };
  auto time_phase = [&](const LaunchRecipe& recipe) {
    const auto phase_start = Clock::now();
    absl::StatusOr<Timing> t = executor->Time(recipe, options.measure);
    result.time_seconds += Seconds(phase_start);
    return t;
  };

  std::vector<LaunchRecipe> recipes(total);
  std::vector<std::optional<double>> measured_us(total);
  std::vector<bool> tried(total, false);
  int proposed = 0, compiled_count = 0, verified = 0, measured = 0;
  double best_us = 0;

  // Runs one candidate: verify, then time. An error status ends the tune.
  auto run_candidate = [&](int i) -> absl::Status {
    CandidateOutcome& outcome = result.outcomes[i];
    auto fail = [&](const absl::Status& s, const char* stage) -> absl::Status {
      if (absl::IsUnavailable(s)) return s;  // the executor is gone: end the tune
      outcome.status = StatusOfFailure(s);
      outcome.detail = absl::StrCat(stage, ": ", s.message());
      if ((outcome.status == CandidateStatus::kFault || outcome.status == CandidateStatus::kTimeout) &&
          options.on_quarantine) {
        options.on_quarantine(CandidateId(recipes[i]), CandidateStatusName(outcome.status), outcome.detail);
      }
      return absl::OkStatus();
    };
    absl::StatusOr<VerifyResult> v = verify_phase(recipes[i]);
    ++verified;
    if (!v.ok()) return fail(v.status(), "verify");
    if (!v->ok) {
      outcome.status = CandidateStatus::kWrongAnswer;
      outcome.detail = v->detail;
      return absl::OkStatus();
    }
    emit({"verified", verified, proposed, best_us, absl::StrCat(ToString(space[i]), ": correct"), nullptr});
    absl::StatusOr<Timing> t = time_phase(recipes[i]);
    ++measured;
    if (!t.ok()) return fail(t.status(), "time");
    outcome.status = CandidateStatus::kOk;
    outcome.timing = *t;
    measured_us[i] = t->median_us;
    if (best_us == 0 || t->median_us < best_us) best_us = t->median_us;
    return absl::OkStatus();
  };

  // 2. Batches proposed by the strategy: recipes, compile (cache first), run.
  double run_seconds = 0;
  while (true) {
    std::vector<int> batch = strategy->Next(space, measured_us, tried, Seconds(start));
    if (batch.empty()) break;
    proposed += static_cast<int>(batch.size());
    std::vector<int> to_compile;
    std::vector<LaunchRecipe> compile_batch;
    for (int i : batch) {
      tried[i] = true;
      CandidateOutcome& outcome = result.outcomes[i];
      absl::StatusOr<LaunchRecipe> recipe = NormLaunchRecipe(problem, space[i], info);
      if (!recipe.ok()) {  // a bug in the space: every config passed CanImplement
        outcome.status = CandidateStatus::kCompileError;
        outcome.detail = std::string(recipe.status().message());
        continue;
      }
      recipes[i] = *std::move(recipe);
      if (options.quarantined.count(CandidateId(recipes[i])) > 0) {
        outcome.status = CandidateStatus::kQuarantined;
        outcome.detail = "faulted or hung before in this environment";
        emit({"pruned", proposed, proposed, best_us, absl::StrCat(ToString(space[i]), ": quarantined"), &outcome});
        continue;
      }
      if (options.kernel_cache != nullptr && options.kernel_cache->Lookup(&recipes[i], NvrtcVersion())) {
        ++result.kernel_cache_hits;
        continue;
      }
      to_compile.push_back(i);
      compile_batch.push_back(recipes[i]);
    }
    emit({"pruned", proposed, proposed, best_us, absl::StrCat(proposed, " of ", total, " proposed"), nullptr});
    const int already = compiled_count;
    std::vector<CompileResult> compiled = CompileAll(&compile_batch, options.compile_threads, [&](int done) {
      emit({"compiled", already + done, proposed, best_us, "", nullptr});
    });
    for (size_t b = 0; b < compile_batch.size(); ++b) {
      const int i = to_compile[b];
      ++compiled_count;
      result.compile_seconds += compiled[b].compile_seconds;
      if (!compiled[b].ok) {
        result.outcomes[i].status = CandidateStatus::kCompileError;
        result.outcomes[i].detail = Excerpt(compiled[b].log);
        emit({"compiled", compiled_count, proposed, best_us, absl::StrCat(ToString(space[i]), ": compile error"),
              &result.outcomes[i]});
        continue;
      }
      recipes[i] = std::move(compile_batch[b]);
      if (options.kernel_cache != nullptr) options.kernel_cache->Store(recipes[i], NvrtcVersion());
    }
    const auto run_start = Clock::now();
    for (int i : batch) {
      if (result.outcomes[i].status != CandidateStatus::kNotMeasured) continue;  // failed above
      if (cancelled()) return absl::CancelledError("the tune was cancelled");
      if (absl::Status s = run_candidate(i); !s.ok()) return s;
      const CandidateOutcome& o = result.outcomes[i];
      emit({"measured", measured, proposed, best_us,
            o.status == CandidateStatus::kOk ? absl::StrFormat("%s: %.2f us", ToString(space[i]), o.timing.median_us)
                                             : absl::StrCat(ToString(space[i]), ": ", CandidateStatusName(o.status)),
            &o});
    }
    run_seconds += Seconds(run_start);
  }
  result.compiled = compiled_count;

  // 3. Re-measure the best few (fastest first), then choose with noise in mind.
  std::vector<int> ranked;
  for (int i = 0; i < total; ++i) {
    if (result.outcomes[i].status == CandidateStatus::kOk) ranked.push_back(i);
  }
  if (ranked.empty()) {
    std::string why;
    for (const CandidateOutcome& o : result.outcomes) {
      if (o.status == CandidateStatus::kNotMeasured || why.size() > 4000) continue;
      absl::StrAppend(&why, "\n  ", ToString(o.config), ": ", CandidateStatusName(o.status), ": ",
                      o.detail.substr(0, 300));
    }
    return absl::InternalError(absl::StrCat("no candidate for ", CanonicalKey(problem), " passed verification:", why));
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    return result.outcomes[a].timing.median_us < result.outcomes[b].timing.median_us;
  });
  const int finalists = std::clamp(options.remeasure_top, 1, static_cast<int>(ranked.size()));
  ranked.resize(finalists);
  const auto remeasure_start = Clock::now();
  for (int r = 0; r < finalists; ++r) {
    if (cancelled()) return absl::CancelledError("the tune was cancelled");
    const int i = ranked[r];
    absl::StatusOr<Timing> t = time_phase(recipes[i]);
    if (!t.ok()) return t.status();  // it ran moments ago: a failure now is not the candidate's
    result.outcomes[i].timing = *t;
    best_us = std::min(best_us, t->median_us);
    emit({"measured", r + 1, finalists, best_us,
          absl::StrFormat("re-measured %s: %.2f us (spread %.1f%%)", ToString(space[i]), t->median_us, 100 * t->spread),
          &result.outcomes[i]});
  }
  run_seconds += Seconds(remeasure_start);
  int best = ranked[0];
  for (int i : ranked) {
    if (result.outcomes[i].timing.median_us < result.outcomes[best].timing.median_us) best = i;
  }
  const Timing& best_timing = result.outcomes[best].timing;
  const double window = TieWindowUs(best_timing.spread, best_timing.median_us);
  int winner = best;
  for (int i : ranked) {  // the earliest in space order among the tied
    if (result.outcomes[i].timing.median_us <= best_timing.median_us + window && i < winner) {
      winner = i;
    }
  }

  result.config = space[winner];
  result.recipe = std::move(recipes[winner]);
  result.timing = result.outcomes[winner].timing;

  // 4. Backward: the partials' reduce kernel, tuned with the fused kernel
  // fixed (its geometry does not change the fused kernel's time, so a second,
  // one-knob search replaces multiplying the space). The winner (derived
  // geometry) is re-timed beside the variants; a variant replaces it only
  // when faster by more than the tie window.
  const std::vector<int> reduce_rows =
      options.tune_reduce ? ReduceRowsCandidates(problem, result.config) : std::vector<int>();
  if (!reduce_rows.empty()) {
    const auto reduce_start = Clock::now();
    std::vector<NormConfig> variants;
    std::vector<LaunchRecipe> variant_recipes, to_compile;
    std::vector<size_t> compile_index;
    for (int rows : reduce_rows) {
      NormConfig c = result.config;
      c.reduce_rows = rows;
      absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(problem, c, info);
      if (!r.ok() || options.quarantined.count(CandidateId(*r)) > 0) continue;
      variants.push_back(c);
      variant_recipes.push_back(*std::move(r));
      if (options.kernel_cache != nullptr && options.kernel_cache->Lookup(&variant_recipes.back(), NvrtcVersion())) {
        ++result.kernel_cache_hits;
        continue;
      }
      compile_index.push_back(variant_recipes.size() - 1);
      to_compile.push_back(variant_recipes.back());
    }
    const std::vector<CompileResult> compiled = CompileAll(&to_compile, options.compile_threads);
    std::vector<bool> usable(variants.size(), true);
    for (size_t b = 0; b < to_compile.size(); ++b) {
      const size_t v = compile_index[b];
      ++result.compiled;
      result.compile_seconds += compiled[b].compile_seconds;
      usable[v] = compiled[b].ok;
      if (!compiled[b].ok) continue;
      variant_recipes[v] = std::move(to_compile[b]);
      if (options.kernel_cache != nullptr) options.kernel_cache->Store(variant_recipes[v], NvrtcVersion());
    }
    absl::StatusOr<Timing> base = time_phase(result.recipe);
    if (!base.ok()) return base.status();  // it ran moments ago: not the candidate's fault
    Timing best = *base;
    for (size_t v = 0; v < variants.size(); ++v) {
      if (!usable[v]) continue;
      if (cancelled()) return absl::CancelledError("the tune was cancelled");
      absl::StatusOr<VerifyResult> ok = verify_phase(variant_recipes[v]);
      if (!ok.ok() && absl::IsUnavailable(ok.status())) return ok.status();
      if (!ok.ok() || !ok->ok) {
        if (!ok.ok() && options.on_quarantine &&
            (StatusOfFailure(ok.status()) == CandidateStatus::kFault ||
             StatusOfFailure(ok.status()) == CandidateStatus::kTimeout)) {
          options.on_quarantine(CandidateId(variant_recipes[v]), CandidateStatusName(StatusOfFailure(ok.status())),
                                std::string(ok.status().message()));
        }
        continue;
      }
      absl::StatusOr<Timing> t = time_phase(variant_recipes[v]);
      if (!t.ok() && absl::IsUnavailable(t.status())) return t.status();
      if (!t.ok()) continue;
      ++result.reduce_variants_measured;
      emit({"measured", measured, proposed, best_us,
            absl::StrFormat("%s: %.2f us (reduce kernel)", ToString(variants[v]), t->median_us), nullptr});
      const double window = TieWindowUs(base->spread, base->median_us);
      if (t->median_us < base->median_us - window && t->median_us < best.median_us) {
        best = *t;
        result.config = variants[v];
        result.recipe = variant_recipes[v];
        result.timing = *t;
      }
    }
    run_seconds += Seconds(reduce_start);
  }
  result.candidates_measured = measured;
  result.run_seconds = run_seconds;
  result.throughput_tbs = result.timing.median_us > 0
                              ? static_cast<double>(MinimumBytes(problem)) / (result.timing.median_us * 1e-6) / 1e12
                              : 0;
  result.tune_seconds = Seconds(start);
  return result;
}

}  // namespace ktune
