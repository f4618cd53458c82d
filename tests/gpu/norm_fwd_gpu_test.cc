// RMSNorm forward on a real GPU: every candidate of the space is verified
// (TuneNorm does that), the winner's stored recipe relaunches on its own, any
// grid size is correct, and Verify catches kernels that compute the wrong
// function. [perf] (hidden, run with "[perf]") tunes the bench shapes and
// prints a table.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "tests/gpu/gpu_env.h"
#include "tests/gpu/tune_helpers.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_runner.h"
#include "tuner/norm/norm_space.h"
#include "tuner/norm/norm_tuner.h"

namespace ktune {
namespace {

NormProblem Rms(int64_t m, int64_t n, DType in, DType out, bool weight) {
  NormProblem p;
  p.op = NormOp::kRMSNorm;
  p.pass = NormPass::kForward;
  p.m = m;
  p.n = n;
  p.input_dtype = in;
  p.output_dtype = out;
  p.weight_dtype = in;
  p.has_weight = weight;
  return p;
}

using testing::Failures;
using testing::QuickOptions;

// Compiles `recipe` after replacing `from` by `to` in its name expression.
LaunchRecipe Mutated(LaunchRecipe recipe, const std::string& from, const std::string& to) {
  std::string& name = recipe.kernels[0].name_expression;
  const std::string before = name;
  name = absl::StrReplaceAll(name, {{from, to}});
  REQUIRE(name != before);
  recipe.cubin.clear();
  const CompileResult c = Compile(&recipe);
  INFO(c.log);
  REQUIRE(c.ok);
  return recipe;
}

TEST_CASE("TuneNorm: every candidate is correct and the winner relaunches from its recipe", "[gpu]") {
  Device* device = testing::GpuDevice();
  const NormProblem problems[] = {
      Rms(1, 1, DType::kBF16, DType::kBF16, true),
      Rms(1, 3000, DType::kBF16, DType::kBF16, true),
      Rms(7, 3, DType::kFP16, DType::kFP16, true),
      Rms(4096, 4096, DType::kFP32, DType::kFP32, false),
      Rms(3, 262144, DType::kBF16, DType::kBF16, true),
      Rms(20000, 1000, DType::kBF16, DType::kBF16, true),  // pipelined grids loop
      // N == R_BLOCK for many configs, M odd: FULL_TILES only where XBLOCK == 1.
      Rms(1001, 2048, DType::kBF16, DType::kBF16, true),
      Rms(1000, 5120, DType::kBF16, DType::kFP32, true),
      Rms(257, 1000, DType::kFP16, DType::kBF16, false),
  };
  for (const NormProblem& p : problems) {
    DYNAMIC_SECTION(CanonicalKey(p)) {
      int progress_calls = 0;
      absl::StatusOr<TuneResult> r =
          TuneNorm(p, device, QuickOptions(), [&](const TuneProgress&) { ++progress_calls; });
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      INFO(Failures(*r));
      for (const CandidateOutcome& o : r->outcomes) CHECK(o.status == CandidateStatus::kOk);
      CHECK(progress_calls >= r->candidates_generated);
      CHECK(r->timing.median_us > 0);
      CHECK(r->throughput_tbs > 0);
      CHECK(CanImplement(p, r->config, device->info()).ok());
      std::printf("%-60s %3d candidates, winner %-40s %9.2f us %6.3f TB/s, %.1f s\n", CanonicalKey(p).c_str(),
                  r->candidates_generated, ToString(r->config).c_str(), r->timing.median_us, r->throughput_tbs,
                  r->tune_seconds);

      // What a caller gets from the store: the recipe through its wire form.
      const LaunchRecipe stored = RecipeFromProto(RecipeToProto(r->recipe, true));
      REQUIRE(stored.cubin == r->recipe.cubin);
      absl::StatusOr<std::unique_ptr<NormRunner>> fresh = NormRunner::Create(p, device, 7);
      REQUIRE(fresh.ok());
      absl::StatusOr<VerifyResult> v = (*fresh)->Verify(stored);
      REQUIRE(v.ok());
      INFO(v->detail);
      CHECK(v->ok);

      // What a caller gets on a cache miss must be right too.
      absl::StatusOr<LaunchRecipe> heuristic =
          NormLaunchRecipe(p, HeuristicNormConfig(p, device->info()), device->info());
      REQUIRE(heuristic.ok());
      REQUIRE(Compile(&*heuristic).ok);
      absl::StatusOr<VerifyResult> hv = (*fresh)->Verify(*heuristic);
      REQUIRE(hv.ok());
      INFO(hv->detail);
      CHECK(hv->ok);
    }
  }
}

// The template's grid contract (kernel_templates/norm/rmsnorm_fwd.cuh): a
// persistent single-pass CTA (pipeline depth 1) normalizes exactly one row
// block, so any grid of at least the row blocks is correct; every other
// variant walks row blocks in a grid-stride loop, so any grid is.
TEST_CASE("rmsnorm_fwd is correct for every grid its contract allows", "[gpu]") {
  Device* device = testing::GpuDevice();
  const NormProblem p = Rms(1000, 4096, DType::kBF16, DType::kBF16, true);
  absl::StatusOr<std::unique_ptr<NormRunner>> runner = NormRunner::Create(p, device);
  REQUIRE(runner.ok());
  for (const NormConfig& c : NormSearchSpace(p, device->info())) {
    absl::StatusOr<LaunchRecipe> recipe = NormLaunchRecipe(p, c, device->info());
    REQUIRE(recipe.ok());
    REQUIRE(Compile(&*recipe).ok);
    const uint32_t row_blocks = static_cast<uint32_t>((p.m + c.x_block - 1) / c.x_block);
    const bool one_row_block_per_cta = c.persistent && c.pipeline_depth == 1;
    if (one_row_block_per_cta) CHECK(recipe->kernels[0].grid[0] == row_blocks);
    const std::vector<uint32_t> grids =
        one_row_block_per_cta ? std::vector<uint32_t>{row_blocks, 100000u} : std::vector<uint32_t>{1u, 7u, 100000u};
    for (uint32_t grid : grids) {
      recipe->kernels[0].grid = {grid, 1, 1};
      absl::StatusOr<VerifyResult> v = (*runner)->Verify(*recipe);
      INFO(ToString(c) << " grid " << grid);
      REQUIRE(v.ok());
      INFO(v->detail);
      CHECK(v->ok);
    }
  }
}

TEST_CASE("Verify rejects kernels that compute the wrong function", "[gpu]") {
  Device* device = testing::GpuDevice();
  const NormProblem p = Rms(513, 4096, DType::kBF16, DType::kBF16, true);
  absl::StatusOr<LaunchRecipe> good = NormLaunchRecipe(p, HeuristicNormConfig(p, device->info()), device->info());
  REQUIRE(good.ok());
  REQUIRE(Compile(&*good).ok);
  absl::StatusOr<std::unique_ptr<NormRunner>> runner = NormRunner::Create(p, device);
  REQUIRE(runner.ok());
  {
    absl::StatusOr<VerifyResult> v = (*runner)->Verify(*good);
    REQUIRE(v.ok());
    CHECK(v->ok);
  }
  SECTION("a kernel that skips the weight") {
    const LaunchRecipe bad = Mutated(*good, "ktune::bf16, ktune::bf16, true,", "ktune::bf16, ktune::bf16, false,");
    absl::StatusOr<VerifyResult> v = (*runner)->Verify(bad);
    REQUIRE(v.ok());
    INFO(v->detail);
    CHECK_FALSE(v->ok);
    CHECK(v->detail.find("y[") != std::string::npos);
  }
  SECTION("a kernel writing another output type") {
    const LaunchRecipe bad = Mutated(*good, "ktune::bf16, ktune::bf16,", "ktune::bf16, ktune::fp16,");
    absl::StatusOr<VerifyResult> v = (*runner)->Verify(bad);
    REQUIRE(v.ok());
    INFO(v->detail);
    CHECK_FALSE(v->ok);
  }
  SECTION("a kernel called with M and N swapped") {
    // VEC 1, so the swapped call (4096 rows of 513) stays inside the buffers.
    NormConfig c;
    c.num_warps = 4;
    c.x_block = 1;
    c.vec = 1;
    c.r_block = 128;
    c.persistent = false;
    c.pipeline_depth = 1;
    REQUIRE(CanImplement(p, c, device->info()).ok());
    absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, device->info());
    REQUIRE(r.ok());
    REQUIRE(Compile(&*r).ok);
    // The recipe's own scalars swapped: the launcher passes what the recipe says.
    v1::KernelArg* m = nullptr;
    v1::KernelArg* n = nullptr;
    for (v1::KernelArg& a : r->kernels[0].args) {
      if (a.name() == "M") m = &a;
      if (a.name() == "N") n = &a;
    }
    REQUIRE((m != nullptr && n != nullptr));
    const int32_t rows = m->i32();
    m->set_i32(n->i32());
    n->set_i32(rows);
    absl::StatusOr<VerifyResult> v = (*runner)->Verify(*r);
    REQUIRE(v.ok());
    INFO(v->detail);
    CHECK_FALSE(v->ok);
  }
}

TEST_CASE("perf: tune the RMSNorm forward bench shapes", "[gpu][perf-fwd][.]") {
  Device* device = testing::GpuDevice();
  constexpr double kCopyTbs = 4.27;  // H200 device copy, bytes read + written
  struct Shape {
    int64_t m, n;
    double peer_tbs;
  };
  const Shape shapes[] = {{32768, 1024, 2.80}, {32768, 4096, 4.02}, {16384, 8192, 4.13},
                          {8192, 16384, 4.02}, {65536, 2048, 3.83}, {4096, 4096, 2.49}};
  std::string table = absl::StrFormat("%-14s %-42s %9s %8s %7s %7s %5s %6s\n", "shape", "winner", "us", "TB/s", "%copy",
                                      "peer", "cand", "tune_s");
  std::string detail;
  for (const Shape& s : shapes) {
    const NormProblem p = Rms(s.m, s.n, DType::kBF16, DType::kBF16, true);
    absl::StatusOr<TuneResult> r = TuneNorm(p, device, TuneOptions());
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    INFO(Failures(*r));
    for (const CandidateOutcome& o : r->outcomes) CHECK(o.status == CandidateStatus::kOk);
    table += absl::StrFormat("%-14s %-42s %9.2f %8.3f %6.1f%% %7.2f %5d %6.1f\n", absl::StrFormat("%dx%d", s.m, s.n),
                             ToString(r->config), r->timing.median_us, r->throughput_tbs,
                             100 * r->throughput_tbs / kCopyTbs, s.peer_tbs, r->candidates_generated, r->tune_seconds);
    std::vector<const CandidateOutcome*> sorted;
    for (const CandidateOutcome& o : r->outcomes) sorted.push_back(&o);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](auto* a, auto* b) { return a->timing.median_us < b->timing.median_us; });
    detail += absl::StrFormat("== %dx%d bf16\n", s.m, s.n);
    for (const CandidateOutcome* o : sorted) {
      const double tbs = static_cast<double>(MinimumBytes(p)) / (o->timing.median_us * 1e-6) / 1e12;
      detail += absl::StrFormat("  %-42s %9.2f us %6.3f TB/s spread %5.1f%%\n", ToString(o->config),
                                o->timing.median_us, tbs, 100 * o->timing.spread);
    }
  }
  if (const char* out = std::getenv("KTUNE_PERF_OUT")) {
    std::ofstream(out) << detail << "\n" << table;
  }
  std::printf("%s\n%s", detail.c_str(), table.c_str());
}

}  // namespace
}  // namespace ktune
