#include "tuner/gemm/gemm_skinny_space.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/compile/kernel_instance.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/gemm/gemm_interface.h"
#include "tuner/gemm/gemm_space.h"  // GemmTemplateRecipe

namespace ktune {
namespace {

constexpr char kTemplateId[] = "gemm/gemm_skinny";
constexpr int64_t kMaxRows = 16;  // rows of A one CTA multiplies (the template's MB)
constexpr int kColumnsPerCta = 16;
constexpr int kMaxBatch = 65535;  // gridDim.z
constexpr int kChunkBytes = 64;   // of K per warp step (the template's)

}  // namespace

std::string ToString(const SkinnyConfig& c) {
  return absl::StrFormat("w%d u%d%s", c.warps, c.unroll, c.pipelined ? " pipelined" : "");
}

absl::Status CanImplementSkinny(const v1::GemmProblem& p, const SkinnyConfig& c, const DeviceInfo& d) {
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("skinny ", ToString(c), ": ", why));
  };
  if (p.m() > kMaxRows) return fail(absl::StrCat("serves M <= ", kMaxRows, ", M is ", p.m()));
  if (!GemmBIsNK(p)) return fail("serves B given as [N, K]");
  const int per_load = GemmIsFp8(p) ? 16 : 8;  // elements in 16 bytes
  if (p.k() % per_load != 0) {
    return fail(absl::StrCat("K = ", p.k(), " is not a multiple of ", per_load, " (16-byte loads)"));
  }
  if (GemmBatch(p) > kMaxBatch) return fail(absl::StrCat("batch over ", kMaxBatch));
  if (d.cc_major < 8) return fail(absl::StrCat("needs sm_80 or newer, device is ", Arch(d)));
  if (GemmIsFp8(p) && d.cc_major * 10 + d.cc_minor < 89) {
    return fail(absl::StrCat("fp8 needs sm_89 or newer, device is ", Arch(d)));
  }
  if (c.warps < 1 || c.warps > 32 || c.unroll < 1 || c.unroll > 8) return fail("1-32 warps and 1-8 chunks");
  if (GemmIsFp8(p)) {
    // Warp w takes chunks w * unroll + [0, unroll), then every warps * unroll.
    const int64_t chunk = kChunkBytes;  // e4m3: one byte per element
    const int64_t chunks = (p.k() + chunk - 1) / chunk;
    const int64_t per_round = int64_t{c.warps} * c.unroll;
    const int64_t span = (chunks + per_round - 1) / per_round * c.unroll * chunk;
    if (span > kMaxFp8KPerAccumulator) {
      return fail(absl::StrCat("a warp's accumulator would span ", span, " of K, over the ", kMaxFp8KPerAccumulator,
                               " fp8's reduced-precision adds keep within tolerance"));
    }
  }
  if (c.pipelined && GemmIsFp8(p) && p.m() > 8) {
    // Two rounds of 16 rows of e4m3 A and B spill past 128 registers with
    // some epilogues, and were 4-8% slower than the plain loop at M = 16
    // where they did not (bench/results/2026-11-30-gemm-skinny-pipelined-fb2fcd5.md,
    // "Where the skinny GEMM's time goes", the runs before fb2fcd5).
    // Why: bench/results/decisions/skinny-gemm.md
    return fail("pipelined serves fp8 at M <= 8 only");
  }
  return absl::OkStatus();
}

std::vector<SkinnyConfig> SkinnySearchSpace(const v1::GemmProblem& p, const DeviceInfo& d) {
  std::vector<SkinnyConfig> grid;
  for (int warps : {4, 8, 16}) {
    for (int unroll : {2, 4}) grid.push_back({warps, unroll, false});
  }
  // Pipelined, the configs that fit 128 registers with both rounds' loads
  // and were fastest in the H200 runs of
  // bench/results/2026-11-30-gemm-skinny-pipelined-fb2fcd5.md, "Where the skinny
  // GEMM's time goes" (the runs before fb2fcd5).
  for (const SkinnyConfig& c : {SkinnyConfig{8, 1, true}, SkinnyConfig{8, 2, true}, SkinnyConfig{4, 2, true}}) {
    grid.push_back(c);
  }
  std::vector<SkinnyConfig> space;
  for (const SkinnyConfig& c : grid) {
    if (CanImplementSkinny(p, c, d).ok()) space.push_back(c);
  }
  return space;
}

std::optional<SkinnyConfig> SkinnyUntunedConfig(const v1::GemmProblem& p, const DeviceInfo& d) {
  for (const SkinnyConfig& c : {SkinnyConfig{8, 1, true}, SkinnyConfig{8, 4, false}}) {
    if (CanImplementSkinny(p, c, d).ok()) return c;
  }
  const std::vector<SkinnyConfig> space = SkinnySearchSpace(p, d);
  if (space.empty()) return std::nullopt;
  return space.front();
}

absl::StatusOr<LaunchRecipe> SkinnyLaunchRecipe(const v1::GemmProblem& p, const SkinnyConfig& c, const DeviceInfo& d) {
  if (absl::Status s = CanImplementSkinny(p, c, d); !s.ok()) return s;
  absl::StatusOr<LaunchRecipe> recipe = GemmTemplateRecipe(kTemplateId, Arch(d));
  if (!recipe.ok()) return recipe.status();
  KernelLaunch k;
  const absl::Status named = KernelInstance("gemm_skinny")
                                 .Type("TAB", GemmIsFp8(p) ? "ktune::e4m3" : "ktune::bf16")
                                 .Type("TD", GemmDType(p) == v1::FP32 ? "float" : "ktune::bf16")
                                 .Int("EPI", GemmEpilogueCode(p))
                                 .Bool("HAS_C", GemmHasC(p))
                                 .Int("MB", p.m() <= 8 ? 8 : 16)
                                 .Int("WARPS", c.warps)
                                 .Int("UNROLL", c.unroll)
                                 .Bool("PIPELINED", c.pipelined)
                                 .NameInto(&k);
  if (!named.ok()) return named;
  k.grid = {static_cast<uint32_t>((p.n() + kColumnsPerCta - 1) / kColumnsPerCta), 1,
            static_cast<uint32_t>(GemmBatch(p))};
  k.block = {static_cast<uint32_t>(c.warps * 32), 1, 1};
  k.params = {"a", "b", "c", "d", "bias", "M", "N", "K", "alpha", "beta", "a_scale", "b_scale"};
  recipe->kernels.push_back(std::move(k));
  if (absl::Status s = WriteGemmInterface(p, &*recipe); !s.ok()) return s;
  return recipe;
}

}  // namespace ktune
