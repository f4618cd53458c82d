// The GEMM tuner's parts that need no GPU: how the winner is picked among
// the re-measured finalists, that a GPU whose clocks fall as it gets busy
// does not bias the winner, and that the reference every candidate is
// checked against compiles for every kind of problem.
#include "tuner/gemm/gemm_tuner.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/run/executor.h"

namespace ktune {
namespace {

Timing At(double us, double spread = 0.005) {
  Timing t;
  t.median_us = us;
  t.spread = spread;
  t.repetitions = 100;
  return t;
}

// Finalists' interleaved passes: each finalist's list of per-pass timings,
// and what TuneGemm combines them to.
using Passes = std::vector<std::vector<Timing>>;
Passes Steady(const std::vector<double>& us) {
  Passes passes;
  for (double t : us) passes.push_back(std::vector<Timing>(5, At(t)));
  return passes;
}
std::vector<Timing> Combined(const Passes& passes) {
  std::vector<Timing> finals;
  for (const std::vector<Timing>& p : passes) finals.push_back(CombinePasses(p));
  return finals;
}
size_t Pick(const Passes& passes, std::optional<size_t> preferred) {
  return PickGemmWinner(Combined(passes), passes, preferred);
}
Passes Of(const std::vector<std::vector<double>>& us) {
  Passes passes;
  for (const std::vector<double>& finalist : us) {
    passes.emplace_back();
    for (double t : finalist) passes.back().push_back(At(t));
  }
  return passes;
}

TEST_CASE("the GEMM winner is the fastest unless cuBLASLt's default ties it", "[tuner][gemm]") {
  // Index 0 is cuBLASLt's default where one is preferred.
  CHECK(Pick(Steady({100, 90, 95}), 0) == 1);
  // Within 1% (the minimum window) of the fastest: cuBLASLt's default keeps it.
  CHECK(Pick(Steady({100.5, 100}), 0) == 0);
  // Just outside the window: the faster template wins.
  CHECK(Pick(Steady({101.5, 100}), 0) == 1);
  // A fastest whose median moved between passes (here by 3%) widens the
  // window, up to 3%: 2.5% slower in the combined medians is a tie ...
  const Passes drifting = Of({{97, 103, 102.5, 104, 101}, {100, 98, 100, 101, 100.5}});
  REQUIRE(Combined(drifting)[1].pass_range == Approx(0.03));
  CHECK(Pick(drifting, 0) == 0);
  // ... unless the fastest beat the default by at least 1% in every pass:
  // the drift moved both alike.
  const Passes paired = Of({{103, 100, 104, 102.5, 101.5}, {100, 98, 101, 100, 100.4}});
  REQUIRE(Combined(paired)[0].median_us <= Combined(paired)[1].median_us * 1.03);
  CHECK(Pick(paired, 0) == 1);
  // Faster in every pass, but by under 1% in one: still a tie.
  CHECK(Pick(Of({{103, 100, 104, 102.5, 100.9}, {100, 98, 101, 100, 100.4}}), 0) == 0);
  // Outside the widest window the passes are not consulted.
  CHECK(Pick(Of({{97, 104, 103.5, 105, 104}, {100, 98, 100, 101, 100.5}}), 0) == 1);
  // Jittery single calls do not widen it: the medians of many are what is
  // compared (a spread of 20% in each pass, no drift between passes).
  Passes jittery = Steady({101.2, 100});
  for (Timing& t : jittery[1]) t.spread = 0.2;
  REQUIRE(Combined(jittery)[1].pass_range == 0);
  CHECK(Pick(jittery, 0) == 1);
  // Other candidates tied with the fastest get no preference: the fastest
  // wins, whatever the order (the default, index 0, being out of the window).
  CHECK(Pick(Steady({110, 100.2, 100, 100.1}), 0) == 2);
  CHECK(Pick(Steady({100.1, 100, 100.2}), std::nullopt) == 1);
}

TEST_CASE("interleaved passes combine to the median pass, the spread covering their drift", "[tuner][gemm]") {
  const Timing t = CombinePasses({At(100), At(104), At(101), At(99), At(100)});
  CHECK(t.median_us == 100);
  CHECK(t.repetitions == 500);
  CHECK(t.pass_range == Approx(0.05));  // (104 - 99) / 100
  CHECK(t.spread == Approx(0.05));      // wider than each pass's 0.5%
  CHECK(CombinePasses({At(100, 0.2)}).spread == Approx(0.2));
  CHECK(CombinePasses({At(100, 0.2)}).pass_range == 0);
}

// cuBLASLt-only candidates (an fp8 problem whose K is not a whole number of
// 16-byte rows, so no template serves it) on a GPU
// that is fast while idle and slows to its steady clocks over `ramp_us` of
// busy time, as a power-limited H200 does under a large GEMM. Candidate i
// takes base_us[i] at steady clocks; candidates are named by their algo byte.
class BusyGpuExecutor : public CandidateExecutor {
 public:
  BusyGpuExecutor(std::vector<double> base_us, double ramp_us) : base_us_(std::move(base_us)), ramp_us_(ramp_us) {
    info_.name = "fake busy GPU";
    info_.cc_major = 9;
    info_.sm_count = 132;
    info_.l2_bytes = 50 << 20;
    info_.max_smem_per_block_optin = 227 << 10;
  }
  const DeviceInfo& device() const override { return info_; }
  absl::Status Prepare(const v1::Problem& problem) override {
    return problem.has_gemm() ? absl::OkStatus() : absl::UnimplementedError("GEMM only");
  }
  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override {
    std::vector<LaunchRecipe> out;
    for (size_t i = 0; i < base_us_.size() && static_cast<int>(i) < max; ++i) {
      LaunchRecipe r;
      r.template_id = kCublasLtTemplateId;
      r.cublaslt_algo = std::string(1, static_cast<char>(i));
      out.push_back(r);
    }
    return out;
  }
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe&) override { return VerifyResult{true, "", 0}; }
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    const double base = base_us_.at(static_cast<size_t>(recipe.cublaslt_algo.at(0)));
    std::vector<float> samples_ms;
    for (int i = 0; i < options.warmup + options.repetitions; ++i) {
      const double us = base * (0.7 + 0.3 * std::min(1.0, busy_us_ / ramp_us_));
      busy_us_ += us;
      if (i >= options.warmup) samples_ms.push_back(static_cast<float>(us / 1e3));
    }
    return Summarize(samples_ms);
  }

