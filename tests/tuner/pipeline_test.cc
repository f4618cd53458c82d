// The tuning pipeline (tuner/run/pipeline.h) and the norm tuner's stages
// (tuner/norm/norm_tuner.cc) without a GPU: candidates run on a scripted ProblemRunner
// behind NewRunnerExecutor, and their code comes from a kernel cache filled
// beforehand with made-up cubins, so no NVRTC compile runs and every test is
// quick. The last cases compile real templates through the cache
// (CompileThroughCache) and check GEMM's stages over library candidates.
#include "tuner/run/pipeline.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/compile/compile_through_cache.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/gemm/gemm_tuner.h"
#include "tuner/norm/norm_space.h"
#include "tuner/norm/norm_tuner.h"
#include "tuner/problem_runners.h"

namespace ktune {
namespace {

// What each candidate (by CandidateId) does when run, and what was run.
struct Script {
  std::map<std::string, double> us;  // median time; others take default_us
  double default_us = 500;
  std::set<std::string> wrong;         // Verify says wrong
  std::set<std::string> fault_verify;  // Verify is ABORTED (the worker died)
  std::set<std::string> hang_time;     // Time is DEADLINE_EXCEEDED (the watchdog)
  std::vector<LaunchRecipe> library;   // LibraryCandidates
  int cancel_after_verifies = -1;      // sets `cancel` at this many Verify calls
  std::atomic<bool> cancel{false};
  std::vector<std::string> calls;  // "verify <id>", "time <id>", in order
  int verifies = 0;
};

class ScriptedRunner final : public ProblemRunner {
 public:
  explicit ScriptedRunner(Script* script) : s_(*script) {}
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override {
    const std::string id = CandidateId(recipe);
    s_.calls.push_back("verify " + id);
    if (++s_.verifies == s_.cancel_after_verifies) s_.cancel = true;
    if (recipe.cubin.empty() && !recipe.is_cublaslt_call()) return absl::InternalError("not compiled");
    if (s_.fault_verify.count(id) > 0) return absl::AbortedError("the worker was killed by signal 6");
    VerifyResult v;
    v.ok = s_.wrong.count(id) == 0;
    v.detail = v.ok ? "" : "y[3] = 7 (want 1)";
    return v;
  }
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    const std::string id = CandidateId(recipe);
    s_.calls.push_back("time " + id);
    if (s_.hang_time.count(id) > 0) return absl::DeadlineExceededError("no answer within 2 s (watchdog)");
    Timing t;
    t.median_us = s_.us.count(id) > 0 ? s_.us.at(id) : s_.default_us;
    t.p10_us = t.median_us;
    t.p90_us = t.median_us;
    t.spread = 0.005;  // a tie window of 1%
    t.repetitions = options.repetitions;
    return t;
  }
  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override {
    std::vector<LaunchRecipe> out = s_.library;
    if (static_cast<int>(out.size()) > max) out.resize(max);
    return out;
  }

 private:
  Script& s_;
};

std::unique_ptr<CandidateExecutor> ScriptedExecutor(Script* script) {
  return NewRunnerExecutor(CompileOnlyTarget(), [script](const v1::Problem&) {
    return absl::StatusOr<std::unique_ptr<ProblemRunner>>(std::make_unique<ScriptedRunner>(script));
  });
}

NormProblem Forward() {
  NormProblem p;
  p.m = 256;
  p.n = 1024;
  return p;
}

NormProblem Backward() {
  NormProblem p;
  p.pass = NormPass::kBackward;
  p.m = 4096;
  p.n = 1024;
  return p;
}

LaunchRecipe RecipeOf(const NormProblem& p, const NormConfig& c) {
  absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, CompileOnlyTarget());
  REQUIRE(r.ok());
  return *r;
}

std::string IdOf(const NormProblem& p, const NormConfig& c) { return CandidateId(RecipeOf(p, c)); }

// A kernel cache holding a made-up cubin for every config of p's space (and,
// for a backward, every reduce geometry the reduce pass tries), so that the
// tune compiles nothing.
class FilledCache {
 public:
  explicit FilledCache(const NormProblem& p) {
    auto cache = KernelCache::Open(dir_.path(), uint64_t{1} << 30);
    REQUIRE(cache.ok());
    cache_ = *std::move(cache);
    for (const NormConfig& c : NormSearchSpace(p, CompileOnlyTarget())) {
      Put(RecipeOf(p, c));
      for (int rows : ReduceRowsCandidates(p, c)) {
        NormConfig v = c;
        v.reduce_rows = rows;
        Put(RecipeOf(p, v));
      }
    }
  }
  KernelCache* get() { return cache_.get(); }

