// The mma.sync GEMM space (tuner/gemm/gemm_space.h): what it accepts, how it
// prunes, the recipes it writes, and, with no GPU, the half of its contract
// CI can check: NVRTC compiles every pruned candidate of a representative
// problem set for sm_90 without spills.
#include "tuner/gemm/gemm_space.h"

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/tuner/compile_check.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/gemm_problem.h"

namespace ktune {
namespace {

// issue 5's bench shapes (nn.Linear: B is [N, K]) and odd ones.
std::vector<v1::GemmProblem> RepresentativeProblems() {
  std::vector<v1::GemmProblem> out = {TestGemm(8192, 8192, 8192)};
  for (int64_t m : {1, 16, 128, 2048, 8192}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {14336, 4096}, {4096, 14336}, {6144, 4096}}) {
      out.push_back(TestGemm(m, n, k));
    }
  }
  out.push_back(TestGemm(7, 4100, 520, v1::COL_MAJOR, v1::EPILOGUE_BIAS));
  out.push_back(TestGemm(127, 4097, 4104, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU));
  out.push_back(TestGemm(300, 520, 1000, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU, v1::BF16, v1::BF16, 2));
  out.push_back(TestGemm(1000, 1000, 1000, v1::COL_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, v1::FP32, v1::FP32));
  out.push_back(TestGemm(4096, 4096, 4096, v1::ROW_MAJOR));
  return out;
}

TEST_CASE("every config of the GEMM space runs its problem, and pruning keeps the best few", "[tuner][gemm]") {
  const DeviceInfo device = CompileOnlyTarget();
  for (const v1::GemmProblem& p : RepresentativeProblems()) {
    INFO(GemmCanonicalKey(p));
    const std::vector<GemmTileConfig> pruned = GemmSearchSpace(p, device);
    GemmSpaceOptions all;
    all.pruned = false;
    const std::vector<GemmTileConfig> full = GemmSearchSpace(p, device, all);
    REQUIRE_FALSE(pruned.empty());
    CHECK(pruned.size() <= 16 + 8);  // 16 unsplit, 8 split-K at most
    CHECK(full.size() > pruned.size());
    std::set<std::string> seen;
    for (const GemmTileConfig& c : pruned) {
      INFO(ToString(c));
      CHECK(CanImplementGemm(p, c, device).ok());
      CHECK(seen.insert(ToString(c)).second);
      CHECK(std::find(full.begin(), full.end(), c) != full.end());
    }
    // Ranked by the model: the first is the model's best unsplit config of
    // the whole grid; split-K configs come after every unsplit one, at most
    // half as many, and only where the tiles alone leave SMs idle.
    for (const GemmTileConfig& c : full) {
      if (c.split_k == 1) CHECK(GemmModelTimeUs(p, pruned.front(), device) <= GemmModelTimeUs(p, c, device));
    }
    size_t splits = 0;
    for (size_t i = 0; i < pruned.size(); ++i) {
      if (pruned[i].split_k == 1) {
        CHECK(splits == 0);
        continue;
      }
      ++splits;
      const int64_t tiles = ((p.m() + pruned[i].block_m - 1) / pruned[i].block_m) *
                            ((p.n() + pruned[i].block_n - 1) / pruned[i].block_n) * (p.batch() == 0 ? 1 : p.batch());
      CHECK(tiles < device.sm_count);
    }
    CHECK(splits <= 8);
  }
}

TEST_CASE("split-K is offered where the tiles leave SMs idle, and the model takes it there", "[tuner][gemm]") {
  const DeviceInfo device = CompileOnlyTarget();
  // Decode-like: 16 rows of a 4096 x 14336 weight make 64 tiles of 64 x 64 on
  // 132 SMs; split two or four ways they fill the machine.
  const v1::GemmProblem thin = TestGemm(16, 4096, 14336);
  const std::vector<GemmTileConfig> space = GemmSearchSpace(thin, device);
  auto is_split = [](const GemmTileConfig& c) { return c.split_k > 1; };
  REQUIRE(std::any_of(space.begin(), space.end(), is_split));
  const GemmTileConfig best_split = *std::find_if(space.begin(), space.end(), is_split);
  INFO(ToString(space.front()) << " vs " << ToString(best_split));
  CHECK(GemmModelTimeUs(thin, best_split, device) < GemmModelTimeUs(thin, space.front(), device));
  // 8192^3 has thousands of tiles: no split.
  const std::vector<GemmTileConfig> big = GemmSearchSpace(TestGemm(8192, 8192, 8192), device);
  CHECK(std::none_of(big.begin(), big.end(), is_split));
}

