// The Hopper GEMM space (tuner/gemm/gemm_wgmma_space.h): what it accepts and
// refuses, how it prunes, its recipes and TMA parameters, and, with no GPU,
// the half of its contract CI can check: NVRTC compiles every pruned
// candidate of issue 5's bench problems for sm_90a without spills.
#include "tuner/gemm/gemm_wgmma_space.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/tuner/compile_check.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_wire.h"

namespace ktune {
namespace {

// CanImplementWgmma refuses (problem, config) on `device`, naming `why`.
void CheckRefused(const v1::GemmProblem& problem, const WgmmaTileConfig& config, const DeviceInfo& device,
                  const std::string& why) {
  const absl::Status s = CanImplementWgmma(problem, config, device);
  INFO(s.ToString());
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(s.message()), Catch::Contains(why));
}

TEST_CASE("the wgmma space serves bf16 and fp8 [N, K] and bf16 [K, N] GEMMs on sm_90 only, and says why not",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  const WgmmaTileConfig c;  // 128 x 256, two consumers, 4 stages
  CHECK(CanImplementWgmma(LinearGemm(8192, 8192, 8192), c, h200).ok());
  CHECK(CanImplementWgmma(LinearGemm(1, 4100, 520, v1::EPILOGUE_BIAS_GELU), c, h200).ok());
  CHECK(CanImplementWgmma(Fp8Gemm(8192, 8192, 4096), c, h200).ok());
  CHECK(CanImplementWgmma(Fp8Gemm(127, 264, 1040, v1::EPILOGUE_BIAS_SILU), c, h200).ok());
  CHECK(CanImplementWgmma(LinearGemm(64, 64, 1000), c, h200).ok());  // 2000-byte rows

  DeviceInfo ampere = h200;
  ampere.cc_major = 8;
  CheckRefused(LinearGemm(4096, 4096, 4096), c, ampere, "needs sm_90");
  DeviceInfo blackwell = h200;
  blackwell.cc_major = 10;
  CheckRefused(LinearGemm(4096, 4096, 4096), c, blackwell, "needs sm_90");
  // B as [K, N]: bf16 (read N-major), N a multiple of 8, whole 64-column
  // blocks per CTA.
  CHECK(CanImplementWgmma(TestGemm(4096, 4096, 4096, v1::ROW_MAJOR), c, h200).ok());
  CHECK(CanImplementWgmma(TestGemm(127, 264, 1000, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU), c, h200).ok());
  CheckRefused(TestGemm(64, 100, 64, v1::ROW_MAJOR), c, h200, "N = 100 is not a multiple of 8");
  v1::GemmProblem fp8_kn = Fp8Gemm(4096, 4096, 4096);
  fp8_kn.set_b_layout(v1::ROW_MAJOR);
  CheckRefused(fp8_kn, c, h200, "fp8 needs B as [N, K]");
  WgmmaTileConfig narrow_pair = c;
  narrow_pair.block_n = 64;
  narrow_pair.cluster_m = 2;  // each CTA would load 32 columns
  CHECK(CanImplementWgmma(LinearGemm(4096, 4096, 4096), narrow_pair, h200).ok());
  CheckRefused(TestGemm(4096, 4096, 4096, v1::ROW_MAJOR), narrow_pair, h200, "blocks of 64 columns, not 32");
  CheckRefused(LinearGemm(64, 64, 100), c, h200, "K = 100 is not a multiple of 8");
  CheckRefused(Fp8Gemm(64, 64, 1000), c, h200, "K = 1000 is not a multiple of 16");  // 1000-byte rows
  WgmmaTileConfig wide = c;
  wide.block_m = 256;  // 128 rows x 256 columns per consumer: 256 accumulators
  CheckRefused(LinearGemm(4096, 4096, 4096), wide, h200, "accumulators");
  WgmmaTileConfig deep = c;
  deep.stages = 6;  // 6 x 48 KiB
  CheckRefused(LinearGemm(4096, 4096, 4096), deep, h200, "shared memory");
  WgmmaTileConfig lone = c;
  lone.consumers = 1;
  lone.pingpong = true;
  CheckRefused(LinearGemm(4096, 4096, 4096), lone, h200, "ping-pong takes two consumers");
  WgmmaTileConfig big_turns = c;  // ping-pong: each consumer holds the whole 128 x 256 tile
  big_turns.pingpong = true;
  CheckRefused(LinearGemm(4096, 4096, 4096), big_turns, h200, "256 accumulators");
  WgmmaTileConfig trio = c;
  trio.cluster_m = 3;
  CheckRefused(LinearGemm(4096, 4096, 4096), trio, h200, "cluster_m");
  WgmmaTileConfig odd = c;
  odd.block_n = 96;
  CheckRefused(LinearGemm(4096, 4096, 4096), odd, h200, "block_n");
}

TEST_CASE("the wgmma model prefers big tiles for big GEMMs and fewer idle SMs for small ones", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  const std::vector<WgmmaTileConfig> big = WgmmaSearchSpace(LinearGemm(8192, 8192, 8192), h200);
  REQUIRE(!big.empty());
  // The pruned 16; raster groups 4 and 16 and a kr2 variant of the best two;
  // a tail split of the best four.
  CHECK(big.size() <= 16 + 2 * 3 + 4);
  CHECK(big[0].block_m * big[0].block_n >= 128 * 256);
  CHECK(big[0].consumers == 2);
  // 128 x 4096: 16 tiles of 128 x 256 leave 116 SMs idle; 64 of 128 x 64 do not.
  const std::vector<WgmmaTileConfig> thin = WgmmaSearchSpace(LinearGemm(128, 4096, 4096), h200);
  REQUIRE(!thin.empty());
  CHECK(thin[0].block_n <= 128);
  // The unpruned space is every config the template accepts, pruned a subset.
  const std::vector<WgmmaTileConfig> all = WgmmaSearchSpace(LinearGemm(8192, 8192, 8192), h200, {false, 0, 0});
  CHECK(all.size() > big.size());
  for (const WgmmaTileConfig& c : big) CHECK(std::find(all.begin(), all.end(), c) != all.end());
}

TEST_CASE("small tiles at small M get the deepest ring shared memory holds, and the model ranks it ahead",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  const v1::GemmProblem thin = Fp8Gemm(128, 4096, 4096);
  WgmmaTileConfig small;  // 64 x 64, one consumer: 16 KiB a stage
  small.block_m = 64;
  small.block_n = 64;
  small.consumers = 1;
  WgmmaTileConfig deepest = small;
  deepest.stages = 13;  // 13 x 16 KiB and the rest within the H200's 227 KiB
  CHECK(CanImplementWgmma(thin, deepest, h200).ok());
  WgmmaTileConfig past = small;
  past.stages = 14;
  CheckRefused(thin, past, h200, "bytes of shared memory");
  WgmmaTileConfig too_many = small;
  too_many.stages = 17;
  CheckRefused(thin, too_many, h200, "stages must be 2 to 16");

  // The unpruned space holds the deepest ring of each tile, and none past it.
  const std::vector<WgmmaTileConfig> all = WgmmaSearchSpace(thin, h200, {false, 0, 0});
  CHECK(std::find(all.begin(), all.end(), deepest) != all.end());
  for (const WgmmaTileConfig& c : all) CHECK(WgmmaSharedMemoryBytes(c) <= h200.max_smem_per_block_optin);

  // At M = 128 the 64 x 64 tile streams its operands: more stages in flight,
  // less time (13 > 6 > 4), and the pruned space keeps the deepest first.
  WgmmaTileConfig six = small;
  six.stages = 6;
  WgmmaTileConfig four = small;
  four.stages = 4;
  CHECK(WgmmaModelTimeUs(thin, deepest, h200) < WgmmaModelTimeUs(thin, six, h200));
  CHECK(WgmmaModelTimeUs(thin, six, h200) < WgmmaModelTimeUs(thin, four, h200));
  const std::vector<WgmmaTileConfig> pruned = WgmmaSearchSpace(thin, h200);
  REQUIRE(!pruned.empty());
  CHECK(pruned[0].stages > 6);
  // At 8192^3 a tile's compute hides its loads: five and six stages rank alike.
  const v1::GemmProblem big = LinearGemm(8192, 8192, 8192);
  WgmmaTileConfig five = WgmmaTileConfig{};
  five.block_n = 128;
  five.stages = 5;
  WgmmaTileConfig six_big = five;
  six_big.stages = 6;
  CHECK(WgmmaModelTimeUs(big, five, h200) == WgmmaModelTimeUs(big, six_big, h200));
}

TEST_CASE("problems of a few rows get swapped tiles: the weight's rows by the narrowest wgmma N that holds M",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  auto swapped_of = [&](const v1::GemmProblem& p, const GemmSpaceOptions& options) {
    std::vector<WgmmaTileConfig> swapped;
    for (const WgmmaTileConfig& c : WgmmaSearchSpace(p, h200, options)) {
      if (c.swap_ab) swapped.push_back(c);
    }
    return swapped;
  };
  const GemmSpaceOptions pruned;
  for (auto [m, width] : {std::pair<int64_t, int>{1, 8}, {7, 8}, {9, 16}, {16, 16}, {17, 32}, {32, 32}}) {
    INFO("M = " << m);
    for (const v1::GemmProblem& p : {LinearGemm(m, 4096, 4096), Fp8Gemm(m, 4096, 14336)}) {
      const std::vector<WgmmaTileConfig> all = swapped_of(p, {false, 0, 0});
      const std::vector<WgmmaTileConfig> kept = swapped_of(p, pruned);
      REQUIRE(!kept.empty());
      // Pruned among themselves (by idle SMs: the model ties the rest).
      CHECK(static_cast<int>(kept.size()) <= pruned.max_candidates * 3 / 2);
      CHECK(all.size() >= kept.size());
      // Both tiles, 128 or 256 bytes of K per stage, alone (promoted at fp8
      // K = 14336) or split 2 or 4 (fp8 K = 14336: 4 only, each split's
      // span within one fp8 accumulator).
      for (int bm : {64, 128}) {
        for (int k_rows : {1, 2}) {
          for (int split_k : {1, 2, 4}) {
            if (GemmIsFp8(p) && split_k == 2) continue;
            INFO("bm" << bm << " kr" << k_rows << " k" << split_k);
            CHECK(std::any_of(all.begin(), all.end(), [&](const WgmmaTileConfig& c) {
              return c.block_m == bm && c.consumers == 1 && c.k_rows == k_rows && c.split_k == split_k;
            }));
          }
        }
      }
      for (const WgmmaTileConfig& c : all) {
        INFO(ToString(c));
        CHECK(c.block_n == width);
        CHECK(CanImplementWgmma(p, c, h200).ok());
      }
    }
  }
  for (int64_t m : {33, 128, 8192}) CHECK(swapped_of(LinearGemm(m, 4096, 4096), {false, 0, 0}).empty());
  // The pruned spaces keep the fastest swapped configs of the H200's tunes in
  // bench/results/2026-11-30-gemm-swapped-tiles-7a81ab9.md, "Swapped tiles" (fp8 and bf16 alike).
  auto kept_names = [&](const v1::GemmProblem& p) {
    std::vector<std::string> names;
    for (const WgmmaTileConfig& c : swapped_of(p, pruned)) names.push_back(ToString(c));
    return names;
  };
  CHECK_THAT(kept_names(Fp8Gemm(16, 6144, 4096)), Catch::VectorContains(std::string("bm64 bn16 c1 s8 g8 kr2 swap")));
  CHECK_THAT(kept_names(Fp8Gemm(16, 14336, 4096)), Catch::VectorContains(std::string("bm128 bn16 c1 s6 g8 swap")));
  CHECK_THAT(kept_names(Fp8Gemm(16, 4096, 14336)),
             Catch::VectorContains(std::string("bm128 bn16 c1 s6 g8 kr2 k4 swap")));
  CHECK_THAT(kept_names(LinearGemm(16, 4096, 14336)),
             Catch::VectorContains(std::string("bm64 bn16 c1 s8 g8 kr2 k2 swap")));
  CHECK_THAT(kept_names(LinearGemm(1, 14336, 4096)), Catch::VectorContains(std::string("bm128 bn8 c1 s6 g8 swap")));

  // The recipe trades the operands: B's rows are the kernel's M.
  WgmmaTileConfig c;
  c.block_m = 64;
  c.block_n = 16;
  c.consumers = 1;
  c.stages = 16;
  c.split_k = 2;
  c.swap_ab = true;
  const v1::GemmProblem decode = Fp8Gemm(16, 4096, 4096);
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(decode, c, h200);
  REQUIRE(r.ok());
  const KernelLaunch& k = r->kernels[0];
  CHECK(k.name_expression ==
        "ktune::gemm_wgmma<ktune::e4m3, ktune::bf16, 0, false, 64, 16, 1, false, 1, 16, 8, 2, 1, 0, false, true, 1>");
  CHECK(k.params == std::vector<std::string>{"tma_b:128x64", "tma_a:128x16", "c", "d", "bias", "N", "M", "K", "alpha",
                                             "beta", "ws", "a_scale", "b_scale"});
  CHECK(k.grid[0] == 128);  // 4096 / 64 tiles of B's rows, two splits each
  CHECK(k.block[0] == 256);
  // The split-K workspace counts the swapped tiles: 64 of 64 x 16, two splits.
  CHECK(r->workspace_bytes == 64 * 2 * 64 * 16 * 4 + 64 * 4);
  CHECK(ToString(c) == "bm64 bn16 c1 s16 g8 k2 swap");
  // The tensors the first two parameters name: B in boxes of 64 rows, A of 16.
  absl::StatusOr<TmaTensor> ta = GemmTmaTensor(decode, k.params[0], 0x1000, 0x2000);
  absl::StatusOr<TmaTensor> tb = GemmTmaTensor(decode, k.params[1], 0x1000, 0x2000);
  REQUIRE((ta.ok() && tb.ok()));
  CHECK((ta->base == 0x2000 && ta->rows == 4096 && ta->box_rows == 64));
  CHECK((tb->base == 0x1000 && tb->rows == 16 && tb->box_rows == 16));

  // What swapping refuses, and the narrow tiles without it.
  WgmmaTileConfig wide = c;
  wide.block_n = 64;
  CheckRefused(decode, wide, h200, "swapped tiles are 8, 16 or 32 columns");
  WgmmaTileConfig unswapped = c;
  unswapped.swap_ab = false;
  CheckRefused(decode, unswapped, h200, "block_n 16 is for swapped tiles only");
  WgmmaTileConfig pair = c;
  pair.split_k = 1;
  pair.cluster_m = 2;
  CheckRefused(decode, pair, h200, "no cluster, no ping-pong");
  WgmmaTileConfig turns = c;
  turns.block_m = 128;
  turns.consumers = 2;
  turns.pingpong = true;
  CheckRefused(decode, turns, h200, "no cluster, no ping-pong");
  CheckRefused(TestGemm(16, 4096, 4096, v1::ROW_MAJOR), c, h200, "swapped tiles need B as [N, K]");

  // A stored swapped config comes back from the wire as it was.
  absl::StatusOr<WgmmaTileConfig> back = WgmmaTileConfigFromProto(WgmmaTileConfigToProto(c));
  REQUIRE(back.ok());
  CHECK(*back == c);
}

TEST_CASE("raster groups 4 and 16 are tried on the model's best two configs where tile rows can be grouped",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  auto count_group = [](const std::vector<WgmmaTileConfig>& space, int group_m) {
    return std::count_if(space.begin(), space.end(), [&](const WgmmaTileConfig& c) { return c.group_m == group_m; });
  };
  // 8192 x 8192: 32 to 128 tile rows. The variants copy the best two.
  const std::vector<WgmmaTileConfig> big = WgmmaSearchSpace(LinearGemm(8192, 8192, 8192), h200);
  REQUIRE(big.size() > 4);
  CHECK(count_group(big, 4) == 2);
  CHECK(count_group(big, 16) == 2);
  for (int group_m : {4, 16}) {
    for (size_t i = 0; i < 2; ++i) {
      WgmmaTileConfig variant = big[i];
      REQUIRE(variant.group_m == 8);
      variant.group_m = group_m;
      CHECK(std::find(big.begin(), big.end(), variant) != big.end());
    }
  }
  // 128 rows make one or two tile rows: every order is the same, nothing is added.
  for (const WgmmaTileConfig& c : WgmmaSearchSpace(LinearGemm(128, 4096, 4096), h200)) CHECK(c.group_m == 8);
  // The group is a template argument and travels in the name.
  WgmmaTileConfig c = big[0];
  c.group_m = 16;
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(LinearGemm(8192, 8192, 8192), c, h200);
  REQUIRE(r.ok());
  CHECK_THAT(r->kernels[0].name_expression, Catch::EndsWith(", 16, 1, 1, 0, false, false, 1>"));
  CHECK_THAT(ToString(c), Catch::Contains(" g16"));
}

TEST_CASE("two slices of K per stage are tried on the model's best two configs, in the same shared memory",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  for (const v1::GemmProblem& p : {LinearGemm(8192, 8192, 8192), LinearGemm(128, 4096, 4096)}) {
    INFO(GemmCanonicalKey(p));
    const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(p, h200);
    REQUIRE(space.size() > 2);
    int deep = 0;
    for (const WgmmaTileConfig& c : space) {
      if (c.k_rows == 1) continue;
      ++deep;
      // A copy of one of the best two, with half its stages: the same ring.
      WgmmaTileConfig source = c;
      source.k_rows = 1;
      source.stages = space[0].stages;
      const bool of_first = source == space[0];
      source.stages = space[1].stages;
      CHECK((of_first || source == space[1]));
      CHECK(c.stages * 2 <= (of_first ? space[0] : space[1]).stages);
      CHECK(WgmmaSharedMemoryBytes(c) <= WgmmaSharedMemoryBytes(of_first ? space[0] : space[1]));
    }
    // One each, unless the two halve to the same config (4 and 5 stages both
    // halve to 2), which is tried once.
    auto halved = [](WgmmaTileConfig t) {
      t.k_rows = 2;
      t.stages /= 2;
      return t;
    };
    CHECK(deep == (halved(space[0]) == halved(space[1]) ? 1 : 2));
  }
  WgmmaTileConfig c;  // 128 x 256, two consumers
  c.k_rows = 2;
  c.stages = 2;
  CHECK(ToString(c) == "bm128 bn256 c2 s2 g8 kr2");
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(LinearGemm(4096, 4096, 4096), c, h200);
  REQUIRE(r.ok());
  CHECK_THAT(r->kernels[0].name_expression, Catch::EndsWith(", 2, 8, 1, 2, 0, false, false, 1>"));
  CHECK(r->kernels[0].dynamic_smem_bytes == WgmmaSharedMemoryBytes(c));
  // TMA boxes stay one 128-byte slice: two copies per operand and stage.
  CHECK(r->kernels[0].params[0] == "tma_a:64x128");
  // K's steps are now 128 wide: a split must divide ceil(K / 128).
  c.split_k = 2;
  CHECK_THAT(std::string(CanImplementWgmma(LinearGemm(128, 4096, 4096 + 128), c, h200).message()),
             Catch::Contains("does not divide K's 33 steps of 128"));
  c.split_k = 1;
  c.k_rows = 3;
  CHECK_THAT(std::string(CanImplementWgmma(LinearGemm(128, 4096, 4096), c, h200).message()),
             Catch::Contains("k_rows (128-byte slices of K per stage) must be 1 or 2"));
}

TEST_CASE("no wgmma space holds a config twice, pruned or not", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  GemmSpaceOptions all;
  all.pruned = false;
  for (const v1::GemmProblem& p :
       {LinearGemm(8192, 8192, 8192), LinearGemm(128, 4096, 4096), LinearGemm(128, 4096, 14336),
        Fp8Gemm(8192, 8192, 8192), Fp8Gemm(256, 264, 8320), Fp8Gemm(2048, 4096, 4096)}) {
    for (const GemmSpaceOptions& options : {GemmSpaceOptions(), all}) {
      INFO(GemmCanonicalKey(p) << (options.pruned ? "" : ", unpruned"));
      const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(p, h200, options);
      REQUIRE_FALSE(space.empty());
      std::set<std::string> seen;
      for (const WgmmaTileConfig& c : space) {
        INFO(ToString(c));
        CHECK(seen.insert(ToString(c)).second);
      }
    }
  }
}

// The space and the recipe agree: every config the space offers, pruned or
// not, is one WgmmaLaunchRecipe builds (the GPU sweep REQUIREs it config by
// config). The problems are the GPU sweep's, both layouts of B.
TEST_CASE("every config of the wgmma space has a recipe, B as [N, K] or [K, N]", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  GemmSpaceOptions all;
  all.pruned = false;
  int configs = 0;
  for (v1::Layout b : {v1::COL_MAJOR, v1::ROW_MAJOR}) {
    for (const v1::GemmProblem& p :
         {TestGemm(256, 384, 512, b), TestGemm(127, 264, 1000, b, v1::EPILOGUE_BIAS_SILU, v1::BF16),
          TestGemm(129, 136, 72, b, v1::EPILOGUE_RESIDUAL_ADD, v1::BF16, v1::BF16, 3), TestGemm(2304, 2336, 136, b),
          TestGemm(300, 200, 200, b, v1::EPILOGUE_BIAS, v1::DTYPE_UNSPECIFIED, v1::BF16, 2),
          TestGemm(8192, 8192, 8192, b), TestGemm(2048, 6144, 4096, b)}) {
      for (const GemmSpaceOptions& options : {GemmSpaceOptions(), all}) {
        for (const WgmmaTileConfig& c : WgmmaSearchSpace(p, h200, options)) {
          INFO(GemmCanonicalKey(p) << " " << ToString(c) << (options.pruned ? "" : ", unpruned"));
          const absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(p, c, h200);
          INFO(r.status().ToString());
          CHECK(r.ok());
          ++configs;
        }
      }
    }
  }
  CHECK(configs > 100);
}

TEST_CASE("WgmmaLaunchRecipe: sm_90a, a persistent grid and TMA parameters", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  WgmmaTileConfig c;
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(LinearGemm(8192, 8192, 8192), c, h200);
  REQUIRE(r.ok());
  CHECK(r->template_id == "gemm/gemm_wgmma");
  CHECK(r->arch == "sm_90a");
  REQUIRE(r->kernels.size() == 1);
  const KernelLaunch& k = r->kernels[0];
  CHECK(k.name_expression ==
        "ktune::gemm_wgmma<ktune::bf16, ktune::bf16, 0, false, 128, 256, 2, false, 1, 4, 8, 1, 1, 0, false, false, 1>");
  CHECK(k.grid == std::array<uint32_t, 3>{132, 1, 1});  // 2048 tiles, one CTA per SM
  CHECK(k.block == std::array<uint32_t, 3>{384, 1, 1});
  CHECK(k.dynamic_smem_bytes == 4 * (128 + 256) * 128 + 1024 + 96 + 2 * 4 * 16 * 144);
  CHECK(k.params == std::vector<std::string>{"tma_a:64x128", "tma_b:64x256", "c", "d", "bias", "M", "N", "K", "alpha",
                                             "beta", "ws", "a_scale", "b_scale"});
  CHECK(r->workspace_bytes == 0);  // no split-K: ws is null
  CHECK_FALSE(r->workspace_zeroed);
  // Fewer tiles than SMs: one CTA per tile; a batch shares the SMs out.
  r = WgmmaLaunchRecipe(LinearGemm(128, 512, 4096, v1::EPILOGUE_BIAS, v1::FP32, v1::FP32, 4), c, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{2, 1, 4});
  CHECK(r->kernels[0].name_expression ==
        "ktune::gemm_wgmma<ktune::bf16, float, 1, true, 128, 256, 2, false, 1, 4, 8, 1, 1, 0, false, false, 1>");
  CHECK_FALSE(WgmmaLaunchRecipe(LinearGemm(64, 64, 100), c, h200).ok());
  // B as [K, N]: the template's B_KN, and B's box is 64 columns by 64 rows of K.
  r = WgmmaLaunchRecipe(TestGemm(8192, 8192, 8192, v1::ROW_MAJOR), c, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression ==
        "ktune::gemm_wgmma<ktune::bf16, ktune::bf16, 0, false, 128, 256, 2, false, 1, 4, 8, 1, 1, 0, true, false, 1>");
  CHECK(r->kernels[0].params[0] == "tma_a:64x128");
  CHECK(r->kernels[0].params[1] == "tma_b:64x64");
  // The same ring, its B stages laid out in column blocks.
  CHECK(r->kernels[0].dynamic_smem_bytes == 4 * (128 + 256) * 128 + 1024 + 96 + 2 * 4 * 16 * 144);
  // A 2x1 cluster: an even grid of CTA pairs, each fetching half of B's tile.
  WgmmaTileConfig pair = c;
  pair.cluster_m = 2;
  r = WgmmaLaunchRecipe(LinearGemm(8192, 8192, 8192), pair, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression ==
        "ktune::gemm_wgmma<ktune::bf16, ktune::bf16, 0, false, 128, 256, 2, false, 2, 4, 8, 1, 1, 0, false, false, 1>");
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{132, 1, 1});
  CHECK(r->kernels[0].params[1] == "tma_b:64x128");
  r = WgmmaLaunchRecipe(LinearGemm(100, 512, 4096), pair, h200);  // one unit of two tile rows, 2 columns
  REQUIRE(r.ok());
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{4, 1, 1});
}