 private:
  void Put(LaunchRecipe r) {
    r.cubin = "fake cubin of " + CandidateId(r);
    for (KernelLaunch& k : r.kernels) k.lowered_name = "_Z" + k.name_expression;
    cache_->Store(r, NvrtcVersion());
  }
  testing::TempDir dir_;
  std::unique_ptr<KernelCache> cache_;
};

TuneOptions Quick(KernelCache* cache) {
  TuneOptions o;
  o.measure.warmup = 1;
  o.measure.repetitions = 10;
  o.kernel_cache = cache;
  return o;
}

TEST_CASE("the norm pipeline measures every candidate from the kernel cache and picks the fastest",
          "[tuner][pipeline]") {
  const NormProblem p = Forward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  REQUIRE(space.size() >= 4);
  FilledCache cache(p);
  Script script;
  script.us[IdOf(p, space[2])] = 50;
  auto executor = ScriptedExecutor(&script);
  std::vector<std::string> stages;
  auto r = TuneNorm(p, executor.get(), Quick(cache.get()), [&](const TuneProgress& e) { stages.push_back(e.stage); });
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->config == space[2]);
  CHECK(r->timing.median_us == 50);
  CHECK(r->compiled == 0);
  CHECK(r->kernel_cache_hits == static_cast<int>(space.size()));
  CHECK(r->candidates_generated == static_cast<int>(space.size()));
  CHECK(r->candidates_measured == static_cast<int>(space.size()));
  for (const CandidateOutcome& o : r->outcomes) CHECK(o.status == CandidateStatus::kOk);
  REQUIRE_FALSE(stages.empty());
  CHECK(stages.front() == "generated");
  CHECK(std::count(stages.begin(), stages.end(), "verified") == static_cast<long>(space.size()));
  CHECK(std::count(stages.begin(), stages.end(), "pruned") == 1);  // one batch (grid search)
}

TEST_CASE("a wrong-answer candidate is recorded and never wins", "[tuner][pipeline]") {
  const NormProblem p = Forward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  FilledCache cache(p);
  Script script;
  script.us[IdOf(p, space[0])] = 1;  // the fastest by far, but wrong
  script.wrong.insert(IdOf(p, space[0]));
  script.us[IdOf(p, space[1])] = 100;
  auto executor = ScriptedExecutor(&script);
  auto r = TuneNorm(p, executor.get(), Quick(cache.get()));
  REQUIRE(r.ok());
  CHECK(r->outcomes[0].status == CandidateStatus::kWrongAnswer);
  CHECK(r->outcomes[0].detail == "y[3] = 7 (want 1)");
  CHECK(r->config == space[1]);
  // Verified, never timed.
  CHECK(std::count(script.calls.begin(), script.calls.end(), "time " + IdOf(p, space[0])) == 0);
}

TEST_CASE("a candidate that faults or hangs is quarantined and the tune goes on", "[tuner][pipeline]") {
  const NormProblem p = Forward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  FilledCache cache(p);
  Script script;
  const std::string faulty = IdOf(p, space[0]), hanging = IdOf(p, space[1]);
  script.fault_verify.insert(faulty);
  script.hang_time.insert(hanging);
  script.us[IdOf(p, space[3])] = 40;
  auto executor = ScriptedExecutor(&script);
  TuneOptions options = Quick(cache.get());
  std::vector<std::vector<std::string>> quarantined;
  options.on_quarantine = [&](const std::string& id, const std::string& reason, const std::string& detail) {
    quarantined.push_back({id, reason, detail});
  };
  auto r = TuneNorm(p, executor.get(), options);
  REQUIRE(r.ok());
  REQUIRE(quarantined.size() == 2);
  CHECK(quarantined[0] == std::vector<std::string>{faulty, "fault", "verify: the worker was killed by signal 6"});
  CHECK(quarantined[1] == std::vector<std::string>{hanging, "timeout", "time: no answer within 2 s (watchdog)"});
  CHECK(r->outcomes[0].status == CandidateStatus::kFault);
  CHECK(r->outcomes[1].status == CandidateStatus::kTimeout);
  CHECK(r->outcomes[1].detail == "time: no answer within 2 s (watchdog)");
  CHECK(r->config == space[3]);
  for (size_t i = 2; i < space.size(); ++i) CHECK(r->outcomes[i].status == CandidateStatus::kOk);
}