 private:
  DeviceInfo info_;
  std::vector<double> base_us_;
  double ramp_us_;
  double busy_us_ = 0;
};

TEST_CASE("a GPU whose clocks fall as it gets busy does not favour the candidates timed first", "[tuner][gemm]") {
  const v1::GemmProblem p = Fp8Gemm(8192, 8192, 8200);
  // The last of eight is 10% faster than the rest at steady clocks. Timed
  // from idle, the first ones read up to 30% faster and would fill the
  // finalists, leaving it out; with the heat-up it is found.
  const std::vector<double> base = {100, 101, 102, 103, 104, 105, 106, 90};
  const double ramp_us = 4 * 35 * 100;  // four first-round measurements
  GemmTuneOptions options;
  {
    BusyGpuExecutor gpu(base, ramp_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK(r->winner.Name() == "cublaslt #7");
    CHECK(r->winner_timing.median_us == Approx(90).epsilon(0.01));
    REQUIRE(r->cublaslt_default.has_value());
    CHECK(r->cublaslt_default->median_us == Approx(100).epsilon(0.01));
    // The finalists (five, the default among them; no templates here) say so:
    // their timings are the final passes', the others' the first round's.
    const auto finalist = [&](const std::string& name) {
      for (const GemmCandidateOutcome& o : r->outcomes) {
        if (o.name == name) return o.finalist;
      }
      FAIL("no outcome named " << name);
      return false;
    };
    CHECK(std::count_if(r->outcomes.begin(), r->outcomes.end(),
                        [](const GemmCandidateOutcome& o) { return o.finalist; }) == options.finalists);
    CHECK(finalist("cublaslt #7"));
    CHECK(finalist("cublaslt #0"));
    CHECK_FALSE(finalist("cublaslt #6"));
  }
  {
    // The control: the same GPU without the heat-up picks a wrong winner,
    // so the case above shows the heat-up at work.
    options.heat_ms = 0;
    options.finalists = 3;
    BusyGpuExecutor gpu(base, ramp_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK(r->winner.Name() != "cublaslt #7");
  }
}

// The busy GPU, recording which candidate each final pass timed.
class RecordingGpuExecutor : public BusyGpuExecutor {
 public:
  using BusyGpuExecutor::BusyGpuExecutor;
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    const MeasureOptions final_measure = GemmTuneOptions().final_measure;
    if (options.warmup == final_measure.warmup && options.repetitions == final_measure.repetitions) {
      final_order.push_back(static_cast<int>(recipe.cublaslt_algo.at(0)));
    }
    return BusyGpuExecutor::Time(recipe, options);
  }
  std::vector<int> final_order;  // candidate indices, in the order timed
};

TEST_CASE("the final passes alternate their order, so a drift within a pass favours no one", "[tuner][gemm]") {
  // The winner is compared with cuBLASLt's default pass by pass
  // (PickGemmWinner): a candidate timed after the default in every pass on a
  // GPU that keeps slowing would look slower in every pass.
  RecordingGpuExecutor gpu({100, 99, 98, 97, 96, 95, 94, 93}, 1);
  GemmTuneOptions options;
  REQUIRE(options.measure.repetitions != options.final_measure.repetitions);
  auto r = TuneGemm(Fp8Gemm(8192, 8192, 8200), &gpu, options);
  REQUIRE(r.ok());
  const size_t finalists = gpu.final_order.size() / options.final_passes;
  REQUIRE(finalists >= 2);
  REQUIRE(gpu.final_order.size() == finalists * options.final_passes);
  for (int pass = 1; pass < options.final_passes; ++pass) {
    INFO("pass " << pass);
    const auto first = gpu.final_order.begin();
    std::vector<int> previous(first + (pass - 1) * finalists, first + pass * finalists);
    std::reverse(previous.begin(), previous.end());
    CHECK(std::vector<int>(first + pass * finalists, first + (pass + 1) * finalists) == previous);
  }
}

// cuBLASLt-only candidates on a power-limited GPU: candidate i takes
// cycles_us[i] at full clocks and draws power[i] (1 = the limit). The board's
// draw follows what runs, averaged over `memory_us` of busy time, and clocks
// fall in proportion when it exceeds the limit. Interleaved, every candidate
// runs at the clocks of the mix; after its own heat, at its own.
class PowerLimitedExecutor : public BusyGpuExecutor {
 public:
  PowerLimitedExecutor(std::vector<double> cycles_us, std::vector<double> power, double memory_us)
      : BusyGpuExecutor(cycles_us, 1),
        cycles_us_(std::move(cycles_us)),
        power_(std::move(power)),
        memory_us_(memory_us) {}
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    const size_t i = static_cast<size_t>(recipe.cublaslt_algo.at(0));
    std::vector<float> samples_ms;
    for (int r = 0; r < options.warmup + options.repetitions; ++r) {
      const double us = cycles_us_.at(i) * std::max(1.0, draw_);
      draw_ += (power_.at(i) - draw_) * std::min(1.0, us / memory_us_);
      if (r >= options.warmup) samples_ms.push_back(static_cast<float>(us / 1e3));
    }
    ++timings;
    return Summarize(samples_ms);
  }
  int timings = 0;

 private:
  std::vector<double> cycles_us_, power_;
  double memory_us_;
  double draw_ = 0.5;  // idle
};