TEST_CASE("WgmmaLaunchRecipe for fp8: e4m3 operands, 128-wide K steps in the same 128-byte rows, the scales",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  WgmmaTileConfig c;
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(Fp8Gemm(8192, 8192, 4096, v1::EPILOGUE_BIAS), c, h200);
  REQUIRE(r.ok());
  const KernelLaunch& k = r->kernels[0];
  CHECK(k.name_expression ==
        "ktune::gemm_wgmma<ktune::e4m3, ktune::bf16, 1, false, 128, 256, 2, false, 1, 4, 8, 1, 1, 0, false, false, 1>");
  // The ring holds as many bytes as bf16's: twice the K per stage.
  CHECK(k.dynamic_smem_bytes == 4 * (128 + 256) * 128 + 1024 + 96 + 2 * 4 * 16 * 144);
  CHECK(k.params == std::vector<std::string>{"tma_a:128x128", "tma_b:128x256", "c", "d", "bias", "M", "N", "K", "alpha",
                                             "beta", "ws", "a_scale", "b_scale"});
  // Split-K counts K in steps of 128: 4096 is 32 of them.
  WgmmaTileConfig split = c;
  split.block_n = 128;
  split.split_k = 16;
  CHECK(CanImplementWgmma(Fp8Gemm(128, 4096, 4096), split, h200).ok());
  CheckRefused(Fp8Gemm(128, 4096, 4160), split, h200, "does not divide K's 33 steps of 128");
  // One accumulator spans at most 4096 of fp8's K (its adds keep about 14
  // bits): 8192 whole is refused, split two ways it is served.
  CheckRefused(Fp8Gemm(8192, 8192, 8192), c, h200, "fp8 accumulates 8192 of K in one accumulator");
  CheckRefused(Fp8Gemm(128, 4096, 4224), c, h200, "fp8 accumulates 4224 of K");  // 33 steps of 128
  WgmmaTileConfig halves = c;
  halves.split_k = 2;
  CHECK(CanImplementWgmma(Fp8Gemm(128, 4096, 8192), halves, h200).ok());
  CheckRefused(Fp8Gemm(128, 4096, 14336), halves, h200, "fp8 accumulates 7168 of K");
  CHECK(CanImplementWgmma(LinearGemm(8192, 8192, 14336), c, h200).ok());  // bf16 accumulates in full fp32
  // The model counts fp8's double tensor-core rate and half the operand bytes.
  CHECK(WgmmaModelTimeUs(Fp8Gemm(8192, 8192, 8192), c, h200) <
        0.6 * WgmmaModelTimeUs(LinearGemm(8192, 8192, 8192), c, h200));
  CHECK_FALSE(WgmmaSearchSpace(Fp8Gemm(2048, 4096, 4096), h200, GemmSpaceOptions()).empty());
}

