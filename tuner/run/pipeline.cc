#include "tuner/run/pipeline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

}  // namespace

absl::Status TuneStages::OnLibraryCandidates(int, const absl::StatusOr<std::vector<LaunchRecipe>>&) {
  return absl::OkStatus();
}

absl::Status TuneStages::BeforeTime(Pipeline&, int) { return absl::OkStatus(); }

std::string TuneStages::QuarantineDetail(const std::string& phase, const absl::Status& s) const {
  return absl::StrCat(phase, ": ", s.message());
}

void TuneStages::OnEvent(const Pipeline&, const PipelineEvent&) {}

Pipeline::Pipeline(v1::Problem problem, CandidateExecutor* executor, TuneStages* stages, PipelineOptions options)
    : problem_(std::move(problem)), executor_(executor), stages_(stages), options_(std::move(options)) {}

bool Pipeline::quarantined(const LaunchRecipe& recipe) const {
  return options_.quarantined != nullptr && options_.quarantined->count(CandidateId(recipe)) > 0;
}

absl::StatusOr<VerifyResult> Pipeline::Verify(const LaunchRecipe& recipe) {
  const auto start = Clock::now();
  absl::StatusOr<VerifyResult> v = executor_->Verify(recipe);
  verify_seconds += Seconds(start);
  return v;
}

absl::StatusOr<Timing> Pipeline::Time(const LaunchRecipe& recipe, const MeasureOptions& options) {
  const auto start = Clock::now();
  absl::StatusOr<Timing> t = executor_->Time(recipe, options);
  time_seconds += Seconds(start);
  return t;
}

void Pipeline::Emit(PipelineEvent event) {
  std::lock_guard<std::mutex> lock(event_mu_);
  stages_->OnEvent(*this, event);
}

CompileBatchResult Pipeline::Compile(const std::vector<LaunchRecipe*>& recipes,
                                     const std::function<void(int)>& on_compiled) {
  CompileBatchResult r = CompileThroughCache(recipes, options_.kernel_cache, options_.compile_threads, on_compiled);
  compiled += r.compiled;
  kernel_cache_hits += r.cache_hits;
  compile_seconds += r.compile_seconds;
  compile_wall_seconds += r.compile_wall_seconds;
  return r;
}

absl::Status Pipeline::Run() {
  absl::StatusOr<int> generated = stages_->Generate();
  if (!generated.ok()) return generated.status();
  records_.resize(*generated);
  recipes_.resize(*generated);
  proposed_.resize(*generated, false);

  const auto prepare_start = Clock::now();
  if (absl::Status s = executor_->Prepare(problem_); !s.ok()) return s;
  prepare_seconds = Seconds(prepare_start);

  if (options_.library_candidates > 0) {
    absl::StatusOr<std::vector<LaunchRecipe>> library = executor_->LibraryCandidates(options_.library_candidates);
    if (!library.ok() && EndsTune(library.status())) return library.status();
    const int first = count();
    if (library.ok()) {
      for (const LaunchRecipe& r : *library) {
        records_.emplace_back().library = true;
        recipes_.push_back(r);
        proposed_.push_back(false);
      }
    }
    if (absl::Status s = stages_->OnLibraryCandidates(first, library); !s.ok()) return s;
  }

  while (true) {
    const std::vector<int> batch = stages_->NextBatch(*this);
    if (batch.empty()) break;
    if (absl::Status s = RunBatch(batch); !s.ok()) return s;
  }
  return stages_->Finish(*this);
}

absl::Status Pipeline::RunBatch(const std::vector<int>& batch) {
  proposed += static_cast<int>(batch.size());
  // Recipes, then the quarantine: what faulted or hung before is neither
  // compiled nor run.
  std::vector<int> to_compile;
  for (int i : batch) {
    proposed_[i] = true;
    CandidateRecord& record = records_[i];
    if (!record.library) {
      absl::StatusOr<LaunchRecipe> recipe = stages_->Recipe(i);
      if (!recipe.ok()) {  // a bug in the space: every config passed CanImplement
        record.status = CandidateStatus::kCompileError;
        record.message = std::string(recipe.status().message());
        continue;
      }
      recipes_[i] = *std::move(recipe);
    }
    if (quarantined(recipes_[i])) {
      record.status = CandidateStatus::kQuarantined;
      record.message = "faulted or hung before in this environment";
      Emit({"pruned", proposed, proposed, best_us, absl::StrCat(stages_->Name(i), ": quarantined"), i});
      continue;
    }
    if (!record.library) to_compile.push_back(i);
  }
  Emit({"pruned", proposed, proposed, best_us, absl::StrCat(proposed, " of ", count(), " proposed"), -1});

  // Compile, the kernel cache first.
  std::vector<LaunchRecipe*> pointers;
  for (int i : to_compile) pointers.push_back(&recipes_[i]);
  const int already = compiled;
  const CompileBatchResult result = Compile(pointers, [&](int done) {
    Emit({"compiled", already + done, proposed, best_us, "", -1});
  });
  int compiled_so_far = already;
  for (size_t b = 0; b < to_compile.size(); ++b) {
    const CachedCompile& c = result.results[b];
    if (c.compiled) ++compiled_so_far;
    if (c.ok) continue;
    const int i = to_compile[b];
    records_[i].status = CandidateStatus::kCompileError;
    records_[i].message = c.log;
    Emit({"compiled", compiled_so_far, proposed, best_us, absl::StrCat(stages_->Name(i), ": compile error"), i});
  }

  // Verify and time, one candidate at a time.
  const auto run_start = Clock::now();
  for (int i : batch) {
    if (records_[i].status != CandidateStatus::kNotMeasured) continue;  // failed or pruned above
    if (cancelled()) return absl::CancelledError("the tune was cancelled");
    if (absl::Status s = RunCandidate(i); !s.ok()) return s;
    const CandidateRecord& r = records_[i];
    Emit({"measured", measured, proposed, best_us,
          r.status == CandidateStatus::kOk ? absl::StrFormat("%s: %.2f us", stages_->Name(i), r.timing.median_us)
                                           : absl::StrCat(stages_->Name(i), ": ", CandidateStatusName(r.status)),
          i});
  }
  run_seconds += Seconds(run_start);
  return absl::OkStatus();
}

absl::Status Pipeline::RunCandidate(int i) {
  CandidateRecord& record = records_[i];
  const LaunchRecipe& recipe = recipes_[i];
  auto fail = [&](const absl::Status& s, const char* phase) -> absl::Status {
    if (EndsTune(s)) return s;
    record.status = ClassifyRunFailure(s, recipe, options_.on_quarantine, stages_->QuarantineDetail(phase, s));
    record.phase = phase;
    record.message = std::string(s.message());
    return absl::OkStatus();
  };
  absl::StatusOr<VerifyResult> v = Verify(recipe);
  ++verified;
  if (!v.ok()) return fail(v.status(), "verify");
  if (!v->ok) {
    record.status = CandidateStatus::kWrongAnswer;
    record.message = v->detail;
    return absl::OkStatus();
  }
  Emit({"verified", verified, proposed, best_us, absl::StrCat(stages_->Name(i), ": correct"), -1});
  absl::Status before = stages_->BeforeTime(*this, i);
  absl::StatusOr<Timing> t = before.ok() ? Time(recipe, options_.measure) : absl::StatusOr<Timing>(before);
  ++measured;
  if (!t.ok()) return fail(t.status(), "time");
  record.status = CandidateStatus::kOk;
  record.timing = *t;
  if (best_us == 0 || t->median_us < best_us) best_us = t->median_us;
  return absl::OkStatus();
}

}  // namespace ktune