TEST_CASE("a large GEMM's winner is the fastest when each finalist runs after its own heat", "[tuner][gemm]") {
  // #1 takes 2% more cycles than the default (#0) but draws 15% less power.
  // Interleaved, both run at the clocks of the mix and the default wins; run
  // back to back, #1 holds full clocks and is 13% faster: the sustained
  // finals find it. The others are slower either way.
  const std::vector<double> cycles = {500, 510, 530, 540, 550, 560};
  const std::vector<double> power = {1.15, 1.0, 1.15, 1.15, 1.15, 1.15};
  const double memory_us = 100000;  // the board's draw follows ~100 ms of work
  const v1::GemmProblem p = Fp8Gemm(8192, 8192, 8200);
  GemmTuneOptions options;
  options.sustained_finalists = 0;
  {
    PowerLimitedExecutor gpu(cycles, power, memory_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK(r->winner.Name() == "cublaslt #0");
    CHECK_FALSE(r->sustained);
    for (const GemmCandidateOutcome& o : r->outcomes) CHECK_FALSE(o.sustained.has_value());
  }
  options.sustained_finalists = GemmTuneOptions().sustained_finalists;
  REQUIRE(options.sustained_finalists >= 1);
  {
    PowerLimitedExecutor gpu(cycles, power, memory_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK(r->sustained);
    CHECK(r->winner.Name() == "cublaslt #1");
    // The reported timings are the sustained ones: #1 near full clocks (its
    // interleaved timing ran at the mix's), the default slowed by its own draw.
    CHECK(r->winner_timing.median_us == Approx(510).epsilon(0.02));
    REQUIRE(r->cublaslt_default.has_value());
    CHECK(r->cublaslt_default->median_us > 1.1 * r->winner_timing.median_us);
    int sustained = 0;
    for (const GemmCandidateOutcome& o : r->outcomes) {
      if (!o.sustained) continue;
      ++sustained;
      CHECK(o.finalist);
      CHECK(o.sustained->repetitions >= options.sustained_rounds * 20);
      if (o.name == "cublaslt #1") CHECK(o.sustained->median_us < 0.95 * o.timing.median_us);
    }
    // The fastest few (the default among them: no templates here).
    CHECK(sustained == options.sustained_finalists);
    // The default's candidate comes with its timing, for a caller to time again.
    REQUIRE(r->cublaslt_default_candidate.has_value());
    CHECK(r->cublaslt_default_candidate->Name() == "cublaslt #0");
    CHECK_FALSE(r->best_template_candidate.has_value());
  }
  {
    // A problem too short for the power limit to matter: no sustained finals.
    options.sustained_min_us = 1000;
    PowerLimitedExecutor gpu(cycles, power, memory_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK_FALSE(r->sustained);
    CHECK(r->winner.Name() == "cublaslt #0");
  }
}

// The power-limited GPU, recording which candidate each timed window (not a
// heat-up: those start with a probe of one warm-up call) ran.
class RecordingPowerLimitedExecutor : public PowerLimitedExecutor {
 public:
  using PowerLimitedExecutor::PowerLimitedExecutor;
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    if (options.warmup == 0 && options.repetitions == kCalls) order.push_back(recipe.cublaslt_algo.at(0));
    return PowerLimitedExecutor::Time(recipe, options);
  }
  static constexpr int kCalls = 37;  // no heat-up is this long
  std::vector<int> order;
};

LaunchRecipe CublasLtNumber(int i) {
  LaunchRecipe r;
  r.template_id = kCublasLtTemplateId;
  r.cublaslt_algo = std::string(1, static_cast<char>(i));
  return r;
}

TEST_CASE("a head-to-head times two candidates round by round, each after its own heat", "[tuner][gemm]") {
  // As above: #1 takes 2% more cycles than #0 but draws 15% less power, so
  // after its own heat it runs about 11% faster.
  const int calls = RecordingPowerLimitedExecutor::kCalls;
  RecordingPowerLimitedExecutor gpu({500, 510}, {1.15, 1.0}, 100000);
  auto h = TimeHeadToHead(&gpu, CublasLtNumber(1), CublasLtNumber(0), 6, 200, calls);
  REQUIRE(h.ok());
  REQUIRE(h->ratios.size() == 6);
  CHECK(h->a_us.size() == 6);
  CHECK(h->b_us.size() == 6);
  for (size_t r = 0; r < h->ratios.size(); ++r) {
    INFO("round " << r);
    CHECK(h->ratios[r] == Approx(h->b_us[r] / h->a_us[r]));
    CHECK(h->ratios[r] > 1.05);
  }
  CHECK(h->median_ratio == Approx(500 * 1.15 / 510).epsilon(0.03));
  // a first in even rounds, b first in odd ones.
  CHECK(gpu.order == std::vector<int>{1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1});

  SECTION("a drift between a round's two windows cancels over the alternating order") {
    // Clocks that keep falling: whoever runs second in a round reads slower.
    // 98 against 100 at equal clocks; each window moves the clocks by ~1.5%.
    BusyGpuExecutor drifting({100, 98}, 5e6);
    auto d = TimeHeadToHead(&drifting, CublasLtNumber(1), CublasLtNumber(0), 4, 200, 100);
    REQUIRE(d.ok());
    const double truth = 100.0 / 98;
    CHECK(d->ratios[0] > truth * 1.005);  // b second: it looks slower
    CHECK(d->ratios[1] < truth / 1.005);  // a second
    CHECK(d->median_ratio == Approx(truth).epsilon(0.003));
  }
  SECTION("no rounds or no calls is an error that names the argument") {
    auto none = TimeHeadToHead(&gpu, CublasLtNumber(1), CublasLtNumber(0), 0, 200, calls);
    CHECK(absl::IsInvalidArgument(none.status()));
    CHECK_THAT(std::string(none.status().message()), Catch::Contains("rounds"));
    auto empty = TimeHeadToHead(&gpu, CublasLtNumber(1), CublasLtNumber(0), 3, 200, 0);
    CHECK(absl::IsInvalidArgument(empty.status()));
    CHECK_THAT(std::string(empty.status().message()), Catch::Contains("calls"));
  }
}

TEST_CASE("a head-to-head is won in every round but at most one, by 1% at the median", "[tuner][gemm]") {
  auto of = [](std::vector<double> ratios, double median) {
    HeadToHead h;
    h.ratios = std::move(ratios);
    h.median_ratio = median;
    return h;
  };
  CHECK(HeadToHeadFavoursFirst(of({1.03, 1.028, 1.04, 1.035}, 1.032)));
  CHECK(HeadToHeadFavoursFirst(of({1.03, 0.99, 1.04, 1.035}, 1.032)));           // one round lost
  CHECK_FALSE(HeadToHeadFavoursFirst(of({1.03, 0.99, 1.04, 0.995}, 1.01)));      // two
  CHECK_FALSE(HeadToHeadFavoursFirst(of({1.03, 1.0, 1.04, 1.0}, 1.015)));        // a level round is not won
  CHECK_FALSE(HeadToHeadFavoursFirst(of({1.006, 1.004, 1.008, 1.009}, 1.007)));  // under 1% at the median
  CHECK_FALSE(HeadToHeadFavoursFirst(of({}, 0)));
}

// cuBLASLt-only candidates on a GPU whose clocks wander slowly, as the power
// controller moves them (a sine of the busy time, +-amplitude): timings
// seconds apart differ by more than the candidates do, timings moments apart
// hardly at all.
class WanderingClockExecutor : public BusyGpuExecutor {
 public:
  WanderingClockExecutor(std::vector<double> base_us, double amplitude, double period_us)
      : BusyGpuExecutor(base_us, 1), base_us_(std::move(base_us)), amplitude_(amplitude), period_us_(period_us) {}
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    const double base = base_us_.at(static_cast<size_t>(recipe.cublaslt_algo.at(0)));
    std::vector<float> samples_ms;
    for (int i = 0; i < options.warmup + options.repetitions; ++i) {
      const double us = base * (1 + amplitude_ * std::sin(2 * M_PI * busy_us_ / period_us_));
      busy_us_ += us;
      if (i >= options.warmup) samples_ms.push_back(static_cast<float>(us / 1e3));
    }
    return Summarize(samples_ms);
  }

 private:
  std::vector<double> base_us_;
  double amplitude_, period_us_;
  double busy_us_ = 0;
};

TEST_CASE("a sustained tie the window gives the default is broken head to head", "[tuner][gemm]") {
  // #1 is 2.5% faster than the default at any clock; the clocks wander by
  // +-4% over 3.1 s, more than that between the sustained windows of a round.
  // Here the sustained finals read #1 1% faster, with rounds 3.5% and 6.6%
  // apart: inside the window, which keeps the default.
  const std::vector<double> base = {1000, 975, 1080, 1090, 1100, 1110};
  const double amplitude = 0.04, period_us = 3.1e6;
  const v1::GemmProblem p = Fp8Gemm(8192, 8192, 8200);
  GemmTuneOptions options;
  REQUIRE(options.tie_break_rounds > 0);
  options.tie_break_rounds = 0;
  {
    // The control: the window alone keeps the default.
    WanderingClockExecutor gpu(base, amplitude, period_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    REQUIRE(r->sustained);
    CHECK(r->winner.Name() == "cublaslt #0");
    CHECK_FALSE(r->tie_break.has_value());
  }
  options.tie_break_rounds = GemmTuneOptions().tie_break_rounds;
  {
    WanderingClockExecutor gpu(base, amplitude, period_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK(r->winner.Name() == "cublaslt #1");
    REQUIRE(r->tie_break.has_value());
    CHECK(r->tie_break_challenger == "cublaslt #1");
    CHECK(r->tie_break->ratios.size() == static_cast<size_t>(options.tie_break_rounds));
    CHECK(r->tie_break->median_ratio == Approx(1000.0 / 975).epsilon(0.005));
    // The answer's timing is still its sustained one.
    bool found = false;
    for (const GemmCandidateOutcome& o : r->outcomes) {
      if (o.name != "cublaslt #1") continue;
      found = true;
      REQUIRE(o.sustained.has_value());
      CHECK(r->winner_timing.median_us == o.sustained->median_us);
    }
    CHECK(found);
  }
  {
    // Where the default is the fastest, no tie-break runs.
    WanderingClockExecutor gpu({950, 975, 1080, 1090, 1100, 1110}, amplitude, period_us);
    auto r = TuneGemm(p, &gpu, options);
    REQUIRE(r.ok());
    CHECK(r->winner.Name() == "cublaslt #0");
    CHECK_FALSE(r->tie_break.has_value());
  }
}

// The busy GPU on which every candidate computes a wrong answer.
class WrongGpuExecutor : public BusyGpuExecutor {
 public:
  using BusyGpuExecutor::BusyGpuExecutor;
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override {
    return VerifyResult{false, absl::StrCat("D[0, ", static_cast<int>(recipe.cublaslt_algo.at(0)), "] is off"), 1};
  }
};

TEST_CASE("when no GEMM candidate runs correctly the error says what became of them", "[tuner][gemm]") {
  WrongGpuExecutor gpu({10, 11, 12, 13, 14}, 1);
  auto r = TuneGemm(Fp8Gemm(8192, 8192, 8200), &gpu, GemmTuneOptions{});
  REQUIRE(absl::IsNotFound(r.status()));
  const std::string message(r.status().message());
  CHECK(message.find("cublaslt #0: wrong: D[0, 0] is off") != std::string::npos);
  CHECK(message.find("cublaslt #2: wrong: D[0, 2] is off") != std::string::npos);
  CHECK(message.find("cublaslt #3") == std::string::npos);
  CHECK(message.find("and 2 more") != std::string::npos);
}

TEST_CASE("GEMM outputs are checked element by element against the reference", "[tuner][gemm]") {
  // Small: one thread. Row-major [batch 2, M 3, N 4].
  std::vector<float> ref(24, 1.0f), got(24, 1.0f);
  VerifyResult v = CompareGemmOutput(got, ref, 1.0, 1e-2, 3, 4);
  CHECK(v.ok);
  CHECK(v.max_error == 0);
  got[13] = 1.015f;  // within 1e-2 * (1 + rms 1)
  got[17] = 1.05f;   // beyond: batch 1, row 1, column 1
  v = CompareGemmOutput(got, ref, 1.0, 1e-2, 3, 4);
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.detail, Catch::StartsWith("d[1, 1, 1] = 1.05, reference 1"));
  CHECK(v.max_error == Approx(2.5).epsilon(1e-3));
  got[5] = std::nanf("");  // an unwritten element earlier: it is the one named
  v = CompareGemmOutput(got, ref, 1.0, 1e-2, 3, 4);
  CHECK(v.detail == "d[0, 1, 1] is NaN (not written: D was poisoned)");
  CHECK(std::isinf(v.max_error));

  // Large enough for several threads: the first failure overall is named,
  // whichever slice finds it, and the largest error is every slice's.
  const int64_t m = 3000, n = 4096;  // 12.3M elements
  std::vector<float> big_ref(m * n, 2.0f), big(m * n, 2.0f);
  CHECK(CompareGemmOutput(big, big_ref, 2.0, 1e-2, m, n).ok);
  big[m * n - 1] = 3.0f;        // last slice, error 25x the tolerance
  big[(m / 2) * n + 7] = 2.1f;  // a middle slice, 2.5x
  v = CompareGemmOutput(big, big_ref, 2.0, 1e-2, m, n);
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.detail, Catch::StartsWith(absl::StrFormat("d[0, %d, 7] = 2.1", m / 2)));
  CHECK(v.max_error == Approx(25.0).epsilon(1e-3));
}

TEST_CASE("the GEMM reference compiles for every input type, layout, epilogue, C and D type", "[tuner][gemm][nvrtc]") {
  absl::StatusOr<const KernelSource*> source = FindKernelSource("gemm/gemm_reference");
  REQUIRE(source.ok());
  std::vector<LaunchRecipe> recipes;
  for (auto [ab, d] : {std::pair{"ktune::bf16", "ktune::bf16"}, std::pair{"ktune::bf16", "float"},
                       std::pair{"ktune::e4m3", "ktune::bf16"}}) {
    for (const char* b_nk : {"true", "false"}) {
      for (int epi = 0; epi <= 3; ++epi) {
        for (const char* has_c : {"true", "false"}) {
          LaunchRecipe r;
          r.template_id = "gemm/gemm_reference";
          r.template_hash = (*source)->hash;
          r.arch = "sm_90";
          r.nvrtc_options = {"--gpu-architecture=sm_90", "-std=c++17"};
          KernelLaunch k;
          k.name_expression = absl::StrFormat("ktune::gemm_reference<%s, %s, %s, %d, %s>", ab, d, b_nk, epi, has_c);
          r.kernels.push_back(k);
          recipes.push_back(r);
        }
      }
    }
  }
  const std::vector<CompileResult> results = CompileAll(&recipes);
  for (size_t i = 0; i < recipes.size(); ++i) {
    INFO(recipes[i].kernels[0].name_expression << "\n" << results[i].log);
    CHECK(results[i].ok);
    CHECK_FALSE(recipes[i].kernels[0].lowered_name.empty());
  }
}

}  // namespace
}  // namespace ktune