TEST_CASE("fp8 promotion: a second accumulator every few steps of K, where one split would span more",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  const v1::GemmProblem cube = Fp8Gemm(8192, 8192, 8192);
  WgmmaTileConfig c;  // 128 x 256, two consumers: 128 accumulators per thread
  c.promote = true;
  CheckRefused(cube, c, h200, "128 accumulators per thread, twice that with promotion; at most 96");
  WgmmaTileConfig wide = c;  // 64 x 192 per consumer: 96 accumulators, 192 with the second set
  wide.block_n = 192;
  REQUIRE(CanImplementWgmma(cube, wide, h200).ok());
  absl::StatusOr<LaunchRecipe> wide_recipe = WgmmaLaunchRecipe(cube, wide, h200);
  REQUIRE(wide_recipe.ok());
  CHECK(wide_recipe->kernels[0].name_expression ==
        "ktune::gemm_wgmma<ktune::e4m3, ktune::bf16, 0, false, 128, 192, 2, false, 1, 4, 8, 1, 1, 8, false, false, 1>");
  // 192 columns only promoted: unmeasured elsewhere, and bf16 has 256.
  WgmmaTileConfig wide_plain = wide;
  wide_plain.promote = false;
  CheckRefused(Fp8Gemm(2048, 4096, 4096), wide_plain, h200, "block_n 192 is for promoted fp8 tiles only");
  CheckRefused(LinearGemm(8192, 8192, 8192), wide_plain, h200, "block_n 192 is for promoted fp8 tiles only");
  WgmmaTileConfig wide_one = wide;  // one consumer: 128 x 192, 192 accumulators
  wide_one.consumers = 1;
  CheckRefused(cube, wide_one, h200, "192 accumulators per thread");
  c.block_n = 128;  // 64 accumulators: 128 with the second set
  REQUIRE(CanImplementWgmma(cube, c, h200).ok());
  CHECK(ToString(c) == "bm128 bn128 c2 s4 g8 pr");
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(cube, c, h200);
  REQUIRE(r.ok());
  // PROMOTE_STEPS: 8 steps of 128 fp8 elements (1024 of K, K * span = 2^23) per span.
  CHECK(r->kernels[0].name_expression ==
        "ktune::gemm_wgmma<ktune::e4m3, ktune::bf16, 0, false, 128, 128, 2, false, 1, 4, 8, 1, 1, 8, false, false, 1>");
  CHECK(r->workspace_bytes == 0);
  WgmmaTileConfig deep = c;
  deep.k_rows = 2;
  deep.stages = 2;
  r = WgmmaLaunchRecipe(cube, deep, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression.find(", 2, 4, false, false, 1>") != std::string::npos);  // 4 steps of 256
  // The span shrinks as K grows (the truncation error grows as K * sqrt(span)),
  // down to one step; never past it.
  auto steps_at = [&](int64_t k, const WgmmaTileConfig& config) {
    absl::StatusOr<LaunchRecipe> at = WgmmaLaunchRecipe(Fp8Gemm(8192, 8192, k), config, h200);
    REQUIRE(at.ok());
    const std::string& e = at->kernels[0].name_expression;
    std::string head = e.substr(0, e.rfind(", "));  // PROMOTE_STEPS comes before B_KN, SWAP_AB and TAIL_SPLIT
    head = head.substr(0, head.rfind(", "));
    head = head.substr(0, head.rfind(", "));
    return head.substr(head.rfind(", ") + 2);
  };
  CHECK(steps_at(4224, c) == "8");    // 1024 of K
  CHECK(steps_at(14336, c) == "4");   // 512
  CHECK(steps_at(32768, c) == "2");   // 256
  CHECK(steps_at(65536, c) == "1");   // 128
  CHECK(steps_at(262144, c) == "1");  // one step at least
  CHECK(steps_at(65536, deep) == "1");
  // Only fp8 needs it, and it replaces split-K rather than joining it.
  CheckRefused(LinearGemm(8192, 8192, 8192), c, h200, "promotion is for fp8");
  WgmmaTileConfig split = c;
  split.split_k = 2;
  CheckRefused(cube, split, h200, "promotion and split-K are alternatives");
  // Without it, the same config is refused for this K, naming the way out.
  WgmmaTileConfig plain = c;
  plain.promote = false;
  CheckRefused(cube, plain, h200, "(split K, or promote)");

  // The space: at 8192^3 (too many tiles to split) every candidate promotes,
  // with at most 96 accumulators, 64 x 192 tiles among them; where K fits
  // one accumulator, none does, and no tile is 192 wide.
  const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(cube, h200);
  REQUIRE_FALSE(space.empty());
  for (const WgmmaTileConfig& t : space) {
    INFO(ToString(t));
    CHECK(t.promote);
    CHECK(t.rows_per_consumer() * t.block_n / 128 <= 96);
  }
  CHECK(std::any_of(space.begin(), space.end(), [](const WgmmaTileConfig& t) { return t.block_n == 192; }));
  GemmSpaceOptions all;
  all.pruned = false;
  for (const WgmmaTileConfig& t : WgmmaSearchSpace(Fp8Gemm(2048, 4096, 4096), h200, all)) {
    CHECK_FALSE(t.promote);
    CHECK(t.block_n != 192);
  }
  for (const WgmmaTileConfig& t : WgmmaSearchSpace(LinearGemm(128, 4096, 14336), h200, all)) CHECK_FALSE(t.promote);
  // Few tiles and a long K: split configs and promoted ones both compete.
  const std::vector<WgmmaTileConfig> thin = WgmmaSearchSpace(Fp8Gemm(128, 4096, 14336), h200);
  CHECK(std::any_of(thin.begin(), thin.end(), [](const WgmmaTileConfig& t) { return t.promote; }));
  CHECK(std::any_of(thin.begin(), thin.end(), [](const WgmmaTileConfig& t) { return t.split_k > 1; }));
  // The model charges a drained pipeline per span.
  CHECK(WgmmaModelTimeUs(Fp8Gemm(2048, 4096, 4096), plain, h200) <
        WgmmaModelTimeUs(Fp8Gemm(2048, 4096, 4096), c, h200));
  // On the wire; an entry from before the knob reads as unpromoted.
  absl::StatusOr<WgmmaTileConfig> back = WgmmaTileConfigFromProto(WgmmaTileConfigToProto(c));
  REQUIRE(back.ok());
  CHECK(*back == c);
  v1::WgmmaTile before = WgmmaTileConfigToProto(c);
  before.clear_promote();
  CHECK_FALSE(WgmmaTileConfigFromProto(before)->promote);
}