TEST_CASE("quarantined candidates are neither compiled nor run", "[tuner][pipeline]") {
  const NormProblem p = Forward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  Script script;
  const std::string banned = IdOf(p, space[1]);
  script.us[banned] = 1;
  auto executor = ScriptedExecutor(&script);
  FilledCache cache(p);
  TuneOptions options = Quick(cache.get());
  options.quarantined = {banned};
  const CandidateOutcome* pruned = nullptr;
  auto r = TuneNorm(p, executor.get(), options, [&](const TuneProgress& e) {
    if (e.stage == "pruned" && e.candidate != nullptr) pruned = e.candidate;
  });
  REQUIRE(r.ok());
  CHECK(r->outcomes[1].status == CandidateStatus::kQuarantined);
  CHECK(r->kernel_cache_hits == static_cast<int>(space.size()) - 1);  // not even looked up
  REQUIRE(pruned != nullptr);
  CHECK(pruned->status == CandidateStatus::kQuarantined);
  CHECK(pruned->config == space[1]);
  for (const std::string& call : script.calls) CHECK(call.find(banned) == std::string::npos);
  CHECK_FALSE(r->config == space[1]);
}

TEST_CASE("candidates tied within the noise go to the earliest in space order", "[tuner][pipeline]") {
  const NormProblem p = Forward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  REQUIRE(space.size() >= 6);
  FilledCache cache(p);
  {
    Script script;
    script.us[IdOf(p, space[5])] = 100;
    script.us[IdOf(p, space[2])] = 100.5;  // within 1%: a tie, and earlier
    auto executor = ScriptedExecutor(&script);
    auto r = TuneNorm(p, executor.get(), Quick(cache.get()));
    REQUIRE(r.ok());
    CHECK(r->config == space[2]);
  }
  {
    Script script;
    script.us[IdOf(p, space[5])] = 100;
    script.us[IdOf(p, space[2])] = 102;  // outside the window: the faster wins
    auto executor = ScriptedExecutor(&script);
    auto r = TuneNorm(p, executor.get(), Quick(cache.get()));
    REQUIRE(r.ok());
    CHECK(r->config == space[5]);
  }
}

TEST_CASE("a cancelled norm tune returns CANCELLED", "[tuner][pipeline]") {
  const NormProblem p = Forward();
  FilledCache cache(p);
  Script script;
  script.cancel_after_verifies = 2;
  auto executor = ScriptedExecutor(&script);
  TuneOptions options = Quick(cache.get());
  options.cancelled = &script.cancel;
  auto r = TuneNorm(p, executor.get(), options);
  CHECK(r.status().code() == absl::StatusCode::kCancelled);
  CHECK(script.verifies == 2);  // checked before every candidate
}

TEST_CASE("a backward's reduce geometries are tried after the winner is chosen", "[tuner][pipeline]") {
  const NormProblem p = Backward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  int w = -1;  // the first config whose reduce kernel has geometries to try
  for (size_t i = 0; i < space.size() && w < 0; ++i) {
    if (!ReduceRowsCandidates(p, space[i]).empty()) w = static_cast<int>(i);
  }
  REQUIRE(w >= 0);
  const std::vector<int> rows = ReduceRowsCandidates(p, space[w]);
  FilledCache cache(p);
  Script script;
  const std::string winner = IdOf(p, space[w]);
  script.us[winner] = 10;
  NormConfig faster = space[w];
  faster.reduce_rows = rows.back();
  script.us[IdOf(p, faster)] = 8;  // 20% faster: outside the window
  auto executor = ScriptedExecutor(&script);
  TuneOptions options = Quick(cache.get());
  options.remeasure_top = 1;
  auto r = TuneNorm(p, executor.get(), options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->reduce_variants_measured == static_cast<int>(rows.size()));
  CHECK(r->config == faster);
  CHECK(r->timing.median_us == 8);
  CHECK(r->outcomes[w].config == space[w]);  // the outcomes stay the space's
  // Order: the first round (every candidate), the winner re-measured, the
  // winner timed again as the base, then the variants.
  const size_t first_round = 2 * space.size();
  REQUIRE(script.calls.size() == first_round + 2 + 2 * rows.size());
  CHECK(script.calls[first_round] == "time " + winner);
  CHECK(script.calls[first_round + 1] == "time " + winner);
  for (size_t v = 0; v < rows.size(); ++v) {
    NormConfig c = space[w];
    c.reduce_rows = rows[v];
    CHECK(script.calls[first_round + 2 + 2 * v] == "verify " + IdOf(p, c));
  }
  SECTION("and not at all with tune_reduce off") {
    Script again;
    again.us[winner] = 10;
    auto executor2 = ScriptedExecutor(&again);
    options.tune_reduce = false;
    auto r2 = TuneNorm(p, executor2.get(), options);
    REQUIRE(r2.ok());
    CHECK(r2->reduce_variants_measured == 0);
    CHECK(r2->config == space[w]);
  }
}

