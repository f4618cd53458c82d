#include "tuner/tuner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/norm_runner.h"
#include "tuner/norm_space.h"
#include "tuner/nvrtc_compiler.h"

namespace ktune {
namespace {

// Candidates whose medians are within this fraction of the best are a tie,
// broken by search-space order so one machine keeps giving the same winner.
// The window is the best's measured spread (p90 - p10 over the median),
// bounded below by 1% and above by 3%: per-launch event timings of a 20 us
// kernel can spread 10%, and a tie window that wide would pick a kernel
// measurably slower than the best by its median, which is far more precise.
constexpr double kMinTieWindow = 0.01;
constexpr double kMaxTieWindow = 0.03;
constexpr size_t kMaxDetail = 2000;  // characters of a compile log kept per candidate

std::string Excerpt(const std::string& text) {
  if (text.size() <= kMaxDetail) return text;
  return absl::StrCat(text.substr(0, kMaxDetail), "\n... (", text.size() - kMaxDetail,
                      " more characters)");
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
  }
  return "unknown";
}

absl::StatusOr<TuneResult> TuneNorm(const NormProblem& problem, Device* device,
                                    const TuneOptions& options,
                                    const ProgressCallback& progress) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = ValidateNormProblem(problem); !s.ok()) return s;
  if (device == nullptr) return absl::FailedPreconditionError("TuneNorm needs a device");
  const DeviceInfo& info = device->info();
  std::mutex progress_mu;  // progress may be called from compile workers
  auto emit = [&](TuneProgress p) {
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress_mu);
    progress(p);
  };

  // 1. The space, already pruned by CanImplement and the grid's rules.
  const std::vector<NormConfig> space = NormSearchSpace(problem, info, options.space);
  if (space.empty()) {
    return absl::UnimplementedError(absl::StrCat("no kernel configuration implements ",
                                                 CanonicalKey(problem), " on ", Arch(info)));
  }
  const int total = static_cast<int>(space.size());
  TuneResult result;
  result.candidates_generated = total;
  result.outcomes.resize(total);
  for (int i = 0; i < total; ++i) result.outcomes[i].config = space[i];
  emit({"generated", total, total, 0,
        absl::StrCat(total, " candidates for ", CanonicalKey(problem)), nullptr});

  // 2. Recipes. A recipe that cannot be made is a bug in the space (every
  // config passed CanImplement); it is recorded, not fatal.
  std::vector<LaunchRecipe> recipes(total);
  std::vector<bool> alive(total, true);
  for (int i = 0; i < total; ++i) {
    absl::StatusOr<LaunchRecipe> recipe = NormLaunchRecipe(problem, space[i], info);
    if (!recipe.ok()) {
      alive[i] = false;
      result.outcomes[i].status = CandidateStatus::kCompileError;
      result.outcomes[i].detail = std::string(recipe.status().message());
      continue;
    }
    recipes[i] = *std::move(recipe);
  }
  emit({"pruned", static_cast<int>(std::count(alive.begin(), alive.end(), true)), total, 0,
        "launch recipes made", nullptr});

  // 3. Compile everything in parallel (the GPU is idle meanwhile anyway).
  std::vector<int> to_compile;
  std::vector<LaunchRecipe> batch;
  for (int i = 0; i < total; ++i) {
    if (!alive[i]) continue;
    to_compile.push_back(i);
    batch.push_back(std::move(recipes[i]));
  }
  const int compile_total = static_cast<int>(batch.size());
  std::vector<CompileResult> compiled =
      CompileAll(&batch, options.compile_threads, [&](int done) {
        emit({"compiled", done, compile_total, 0, "", nullptr});
      });
  for (size_t b = 0; b < batch.size(); ++b) {
    const int i = to_compile[b];
    recipes[i] = std::move(batch[b]);
    if (!compiled[b].ok) {
      alive[i] = false;
      result.outcomes[i].status = CandidateStatus::kCompileError;
      result.outcomes[i].detail = Excerpt(compiled[b].log);
      emit({"compiled", static_cast<int>(b) + 1, compile_total, 0,
            absl::StrCat(ToString(space[i]), ": compile error"), &result.outcomes[i]});
    }
  }

  // 4. Verify each on the GPU against the float64 reference.
  absl::StatusOr<std::unique_ptr<NormRunner>> runner = NormRunner::Create(problem, device);
  if (!runner.ok()) return runner.status();
  int verified = 0;
  const int verify_total = static_cast<int>(std::count(alive.begin(), alive.end(), true));
  for (int i = 0; i < total; ++i) {
    if (!alive[i]) continue;
    CandidateOutcome& outcome = result.outcomes[i];
    absl::StatusOr<VerifyResult> v = (*runner)->Verify(recipes[i]);
    ++verified;
    if (!v.ok()) {
      // A fault poisons the context: nothing after it on this device is trustworthy.
      if (absl::IsAborted(v.status())) {
        return absl::Status(v.status().code(),
                            absl::StrCat("candidate ", ToString(space[i]),
                                         " faulted, the device context is lost: ",
                                         v.status().message()));
      }
      alive[i] = false;
      outcome.status = CandidateStatus::kLaunchError;
      outcome.detail = std::string(v.status().message());
    } else if (!v->ok) {
      alive[i] = false;
      outcome.status = CandidateStatus::kWrongAnswer;
      outcome.detail = v->detail;
    }
    emit({"verified", verified, verify_total, 0,
          absl::StrCat(ToString(space[i]), ": ",
                       alive[i] ? "correct" : CandidateStatusName(outcome.status)),
          &outcome});
  }

  // 5. Time the survivors.
  std::vector<int> survivors;
  for (int i = 0; i < total; ++i) {
    if (alive[i]) survivors.push_back(i);
  }
  if (survivors.empty()) {
    std::string why;
    for (const CandidateOutcome& o : result.outcomes) {
      if (why.size() < 4000) {
        absl::StrAppend(&why, "\n  ", ToString(o.config), ": ", CandidateStatusName(o.status),
                        ": ", o.detail.substr(0, 300));
      }
    }
    return absl::InternalError(
        absl::StrCat("no candidate for ", CanonicalKey(problem), " passed verification:", why));
  }
  double best_us = 0;
  int measured = 0;
  for (int i : survivors) {
    CandidateOutcome& outcome = result.outcomes[i];
    absl::StatusOr<Timing> t = (*runner)->Time(recipes[i], options.measure);
    ++measured;
    if (!t.ok()) {
      if (absl::IsAborted(t.status())) return t.status();
      alive[i] = false;
      outcome.status = CandidateStatus::kLaunchError;
      outcome.detail = std::string(t.status().message());
    } else {
      outcome.timing = *t;
      if (best_us == 0 || t->median_us < best_us) best_us = t->median_us;
    }
    emit({"measured", measured, static_cast<int>(survivors.size()), best_us,
          alive[i] ? absl::StrFormat("%s: %.2f us", ToString(space[i]), outcome.timing.median_us)
                   : absl::StrCat(ToString(space[i]), ": ", outcome.detail),
          &outcome});
  }

  // 6. Re-measure the best few (fastest first), then choose with noise in mind.
  std::vector<int> ranked;
  for (int i : survivors) {
    if (alive[i]) ranked.push_back(i);
  }
  if (ranked.empty()) return absl::InternalError("every verified candidate failed to launch");
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    return result.outcomes[a].timing.median_us < result.outcomes[b].timing.median_us;
  });
  const int finalists = std::clamp(options.remeasure_top, 1, static_cast<int>(ranked.size()));
  ranked.resize(finalists);
  for (int r = 0; r < finalists; ++r) {
    const int i = ranked[r];
    absl::StatusOr<Timing> t = (*runner)->Time(recipes[i], options.measure);
    if (!t.ok()) return t.status();  // it ran moments ago: a failure now is not the candidate's
    result.outcomes[i].timing = *t;
    best_us = std::min(best_us, t->median_us);
    emit({"measured", r + 1, finalists, best_us,
          absl::StrFormat("re-measured %s: %.2f us (spread %.1f%%)", ToString(space[i]),
                          t->median_us, 100 * t->spread),
          &result.outcomes[i]});
  }
  int best = ranked[0];
  for (int i : ranked) {
    if (result.outcomes[i].timing.median_us < result.outcomes[best].timing.median_us) best = i;
  }
  const Timing& best_timing = result.outcomes[best].timing;
  const double window =
      std::clamp(best_timing.spread, kMinTieWindow, kMaxTieWindow) * best_timing.median_us;
  int winner = best;
  for (int i : ranked) {  // the earliest in space order among the tied
    if (result.outcomes[i].timing.median_us <= best_timing.median_us + window && i < winner) {
      winner = i;
    }
  }

  result.config = space[winner];
  result.recipe = std::move(recipes[winner]);
  result.timing = result.outcomes[winner].timing;
  result.candidates_measured = measured;
  result.throughput_tbs =
      result.timing.median_us > 0
          ? static_cast<double>(MinimumBytes(problem)) / (result.timing.median_us * 1e-6) / 1e12
          : 0;
  result.tune_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ktune