TEST_CASE("the tail split: whole waves, then the left-over tiles split along K across every SM", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();  // 132 SMs
  WgmmaTileConfig c;
  c.block_n = 192;
  c.promote = true;
  c.tail_split = 3;
  CHECK(ToString(c) == "bm128 bn192 c2 s4 g8 pr t3");
  // fp8 2048 x 4096 x 14336: 16 x 22 = 352 tiles of 128 x 192, two whole
  // waves of 132 and 88 left over, in 3 splits of 112 steps of 128 (37, 37
  // and 38): 264 units after the 264 whole tiles.
  const v1::GemmProblem p = Fp8Gemm(2048, 4096, 14336);
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(p, c, h200);
  REQUIRE(r.ok());
  CHECK_THAT(r->kernels[0].name_expression, Catch::EndsWith(", 4, false, false, 3>"));  // PROMOTE_STEPS 4
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{132, 1, 1});
  CHECK(r->workspace_bytes == uint64_t{88} * 3 * 128 * 192 * 4 + 88 * 4);  // the tail's partials, then counters
  CHECK(r->workspace_zeroed);
  // The model: 2 waves and 2 / 3 of one, against 3 waves whole.
  WgmmaTileConfig whole = c;
  whole.tail_split = 1;
  CHECK(WgmmaModelTimeUs(p, c, h200) < 0.95 * WgmmaModelTimeUs(p, whole, h200));
  // In 2x1 clusters: 8 x 22 = 176 units on 66 clusters, 44 left over; a
  // batch of two halves the clusters per batch (66 each: 352 % 66 = 22).
  WgmmaTileConfig pair = c;
  pair.cluster_m = 2;
  r = WgmmaLaunchRecipe(p, pair, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{132, 1, 1});
  CHECK(r->workspace_bytes == uint64_t{44} * 2 * 3 * 128 * 192 * 4 + 44 * 2 * 4);  // (tail, rank) slots
  v1::GemmProblem two = Fp8Gemm(2048, 4096, 14336);
  two.set_batch(2);
  r = WgmmaLaunchRecipe(two, c, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{66, 1, 2});
  CHECK(r->workspace_bytes == uint64_t{2} * 22 * 3 * 128 * 192 * 4 + 2 * 22 * 4);
  // Fewer tiles than clusters: one partial wave, no tail (split-K's case):
  // no workspace, the grid as many CTAs as tiles.
  r = WgmmaLaunchRecipe(Fp8Gemm(1024, 4096, 14336), c, h200);  // 8 x 22 = 176 > 132: a tail of 44
  REQUIRE(r.ok());
  CHECK(r->workspace_bytes > 0);
  r = WgmmaLaunchRecipe(Fp8Gemm(512, 4096, 14336), c, h200);  // 4 x 22 = 88 tiles
  REQUIRE(r.ok());
  CHECK(r->workspace_bytes == 0);
  CHECK_FALSE(r->workspace_zeroed);
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{88, 1, 1});
  // Refused: with split-K, ping-pong or swapped tiles, and splits without K.
  WgmmaTileConfig split = c;
  split.promote = false;
  split.block_n = 128;
  split.split_k = 2;
  CheckRefused(LinearGemm(8192, 4096, 4096), split, h200, "a tail split is for unsplit cooperative tiles");
  WgmmaTileConfig turns = c;
  turns.promote = false;
  turns.block_n = 128;
  turns.pingpong = true;
  CheckRefused(LinearGemm(8192, 4096, 4096), turns, h200, "a tail split is for unsplit cooperative tiles");
  WgmmaTileConfig eight = whole;
  eight.promote = false;
  eight.block_n = 128;
  eight.tail_split = 8;
  CheckRefused(LinearGemm(8192, 4096, 448), eight, h200, "leaves a split without K: K has 7 steps");
  eight.tail_split = 17;
  CheckRefused(LinearGemm(8192, 4096, 4096), eight, h200, "tail_split must be 1 to 16");
  // The pruned space offers it beside the model's best unsplit configs, each
  // twin's base config there too, and only where a tail is left over.
  for (const v1::GemmProblem& q :
       {Fp8Gemm(2048, 4096, 14336), LinearGemm(8192, 14336, 4096), LinearGemm(8192, 8192, 8192)}) {
    const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(q, h200);
    int twins = 0;
    for (const WgmmaTileConfig& t : space) {
      if (t.tail_split == 1) continue;
      ++twins;
      WgmmaTileConfig base = t;
      base.tail_split = 1;
      CHECK(std::find(space.begin(), space.end(), base) != space.end());
      absl::StatusOr<LaunchRecipe> tr = WgmmaLaunchRecipe(q, t, h200);
      REQUIRE(tr.ok());
      CHECK(tr->workspace_bytes > 0);
    }
    CHECK(twins >= 1);
    CHECK(twins <= 4);
  }
  // 128 x 4096: 32 tiles, less than a wave; no twin.
  for (const WgmmaTileConfig& t : WgmmaSearchSpace(LinearGemm(128, 4096, 4096), h200)) CHECK(t.tail_split == 1);
  // On the wire; an entry from before the knob reads as no tail split.
  absl::StatusOr<WgmmaTileConfig> back = WgmmaTileConfigFromProto(WgmmaTileConfigToProto(c));
  REQUIRE(back.ok());
  CHECK(*back == c);
  v1::WgmmaTile before = WgmmaTileConfigToProto(c);
  before.clear_tail_split();
  CHECK(WgmmaTileConfigFromProto(before)->tail_split == 1);
  before.set_tail_split(-1);
  CHECK_THAT(std::string(WgmmaTileConfigFromProto(before).status().message()),
             Catch::Contains("config.gemm.wgmma.tail_split: must be >= 1, got -1"));
}

