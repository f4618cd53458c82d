// The skinny GEMM space (tuner/gemm/gemm_skinny_space.h): which problems it takes,
// its recipes, and that NVRTC compiles every config for every epilogue, C and
// D type without spills.
#include "tuner/gemm/gemm_skinny_space.h"

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/tuner/compile_check.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/gemm_problem.h"

namespace ktune {
namespace {

TEST_CASE("the skinny space takes M <= 16 bf16 [N, K] GEMMs and names what it refuses", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  CHECK(SkinnySearchSpace(LinearGemm(1, 4096, 4096), h200).size() == 9);
  CHECK(SkinnySearchSpace(LinearGemm(16, 14336, 4096), h200).size() == 9);
  CHECK(SkinnySearchSpace(LinearGemm(17, 4096, 4096), h200).empty());
  // The plain configs first, then the pipelined ones.
  std::vector<std::string> names;
  for (const SkinnyConfig& c : SkinnySearchSpace(LinearGemm(1, 4096, 4096), h200)) names.push_back(ToString(c));
  CHECK(names == std::vector<std::string>{"w4 u2", "w4 u4", "w8 u2", "w8 u4", "w16 u2", "w16 u4", "w8 u1 pipelined",
                                          "w8 u2 pipelined", "w4 u2 pipelined"});
  auto refused = [&](const v1::GemmProblem& p, const std::string& why) {
    const absl::Status s = CanImplementSkinny(p, SkinnyConfig{}, h200);
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains(why));
  };
  refused(LinearGemm(17, 4096, 4096), "M <= 16");
  v1::GemmProblem kn = LinearGemm(4, 4096, 4096);
  kn.set_b_layout(v1::ROW_MAJOR);
  refused(kn, "[N, K]");
  refused(LinearGemm(4, 4096, 4100), "K = 4100");
  CHECK(CanImplementSkinny(LinearGemm(4, 64, 64), SkinnyConfig{64, 2}, h200).code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("the skinny space takes fp8 where its accumulators stay within 4096 of K", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  CHECK(SkinnySearchSpace(Fp8Gemm(1, 4096, 4096), h200).size() == 9);
  // K = 14336 is 224 chunks of 64: four warps of two take 28 rounds, 3584 of
  // K each, and eight pipelined warps of one 28 rounds, 1792 each (at M <= 8:
  // pipelined fp8 is not offered at M = 16). At K = 65536 four warps would
  // span 16384: only the wider splits.
  CHECK(SkinnySearchSpace(Fp8Gemm(8, 4096, 14336), h200).size() == 9);
  CHECK(SkinnySearchSpace(Fp8Gemm(16, 4096, 14336), h200).size() == 6);
  CHECK(CanImplementSkinny(Fp8Gemm(9, 4096, 4096), SkinnyConfig{8, 2, true}, h200).message() ==
        "skinny w8 u2 pipelined: pipelined serves fp8 at M <= 8 only");
  const std::vector<SkinnyConfig> long_k = SkinnySearchSpace(Fp8Gemm(16, 256, 65536), h200);
  REQUIRE(long_k.size() == 2);  // 16 warps of 2 or 4 chunks: 4096 of K each
  for (const SkinnyConfig& c : long_k) CHECK(c.warps == 16);
  auto message = [&](const v1::GemmProblem& p, const SkinnyConfig& c) {
    const absl::Status s = CanImplementSkinny(p, c, h200);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    return std::string(s.message());
  };
  CHECK(message(Fp8Gemm(16, 256, 65536), SkinnyConfig{8, 1, true}) ==
        "skinny w8 u1 pipelined: a warp's accumulator would span 8192 of K, over the 4096 fp8's reduced-precision adds "
        "keep within tolerance");
  CHECK(message(Fp8Gemm(16, 256, 65536), SkinnyConfig{4, 2}) ==
        "skinny w4 u2: a warp's accumulator would span 16384 of K, over the 4096 fp8's reduced-precision adds keep "
        "within tolerance");
  // 16-byte loads are 16 e4m3: K = 1032 is 8 short.
  CHECK(message(Fp8Gemm(16, 256, 1032), SkinnyConfig{}) ==
        "skinny w8 u4: K = 1032 is not a multiple of 16 (16-byte loads)");
  DeviceInfo a100 = h200;
  a100.cc_major = 8;
  a100.cc_minor = 0;
  CHECK(CanImplementSkinny(Fp8Gemm(1, 256, 1024), SkinnyConfig{}, h200).ok());
  CHECK(CanImplementSkinny(Fp8Gemm(1, 256, 1024), SkinnyConfig{}, a100).message() ==
        "skinny w8 u4: fp8 needs sm_89 or newer, device is sm_80");
}

TEST_CASE("the untuned skinny config is the one most often fastest on the H200, where it can run", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  auto untuned = [&](const v1::GemmProblem& p) {
    const std::optional<SkinnyConfig> c = SkinnyUntunedConfig(p, h200);
    return c.has_value() ? ToString(*c) : std::string("none");
  };
  CHECK(untuned(LinearGemm(1, 4096, 4096)) == "w8 u1 pipelined");
  CHECK(untuned(LinearGemm(16, 4096, 14336)) == "w8 u1 pipelined");
  CHECK(untuned(Fp8Gemm(8, 4096, 4096)) == "w8 u1 pipelined");
  CHECK(untuned(Fp8Gemm(16, 4096, 4096)) == "w8 u4");  // pipelined fp8 is for M <= 8
  // K = 65536 fp8: only 16 warps keep an accumulator within 4096 of K.
  CHECK(untuned(Fp8Gemm(16, 256, 65536)) == "w16 u2");
  CHECK(untuned(LinearGemm(17, 4096, 4096)) == "none");
}

TEST_CASE("SkinnyLaunchRecipe: 16 columns of D per CTA, the row block from M", "[tuner][gemm]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  absl::StatusOr<LaunchRecipe> r = SkinnyLaunchRecipe(LinearGemm(1, 4100, 4096), SkinnyConfig{8, 4}, h200);
  REQUIRE(r.ok());
  CHECK(r->template_id == "gemm/gemm_skinny");
  CHECK(r->kernels[0].name_expression == "ktune::gemm_skinny<ktune::bf16, ktune::bf16, 0, false, 8, 8, 4, false>");
  CHECK(r->kernels[0].params ==
        std::vector<std::string>{"a", "b", "c", "d", "bias", "M", "N", "K", "alpha", "beta", "a_scale", "b_scale"});
  CHECK(r->kernels[0].grid == std::array<uint32_t, 3>{257, 1, 1});
  CHECK(r->kernels[0].block == std::array<uint32_t, 3>{256, 1, 1});
  r = SkinnyLaunchRecipe(LinearGemm(9, 64, 64, v1::EPILOGUE_BIAS_SILU, v1::FP32, v1::FP32), SkinnyConfig{4, 2}, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression == "ktune::gemm_skinny<ktune::bf16, float, 3, true, 16, 4, 2, false>");
  r = SkinnyLaunchRecipe(Fp8Gemm(16, 64, 64, v1::EPILOGUE_BIAS), SkinnyConfig{4, 2}, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression == "ktune::gemm_skinny<ktune::e4m3, ktune::bf16, 1, false, 16, 4, 2, false>");
  r = SkinnyLaunchRecipe(Fp8Gemm(1, 64, 64), SkinnyConfig{8, 1, true}, h200);
  REQUIRE(r.ok());
  CHECK(r->kernels[0].name_expression == "ktune::gemm_skinny<ktune::e4m3, ktune::bf16, 0, false, 8, 8, 1, true>");
  CHECK(r->kernels[0].block == std::array<uint32_t, 3>{256, 1, 1});
}

TEST_CASE("NVRTC compiles every skinny config for every epilogue without spills", "[tuner][gemm][nvrtc][slow]") {
  const DeviceInfo h200 = CompileOnlyTarget();
  std::vector<LaunchRecipe> recipes;
  for (const v1::GemmProblem& p : {LinearGemm(1, 4096, 4096), LinearGemm(16, 4096, 4096, v1::EPILOGUE_BIAS_GELU),
                                   LinearGemm(8, 4096, 4096, v1::EPILOGUE_BIAS_SILU, v1::BF16),
                                   LinearGemm(16, 512, 512, v1::EPILOGUE_RESIDUAL_ADD, v1::FP32, v1::FP32),
                                   Fp8Gemm(1, 4096, 4096), Fp8Gemm(16, 4096, 4096, v1::EPILOGUE_BIAS_SILU),
                                   // The bench's M = 16 instantiations (no epilogue, bf16 D).
                                   LinearGemm(16, 4096, 14336), Fp8Gemm(16, 4096, 14336)}) {
    for (const SkinnyConfig& c : SkinnySearchSpace(p, h200)) {
      absl::StatusOr<LaunchRecipe> r = SkinnyLaunchRecipe(p, c, h200);
      REQUIRE(r.ok());
      recipes.push_back(*std::move(r));
    }
  }
  REQUIRE(recipes.size() == 66);  // 9 configs each, 6 for fp8 at M = 16
  CheckCompilesWithoutSpills(&recipes, "skinny");
}

}  // namespace
}  // namespace ktune