TEST_CASE("a wrong or faulting reduce geometry is skipped, and a fault is quarantined", "[tuner][pipeline]") {
  const NormProblem p = Backward();
  const std::vector<NormConfig> space = NormSearchSpace(p, CompileOnlyTarget());
  int w = -1;
  for (size_t i = 0; i < space.size() && w < 0; ++i) {
    if (!ReduceRowsCandidates(p, space[i]).empty()) w = static_cast<int>(i);
  }
  REQUIRE(w >= 0);
  const std::vector<int> rows = ReduceRowsCandidates(p, space[w]);
  NormConfig variant = space[w];
  variant.reduce_rows = rows[0];
  const std::string id = IdOf(p, variant);
  FilledCache cache(p);
  for (const bool fault : {false, true}) {
    INFO((fault ? "faulting" : "wrong"));
    Script script;
    script.us[IdOf(p, space[w])] = 10;
    script.us[id] = 1;  // far faster, if it counted
    (fault ? script.fault_verify : script.wrong).insert(id);
    auto executor = ScriptedExecutor(&script);
    TuneOptions options = Quick(cache.get());
    std::vector<std::string> quarantined;
    options.on_quarantine = [&](const std::string& c, const std::string& reason, const std::string& detail) {
      quarantined.push_back(c + " " + reason + " " + detail);
    };
    auto r = TuneNorm(p, executor.get(), options);
    REQUIRE(r.ok());
    CHECK(r->config == space[w]);  // the derived geometry stays
    CHECK(r->reduce_variants_measured == static_cast<int>(rows.size()) - 1);
    CHECK(std::count(script.calls.begin(), script.calls.end(), "time " + id) == 0);
    if (fault) {
      CHECK(quarantined == std::vector<std::string>{id + " fault the worker was killed by signal 6"});
    } else {
      CHECK(quarantined.empty());
    }
  }
}

TEST_CASE("an executor that is gone ends the tune with its error", "[tuner][pipeline]") {
  class Gone final : public ProblemRunner {
    absl::StatusOr<VerifyResult> Verify(const LaunchRecipe&) override {
      return absl::UnavailableError("restarting the worker failed");
    }
    absl::StatusOr<Timing> Time(const LaunchRecipe&, const MeasureOptions&) override { return Timing(); }
    absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int) override { return std::vector<LaunchRecipe>(); }
  };
  const NormProblem p = Forward();
  FilledCache cache(p);
  auto executor = NewRunnerExecutor(CompileOnlyTarget(), [](const v1::Problem&) {
    return absl::StatusOr<std::unique_ptr<ProblemRunner>>(std::make_unique<Gone>());
  });
  int quarantines = 0;
  TuneOptions options = Quick(cache.get());
  options.on_quarantine = [&](const std::string&, const std::string&, const std::string&) { ++quarantines; };
  auto r = TuneNorm(p, executor.get(), options);
  CHECK(r.status().code() == absl::StatusCode::kUnavailable);
  CHECK(quarantines == 0);
}

// `count` made-up cuBLASLt algorithms as the library's candidates.
void AddLibraryCandidates(Script* script, int count) {
  for (int i = 0; i < count; ++i) {
    LaunchRecipe r;
    r.template_id = kCublasLtTemplateId;
    r.cublaslt_algo = std::string(64, static_cast<char>('a' + i));
    script->library.push_back(r);
  }
}

