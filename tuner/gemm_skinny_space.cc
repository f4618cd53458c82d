#include "tuner/gemm_skinny_space.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/gemm_problem.h"
#include "tuner/gemm_space.h"  // GemmTemplateRecipe

namespace ktune {
namespace {

constexpr char kTemplateId[] = "gemm/gemm_skinny";
constexpr int64_t kMaxRows = 16;   // rows of A one CTA multiplies (the template's MB)
constexpr int kColumnsPerCta = 16;
constexpr int kMaxBatch = 65535;   // gridDim.z

}  // namespace

std::string ToString(const SkinnyConfig& c) { return absl::StrFormat("w%d u%d", c.warps, c.unroll); }

absl::Status CanImplementSkinny(const v1::GemmProblem& p, const SkinnyConfig& c, const DeviceInfo& d) {
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("skinny ", ToString(c), ": ", why));
  };
  if (p.m() > kMaxRows) return fail(absl::StrCat("serves M <= ", kMaxRows, ", M is ", p.m()));
  if (p.a_dtype() != v1::BF16 || p.b_dtype() != v1::BF16) return fail("serves bf16 A and B");
  if (!GemmBIsNK(p)) return fail("serves B given as [N, K]");
  if (p.k() % 8 != 0) return fail(absl::StrCat("K = ", p.k(), " is not a multiple of 8 (16-byte loads)"));
  if (GemmBatch(p) > kMaxBatch) return fail(absl::StrCat("batch over ", kMaxBatch));
  if (d.cc_major < 8) return fail(absl::StrCat("needs sm_80 or newer, device is ", Arch(d)));
  if (c.warps < 1 || c.warps > 32 || c.unroll < 1 || c.unroll > 8) return fail("1-32 warps and 1-8 chunks");
  return absl::OkStatus();
}

std::vector<SkinnyConfig> SkinnySearchSpace(const v1::GemmProblem& p, const DeviceInfo& d) {
  std::vector<SkinnyConfig> space;
  for (int warps : {4, 8, 16}) {
    for (int unroll : {2, 4}) {
      const SkinnyConfig c{warps, unroll};
      if (CanImplementSkinny(p, c, d).ok()) space.push_back(c);
    }
  }
  return space;
}

absl::StatusOr<LaunchRecipe> SkinnyLaunchRecipe(const v1::GemmProblem& p, const SkinnyConfig& c,
                                                const DeviceInfo& d) {
  if (absl::Status s = CanImplementSkinny(p, c, d); !s.ok()) return s;
  absl::StatusOr<LaunchRecipe> recipe = GemmTemplateRecipe(kTemplateId, Arch(d));
  if (!recipe.ok()) return recipe.status();
  KernelLaunch k;
  k.name_expression = absl::StrFormat("ktune::gemm_skinny<%s, %d, %s, %d, %d, %d>",
                                      GemmDType(p) == v1::FP32 ? "float" : "ktune::bf16", GemmEpilogueCode(p),
                                      GemmHasC(p) ? "true" : "false", p.m() <= 8 ? 8 : 16, c.warps, c.unroll);
  k.grid = {static_cast<uint32_t>((p.n() + kColumnsPerCta - 1) / kColumnsPerCta), 1,
            static_cast<uint32_t>(GemmBatch(p))};
  k.block = {static_cast<uint32_t>(c.warps * 32), 1, 1};
  k.params = {"a", "b", "c", "d", "bias", "M", "N", "K", "alpha", "beta"};
  recipe->kernels.push_back(std::move(k));
  return recipe;
}

}  // namespace ktune