TEST_CASE("the GEMM model takes big tiles for big GEMMs and small ones for thin M", "[tuner][gemm]") {
  const DeviceInfo device = CompileOnlyTarget();
  const GemmTileConfig big = GemmSearchSpace(TestGemm(8192, 8192, 8192), device).front();
  INFO(ToString(big));
  CHECK(big.block_m * big.block_n >= 128 * 128);
  // Decode-like: 16 rows. A 256-row tile would be 94% padding.
  const GemmTileConfig thin = GemmSearchSpace(TestGemm(16, 4096, 4096), device).front();
  INFO(ToString(thin));
  CHECK(thin.block_m == 64);
  // Wave quantisation counts: 132 SMs x 2 CTAs of 128 x 128 tiles run 264 at a
  // time; 8192 x 8192 is 4096 tiles (16 waves, room for 128 more). Two more
  // tile rows (128 tiles) still fit the 16th wave; three do not.
  GemmTileConfig c;
  const double base = GemmModelTimeUs(TestGemm(8192, 8192, 8192), c, device);
  CHECK(GemmModelTimeUs(TestGemm(8192 + 2 * 128, 8192, 8192), c, device) == Approx(base));
  CHECK(GemmModelTimeUs(TestGemm(8192 + 3 * 128, 8192, 8192), c, device) > 1.05 * base);
}

TEST_CASE("CanImplementGemm names what the mma.sync template cannot serve", "[tuner][gemm]") {
  const DeviceInfo device = CompileOnlyTarget();
  const GemmTileConfig c;
  auto message = [&](const v1::GemmProblem& p) {
    const absl::Status s = CanImplementGemm(p, c, device);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    return std::string(s.message());
  };
  v1::GemmProblem fp8 = TestGemm(128, 128, 128);
  fp8.set_a_dtype(v1::FP8_E4M3);
  fp8.set_b_dtype(v1::FP8_E4M3);
  CHECK_THAT(message(fp8), Catch::Contains("bf16"));
  CHECK_THAT(message(TestGemm(128, 128, 4100)), Catch::Contains("K = 4100"));
  CHECK_THAT(message(TestGemm(128, 4100, 128, v1::ROW_MAJOR)), Catch::Contains("N = 4100"));
  CHECK(CanImplementGemm(TestGemm(128, 4100, 128, v1::COL_MAJOR), c, device).ok());
  CHECK_THAT(message(TestGemm(64, 64, 64, v1::COL_MAJOR, v1::EPILOGUE_NONE, v1::DTYPE_UNSPECIFIED, v1::BF16, 65536)),
             Catch::Contains("batch"));
  GemmTileConfig too_big;
  too_big.block_m = 256;
  too_big.block_n = 256;
  CHECK_THAT(std::string(CanImplementGemm(TestGemm(4096, 4096, 4096), too_big, device).message()),
             Catch::Contains("accumulators"));
  GemmTileConfig deep = c;
  deep.stages = 16;  // 16 * (128 + 128) * 32 * 2 = 256 KiB
  CHECK_THAT(std::string(CanImplementGemm(TestGemm(4096, 4096, 4096), deep, device).message()),
             Catch::Contains("shared memory"));
  GemmTileConfig split = c;
  split.split_k = 3;
  CHECK_THAT(std::string(CanImplementGemm(TestGemm(4096, 4096, 4096), split, device).message()),
             Catch::Contains("split_k must be a power of two <= 16"));
  split.split_k = 32;
  CHECK_THAT(std::string(CanImplementGemm(TestGemm(4096, 4096, 4096), split, device).message()),
             Catch::Contains("split_k must be a power of two <= 16"));
  // K = 72 is three steps of 32 (the last partial): a fourth split would have none.
  split.split_k = 4;
  CHECK_THAT(std::string(CanImplementGemm(TestGemm(128, 128, 72), split, device).message()),
             Catch::Contains("split_k = 4 leaves a split without K: K has 3 steps of 32"));
  split.split_k = 2;
  CHECK(CanImplementGemm(TestGemm(128, 128, 72), split, device).ok());
  // 8192^3 in 128 x 128 tiles split two ways would need 4096 x 2 fp32 tiles
  // (512 MiB and the counters) of workspace.
  CHECK_THAT(std::string(CanImplementGemm(TestGemm(8192, 8192, 8192), split, device).message()),
             Catch::Contains("a split-K workspace of 536887296 bytes, over the 268435456 allowed"));
}