TEST_CASE("GEMM's stages over library candidates: wrong, faulting and quarantined ones fail alone",
          "[tuner][pipeline][gemm]") {
  // fp8 with K not a whole number of 16-byte rows: no template serves it, so
  // every candidate is the library's and nothing compiles.
  const v1::GemmProblem p = Fp8Gemm(1024, 1024, 1032);
  Script script;
  AddLibraryCandidates(&script, 5);
  const auto id = [&](int i) { return CandidateId(script.library[i]); };
  script.us[id(0)] = 50;  // cuBLASLt's default
  script.us[id(1)] = 10;  // the fastest, but wrong
  script.wrong.insert(id(1));
  script.fault_verify.insert(id(2));
  script.us[id(3)] = 30;  // the fastest correct one
  script.us[id(4)] = 1;   // quarantined
  auto executor = ScriptedExecutor(&script);
  GemmTuneOptions options;
  options.heat_ms = 0;
  options.quarantined = {id(4)};
  std::vector<std::string> quarantined;
  options.on_quarantine = [&](const std::string& c, const std::string& reason, const std::string& detail) {
    quarantined.push_back(c + " " + reason + " " + detail);
  };
  auto r = TuneGemm(p, executor.get(), options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->template_candidates == 0);
  CHECK(r->cublaslt_candidates == 5);
  REQUIRE(r->outcomes.size() == 5);
  CHECK(r->outcomes[0].status == "ok");
  CHECK(r->outcomes[1].status == "wrong: y[3] = 7 (want 1)");
  CHECK(r->outcomes[2].status == "fault: the worker was killed by signal 6");
  CHECK(r->outcomes[3].status == "ok");
  CHECK(r->outcomes[4].status == "quarantined");
  CHECK(quarantined == std::vector<std::string>{id(2) + " fault the worker was killed by signal 6"});
  CHECK(r->winner.Name() == "cublaslt #3");
  REQUIRE(r->cublaslt_default.has_value());
  CHECK(r->cublaslt_default->median_us == 50);
  for (const std::string& call : script.calls) CHECK(call.find(id(4)) == std::string::npos);
}

TEST_CASE("a cancelled GEMM tune returns CANCELLED", "[tuner][pipeline][gemm]") {
  const v1::GemmProblem p = Fp8Gemm(1024, 1024, 1032);
  Script script;
  AddLibraryCandidates(&script, 4);
  script.cancel_after_verifies = 1;
  auto executor = ScriptedExecutor(&script);
  GemmTuneOptions options;
  options.heat_ms = 0;
  options.cancelled = &script.cancel;
  auto r = TuneGemm(p, executor.get(), options);
  CHECK(r.status().code() == absl::StatusCode::kCancelled);
}

TEST_CASE("CompileThroughCache compiles a real template once, then serves it from the cache",
          "[tuner][pipeline][nvrtc]") {
  const NormProblem p = Forward();
  testing::TempDir dir;
  auto cache = KernelCache::Open(dir.path(), uint64_t{1} << 30);
  REQUIRE(cache.ok());
  LaunchRecipe first = RecipeOf(p, HeuristicNormConfig(p, CompileOnlyTarget()));
  const LaunchRecipe uncompiled = first;
  const CachedCompile compiled = CompileThroughCache(&first, cache->get());
  INFO(compiled.log);
  REQUIRE(compiled.ok);
  CHECK(compiled.compiled);
  CHECK_FALSE(compiled.cache_hit);
  CHECK_FALSE(first.cubin.empty());
  CHECK_FALSE(first.kernels[0].lowered_name.empty());

  LaunchRecipe second = uncompiled;
  const CompileBatchResult again = CompileThroughCache(std::vector<LaunchRecipe*>{&second}, cache->get());
  REQUIRE(again.results.size() == 1);
  CHECK(again.results[0].ok);
  CHECK(again.results[0].cache_hit);
  CHECK(again.cache_hits == 1);
  CHECK(again.compiled == 0);
  CHECK(second.cubin == first.cubin);
  CHECK(second.kernels[0].lowered_name == first.kernels[0].lowered_name);

  // A compile error is a value, and leaves the recipe as it was.
  LaunchRecipe broken = uncompiled;
  broken.kernels[0].name_expression = "no_such_kernel<1>";
  const LaunchRecipe before = broken;
  const CachedCompile failed = CompileThroughCache(&broken, nullptr);
  CHECK_FALSE(failed.ok);
  CHECK(failed.compiled);
  CHECK_FALSE(failed.log.empty());
  CHECK(broken.cubin == before.cubin);
  // A library call has nothing to compile.
  LaunchRecipe lt;
  lt.template_id = kCublasLtTemplateId;
  lt.cublaslt_algo = std::string(64, 'x');
  const CachedCompile library = CompileThroughCache(&lt, cache->get());
  CHECK(library.ok);
  CHECK_FALSE(library.compiled);
}

}  // namespace
}  // namespace ktune