TEST_CASE("split-K: K's steps divide into the slices, the workspace starts zeroed, and only few tiles split",
          "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  WgmmaTileConfig c;
  c.block_n = 128;
  c.split_k = 4;
  // 128 x 4096 x 14336: 32 tiles of 128 x 128 on 132 SMs; 224 steps of 64, 56 per slice.
  const v1::GemmProblem thin = LinearGemm(128, 4096, 14336);
  absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(thin, c, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression ==
        "ktune::gemm_wgmma<ktune::bf16, ktune::bf16, 0, false, 128, 128, 2, false, 1, 4, 8, 4, 1, 0, false, false, 1>");
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{128, 1, 1});         // 32 tiles x 4 slices
  CHECK(r->workspace_bytes == uint64_t{32} * 4 * 128 * 128 * 4 + 32 * 4);  // partials, then counters
  CHECK(r->workspace_zeroed);
  // A batch of 3 and a 100-row tail: the slots count every batch's tiles.
  r = WgmmaLaunchRecipe(LinearGemm(100, 256, 512, v1::EPILOGUE_NONE, v1::DTYPE_UNSPECIFIED, v1::BF16, 3), c, h200);
  REQUIRE(r.ok());
  CHECK(r->workspace_bytes == uint64_t{3} * 2 * 4 * 128 * 128 * 4 + 3 * 2 * 4);
  CHECK(ToString(c) == "bm128 bn128 c2 s4 g8 k4");
  // On the wire: the slices and the zeroed-workspace contract travel; an
  // entry from before split-K (no field) reads as one slice.
  absl::StatusOr<WgmmaTileConfig> back = WgmmaTileConfigFromProto(WgmmaTileConfigToProto(c));
  REQUIRE(back.ok());
  CHECK(*back == c);
  v1::WgmmaTile old = WgmmaTileConfigToProto(c);
  old.clear_split_k();
  CHECK(WgmmaTileConfigFromProto(old)->split_k == 1);
  old.set_split_k(-2);
  CHECK_THAT(std::string(WgmmaTileConfigFromProto(old).status().message()),
             Catch::Contains("config.gemm.wgmma.split_k: must be >= 1, got -2"));
  CHECK(RecipeFromProto(RecipeToProto(*r, false)).workspace_zeroed);
  // Two slices of K per stage travel too; an entry from before the knob reads as one.
  WgmmaTileConfig deep = c;
  deep.k_rows = 2;
  REQUIRE(WgmmaTileConfigFromProto(WgmmaTileConfigToProto(deep)).ok());
  CHECK(*WgmmaTileConfigFromProto(WgmmaTileConfigToProto(deep)) == deep);
  v1::WgmmaTile before = WgmmaTileConfigToProto(deep);
  before.clear_k_rows();
  CHECK(WgmmaTileConfigFromProto(before)->k_rows == 1);

  auto refused = [&](const v1::GemmProblem& p, const WgmmaTileConfig& config, const std::string& why) {
    CheckRefused(p, config, h200, why);
  };
  CHECK(CanImplementWgmma(LinearGemm(128, 4096, 1000), c, h200).ok());  // a K tail: 16 steps of 64
  WgmmaTileConfig three = c;
  three.split_k = 3;
  refused(thin, three, "power of two");
  WgmmaTileConfig many = c;
  many.split_k = 32;
  refused(thin, many, "power of two <= 16");
  WgmmaTileConfig four = c;
  refused(LinearGemm(128, 4096, 4096 + 64), four, "does not divide K's 65 steps");
  // One consumer at 128 accumulators: unsplit only (its split-K sum spilled).
  WgmmaTileConfig lone = c;
  lone.consumers = 1;
  refused(thin, lone, "split-K with one consumer takes at most 64 accumulators per thread, not 128");
  lone.split_k = 1;
  CHECK(CanImplementWgmma(thin, lone, h200).ok());

  // Pruned, split-K is only tried where the tiles alone leave SMs idle.
  for (const WgmmaTileConfig& t : WgmmaSearchSpace(LinearGemm(8192, 8192, 8192), h200)) CHECK(t.split_k == 1);
  // There, the unsplit configs keep their places and up to 8 split-K ones follow.
  const std::vector<WgmmaTileConfig> pruned = WgmmaSearchSpace(thin, h200);
  REQUIRE(!pruned.empty());
  CHECK(pruned.front().split_k == 1);
  const auto first_split =
      std::find_if(pruned.begin(), pruned.end(), [](const WgmmaTileConfig& t) { return t.split_k > 1; });
  REQUIRE(first_split != pruned.end());
  CHECK(std::all_of(first_split, pruned.end(), [](const WgmmaTileConfig& t) { return t.split_k > 1; }));
  CHECK(pruned.end() - first_split <= 8);
  CHECK(first_split - pruned.begin() <= 16 + 2);  // and the best two with two slices of K per stage
  // The model counts the slices as work units and charges their round trip.
  WgmmaTileConfig whole = c;
  whole.split_k = 1;
  CHECK(WgmmaModelTimeUs(thin, c, h200) < WgmmaModelTimeUs(thin, whole, h200));
}