TEST_CASE("GemmLaunchRecipe: the template, geometry and parameters", "[tuner][gemm]") {
  const DeviceInfo device = CompileOnlyTarget();
  GemmTileConfig c;  // 128 x 128, 4 warps
  auto r = GemmLaunchRecipe(TestGemm(1000, 520, 64, v1::ROW_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, v1::BF16, v1::BF16, 3), c,
                            device);
  REQUIRE(r.ok());
  CHECK(r->template_id == "gemm/gemm_mma");
  CHECK_FALSE(r->template_hash.empty());
  REQUIRE(r->kernels.size() == 1);
  const KernelLaunch& k = r->kernels[0];
  // A residual add is C with no epilogue of its own; B [K, N].
  CHECK(k.name_expression == "ktune::gemm_mma<ktune::bf16, ktune::bf16, false, 0, true, 128, 128, 32, 2, 2, 4, 8, 1>");
  CHECK(k.grid[0] == 8 * 5);  // ceil(1000 / 128) x ceil(520 / 128) tiles
  CHECK(k.grid[2] == 3);      // batch
  CHECK(k.block[0] == 128);
  CHECK(k.dynamic_smem_bytes == 4 * (128 + 128) * 32 * 2);
  CHECK(k.params == std::vector<std::string>{"a", "b", "c", "d", "bias", "M", "N", "K", "alpha", "beta", "ws"});
  CHECK(k.grid[1] == 1);
  CHECK(r->workspace_bytes == 0);
  CHECK_FALSE(r->workspace_zeroed);
  // Split four ways: the grid's y is the split, and the workspace holds every
  // split's fp32 tile and a counter per tile (8 x 5 tiles, 3 batches).
  GemmTileConfig split = c;
  split.split_k = 4;
  auto s = GemmLaunchRecipe(TestGemm(1000, 520, 256, v1::ROW_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, v1::BF16, v1::BF16, 3),
                            split, device);
  REQUIRE(s.ok());
  CHECK(s->kernels[0].name_expression ==
        "ktune::gemm_mma<ktune::bf16, ktune::bf16, false, 0, true, 128, 128, 32, 2, 2, 4, 8, 4>");
  CHECK(s->kernels[0].grid == std::array<uint32_t, 3>{8 * 5, 4, 3});
  CHECK(s->workspace_bytes == uint64_t{3 * 40} * 4 * 128 * 128 * 4 + 3 * 40 * 4);
  CHECK(s->workspace_zeroed);
  auto gelu = GemmLaunchRecipe(
      TestGemm(64, 64, 64, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU, v1::DTYPE_UNSPECIFIED, v1::FP32), c, device);
  REQUIRE(gelu.ok());
  CHECK(gelu->kernels[0].name_expression ==
        "ktune::gemm_mma<ktune::bf16, float, true, 2, false, 128, 128, 32, 2, 2, 4, 8, 1>");
  CHECK_FALSE(GemmLaunchRecipe(TestGemm(128, 128, 4100), c, device).ok());
}

TEST_CASE("NVRTC compiles every pruned GEMM candidate for sm_90 without spills", "[tuner][gemm][nvrtc][slow]") {
  const DeviceInfo device = CompileOnlyTarget();
  std::vector<LaunchRecipe> recipes =
      DistinctRecipes(RepresentativeProblems(), device, GemmSearchSpace, GemmLaunchRecipe);
  REQUIRE(recipes.size() >= 20);
  // The thin problems leave SMs idle: their split-K candidates are among these.
  CHECK(std::any_of(recipes.begin(), recipes.end(), [](const LaunchRecipe& r) { return r.workspace_bytes > 0; }));
  CheckCompilesWithoutSpills(&recipes, "GEMM");
}

}  // namespace
}  // namespace ktune