TEST_CASE("TMA parameters parse, and malformed ones are named", "[tuner][gemm]") {
  absl::StatusOr<TmaParam> t = ParseTmaParam("tma_b:64x256");
  REQUIRE(t.ok());
  CHECK(t->operand == 'b');
  CHECK(t->box_inner == 64);
  CHECK(t->box_outer == 256);
  CHECK(ParseTmaParam("a").status().code() == absl::StatusCode::kNotFound);
  for (const char* bad : {"tma_c:64x128", "tma_a:64x", "tma_a:32x128", "tma_a:64x512", "tma_a64x128", "tma_a:64x0"}) {
    INFO(bad);
    CHECK(ParseTmaParam(bad).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("a TMA parameter names its operand's tensor and box", "[tuner][gemm]") {
  const v1::GemmProblem p = LinearGemm(300, 520, 1000, v1::EPILOGUE_NONE, v1::DTYPE_UNSPECIFIED, v1::BF16, 3);
  absl::StatusOr<TmaTensor> a = GemmTmaTensor(p, "tma_a:64x128", 0x1000, 0x2000);
  REQUIRE(a.ok());
  CHECK(a->base == 0x1000);
  CHECK((a->inner == 1000 && a->rows == 300 && a->batch == 3));
  CHECK((a->row_pitch == 1000 && a->batch_pitch == 300 * 1000));
  CHECK((a->box_inner == 64 && a->box_rows == 128));
  absl::StatusOr<TmaTensor> b = GemmTmaTensor(p, "tma_b:64x128", 0x1000, 0x2000);
  REQUIRE(b.ok());
  CHECK(b->base == 0x2000);
  CHECK((b->rows == 520 && b->batch_pitch == 520 * 1000 && b->box_rows == 128));
  CHECK(GemmTmaTensor(p, "tma_c:64x128", 0, 0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(a->element_bytes == 2);
  // fp8: bytes, a box of 128 elements (one 128-byte row); a bf16 box is refused.
  const v1::GemmProblem q = Fp8Gemm(300, 520, 1024);
  absl::StatusOr<TmaTensor> qa = GemmTmaTensor(q, "tma_a:128x128", 0x1000, 0x2000);
  REQUIRE(qa.ok());
  CHECK((qa->element_bytes == 1 && qa->box_inner == 128 && qa->row_pitch == 1024));
  CHECK_THAT(std::string(GemmTmaTensor(q, "tma_a:64x128", 0, 0).status().message()),
             Catch::Contains("not one 128-byte row"));
  CHECK_FALSE(GemmTmaTensor(p, "tma_a:128x128", 0, 0).ok());  // bf16 rows of 128 are 256 bytes
  // B as [K, N]: rows of N, a box of 64 columns by 64 rows of K.
  const v1::GemmProblem kn =
      TestGemm(300, 520, 1000, v1::ROW_MAJOR, v1::EPILOGUE_NONE, v1::DTYPE_UNSPECIFIED, v1::BF16, 3);
  absl::StatusOr<TmaTensor> bkn = GemmTmaTensor(kn, "tma_b:64x64", 0x1000, 0x2000);
  REQUIRE(bkn.ok());
  CHECK(bkn->base == 0x2000);
  CHECK((bkn->inner == 520 && bkn->rows == 1000 && bkn->batch == 3));
  CHECK((bkn->row_pitch == 520 && bkn->batch_pitch == 1000 * 520));
  CHECK((bkn->box_inner == 64 && bkn->box_rows == 64));
  absl::StatusOr<TmaTensor> akn = GemmTmaTensor(kn, "tma_a:64x128", 0x1000, 0x2000);  // A is [M, K] still
  REQUIRE(akn.ok());
  CHECK((akn->inner == 1000 && akn->rows == 300));
  CHECK_THAT(std::string(GemmTmaTensor(kn, "tma_b:128x64", 0, 0).status().message()),
             Catch::Contains("128 elements of N is not one 128-byte row"));
}

// The kernels of `space` over `problems` whose register allocation the
// spill sweeps check: one per register class. STAGES and GROUP_M reach the
// kernel only as the ring's and the raster's divisors (step % STAGES, tile /
// GROUP_M: shared memory and index arithmetic, not accumulators or epilogue
// state), so configs equal but for them share a class, named by the kernel
// of the class's configs made with stages 2 and group_m 8. Each class keeps
// its deepest ring and its deepest ring of a stage count that is not a
// power of two (whose modulo costs a few registers more); the sweep then
// compiles 347 kernels instead of 592 (and about as many fewer of the
// split-K configs) with the same allocations checked.
template <typename Space>
std::vector<LaunchRecipe> RegisterClassRecipes(const std::vector<v1::GemmProblem>& problems, const DeviceInfo& device,
                                               Space space) {
  struct Class {
    LaunchRecipe deepest, deepest_odd;
    int deepest_stages = 0, deepest_odd_stages = 0;
  };
  std::map<std::string, Class> classes;
  std::set<std::string> names;
  for (const v1::GemmProblem& p : problems) {
    for (const WgmmaTileConfig& c : space(p, device, GemmSpaceOptions())) {
      absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(p, c, device);
      REQUIRE(r.ok());
      if (!names.insert(r->kernels[0].name_expression).second) continue;
      WgmmaTileConfig normal = c;
      normal.stages = 2;
      normal.group_m = 8;
      absl::StatusOr<LaunchRecipe> key = WgmmaLaunchRecipe(p, normal, device);
      REQUIRE(key.ok());
      Class& k = classes[key->kernels[0].name_expression];
      if (c.stages > k.deepest_stages) {
        k.deepest_stages = c.stages;
        k.deepest = *r;
      }
      const bool power_of_two = (c.stages & (c.stages - 1)) == 0;
      if (!power_of_two && c.stages > k.deepest_odd_stages) {
        k.deepest_odd_stages = c.stages;
        k.deepest_odd = *std::move(r);
      }
    }
  }
  std::vector<LaunchRecipe> recipes;
  for (auto& [name, k] : classes) {
    recipes.push_back(std::move(k.deepest));
    if (k.deepest_odd_stages > 0 && k.deepest_odd_stages != k.deepest_stages) {
      recipes.push_back(std::move(k.deepest_odd));
    }
  }
  return recipes;
}

TEST_CASE("the spill sweeps' register classes keep every kernel shape but the ring depth and raster", "[tuner][gemm]") {
  // Two configs of one problem that differ only in stages and group_m are
  // one class; a different tile is another.
  const DeviceInfo h200 = CompileOnlyTarget();
  const v1::GemmProblem p = LinearGemm(2048, 4096, 4096);
  WgmmaTileConfig a;
  a.stages = 2;
  WgmmaTileConfig b = a;
  b.stages = 3;
  b.group_m = 16;
  WgmmaTileConfig c = a;
  c.block_n = 128;
  c.stages = 4;
  auto three = [&](const v1::GemmProblem&, const DeviceInfo&, const GemmSpaceOptions&) {
    return std::vector<WgmmaTileConfig>{a, b, c};
  };
  std::vector<LaunchRecipe> recipes = RegisterClassRecipes({p}, h200, three);
  std::set<std::string> kept;
  for (const LaunchRecipe& r : recipes) kept.insert(r.kernels[0].name_expression);
  CHECK(kept.size() == 2);  // b (the deeper ring of a's class: 3, not a power of two) and c
  CHECK(kept.count(WgmmaLaunchRecipe(p, b, h200)->kernels[0].name_expression) == 1);
  CHECK(kept.count(WgmmaLaunchRecipe(p, c, h200)->kernels[0].name_expression) == 1);
  CHECK(kept.count(WgmmaLaunchRecipe(p, a, h200)->kernels[0].name_expression) == 0);
}

TEST_CASE("NVRTC compiles every pruned wgmma candidate for sm_90a without spills", "[tuner][gemm][nvrtc][slow]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  std::vector<v1::GemmProblem> problems = {LinearGemm(8192, 8192, 8192)};
  for (int64_t m : {1, 16, 128, 2048, 8192}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {14336, 4096}, {4096, 14336}, {6144, 4096}}) {
      problems.push_back(LinearGemm(m, n, k));
    }
  }
  problems.push_back(LinearGemm(127, 4097, 4104, v1::EPILOGUE_BIAS_GELU));
  problems.push_back(LinearGemm(300, 520, 1000, v1::EPILOGUE_BIAS_SILU, v1::BF16, v1::BF16, 2));
  problems.push_back(LinearGemm(1000, 1000, 1000, v1::EPILOGUE_RESIDUAL_ADD, v1::FP32, v1::FP32));
  // B as [K, N] (bf16, N-major B): a bench-sized problem and tails.
  problems.push_back(TestGemm(8192, 8192, 8192, v1::ROW_MAJOR));
  problems.push_back(TestGemm(2048, 4096, 4096, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_GELU));
  problems.push_back(TestGemm(300, 520, 1000, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU, v1::BF16, v1::BF16, 2));
  // fp8 e4m3: the bench problems again, and tails with an epilogue.
  problems.push_back(Fp8Gemm(8192, 8192, 8192));
  for (int64_t m : {128, 2048, 8192}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {14336, 4096}, {4096, 14336}, {6144, 4096}}) {
      problems.push_back(Fp8Gemm(m, n, k));
    }
  }
  problems.push_back(Fp8Gemm(127, 264, 1040, v1::EPILOGUE_BIAS_SILU));
  // The swapped tiles of a few rows (wgmma N = 8, 16, 32): fp8 decode shapes
  // (split, and promoted at K = 14336), tails under the heavier epilogues,
  // an fp32 D.
  problems.push_back(Fp8Gemm(16, 4096, 4096));
  problems.push_back(Fp8Gemm(16, 4096, 14336));
  problems.push_back(Fp8Gemm(7, 264, 1040, v1::EPILOGUE_BIAS_SILU));
  problems.push_back(LinearGemm(20, 264, 1000, v1::EPILOGUE_BIAS_GELU, v1::BF16, v1::BF16, 2));
  problems.push_back(LinearGemm(9, 300, 1000, v1::EPILOGUE_RESIDUAL_ADD, v1::FP32, v1::FP32));
  // Promoted tiles (up to 64 x 192 per consumer, 192 accumulator registers)
  // under the heaviest epilogue.
  problems.push_back(Fp8Gemm(2304, 1032, 8320, v1::EPILOGUE_BIAS_SILU));
  // And with a tail split (216 tiles of 128 x 192 on 132 SMs): the split
  // sum beside both accumulators and the epilogue.
  problems.push_back(Fp8Gemm(2200, 2200, 8320, v1::EPILOGUE_BIAS_SILU));
  std::vector<LaunchRecipe> recipes = RegisterClassRecipes(problems, h200, WgmmaSearchSpace);
  REQUIRE(recipes.size() >= 10);
  CheckCompilesWithoutSpills(&recipes, "wgmma");
}

TEST_CASE("NVRTC compiles every split-K wgmma config, unpruned, without spills", "[tuner][gemm][nvrtc][slow]") {
  // Split-K's sum sits beside the epilogue's registers: the heaviest
  // epilogues, both types, every split config the space accepts (pruned or
  // not; the test above covers the pruned ones of the bench problems).
  const DeviceInfo h200 = CompileOnlyTarget();
  GemmSpaceOptions all;
  all.pruned = false;
  auto unpruned_splits = [&](const v1::GemmProblem& p, const DeviceInfo& device, const GemmSpaceOptions&) {
    std::vector<WgmmaTileConfig> splits;
    for (const WgmmaTileConfig& c : WgmmaSearchSpace(p, device, all)) {
      if (c.split_k > 1) splits.push_back(c);
    }
    return splits;
  };
  std::vector<LaunchRecipe> recipes = RegisterClassRecipes(
      {LinearGemm(127, 264, 1000, v1::EPILOGUE_BIAS_SILU), Fp8Gemm(127, 264, 1024, v1::EPILOGUE_BIAS_GELU)}, h200,
      unpruned_splits);
  REQUIRE(recipes.size() >= 50);
  CheckCompilesWithoutSpills(&recipes, "split-K wgmma");
}

}  // namespace
}  // namespace ktune
