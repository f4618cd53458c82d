#include "cache/recipe_check.h"

#include <algorithm>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tuner/cublaslt.h"
#include "tuner/gemm_wire.h"
#include "tuner/kernel_source.h"
#include "tuner/norm_space.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/sha256.h"
#include "tuner/wire.h"

namespace ktune {
namespace {

// The GEMM software fingerprint, computed once per process: the answer
// depends on whichever source won, so on every template, the reference the
// candidates were checked against and the cuBLASLt library (0 when absent).
const SoftwareFingerprint& GemmSoftware() {
  static const SoftwareFingerprint software = [] {
    std::string parts;
    for (const char* id : {"gemm/gemm_mma", "gemm/gemm_wgmma", "gemm/gemm_skinny", "gemm/gemm_reference"}) {
      absl::StatusOr<const KernelSource*> source = FindKernelSource(id);
      absl::StrAppend(&parts, id, "=", source.ok() ? (*source)->hash : "missing", "\n");
    }
    absl::StrAppend(&parts, "cublaslt=", CublasLtLibraryVersion(), "\n");
    SoftwareFingerprint s;
    s.template_hash = Sha256Hex(parts);
    s.nvrtc_version = NvrtcVersion();
    s.schema_version = kSchemaVersion;
    return s;
  }();
  return software;
}

// Field values are quoted and cut short: they may come from a hostile file.
std::string Shown(const std::string& text) {
  std::string out = absl::CHexEscape(text.substr(0, 120));
  return absl::StrCat("\"", out, text.size() > 120 ? "...\"" : "\"");
}

template <typename Container>
std::string Dims(const Container& v) {
  return absl::StrCat("(", absl::StrJoin(v, ", "), ")");
}

template <typename Container>
std::string List(const Container& v) {
  std::string out = "[";
  for (const auto& item : v) absl::StrAppend(&out, out.size() > 1 ? ", " : "", Shown(item));
  return absl::StrCat(out, "]");
}

}  // namespace

absl::StatusOr<SoftwareFingerprint> BuildSoftware(const v1::Problem& problem) {
  if (problem.has_gemm()) return GemmSoftware();
  if (!problem.has_norm()) return absl::InvalidArgumentError("problem: missing (a norm or a GEMM problem)");
  absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
  if (!norm.ok()) return norm.status();
  absl::StatusOr<const KernelSource*> source = FindKernelSource(NormTemplateId(*norm));
  if (!source.ok()) return source.status();
  return SoftwareFingerprint{(*source)->hash, NvrtcVersion(), kSchemaVersion};
}

absl::StatusOr<LaunchRecipe> TemplateRecipe(const v1::Problem& problem, const v1::Config& config,
                                            const DeviceInfo& device) {
  if (problem.has_norm()) {
    if (!config.has_norm()) return absl::InvalidArgumentError("config.norm: a norm problem needs a norm config");
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    absl::StatusOr<NormConfig> c = NormConfigFromProto(config.norm());
    if (!c.ok()) return c.status();
    return NormLaunchRecipe(*norm, *c, device);
  }
  if (!problem.has_gemm()) return absl::InvalidArgumentError("problem: missing (a norm or a GEMM problem)");
  if (!config.has_gemm()) return absl::InvalidArgumentError("config.gemm: a GEMM problem needs a GEMM config");
  const v1::GemmConfig& g = config.gemm();
  if (g.has_cublaslt()) {
    // The call is wholly described by its config: algorithm, workspace and
    // the library version its bytes are for.
    LaunchRecipe r = CublasLtRecipe({g.cublaslt().algo(), g.cublaslt().workspace_bytes()}, g.cublaslt().version());
    r.arch = Arch(device);
    return r;
  }
  absl::StatusOr<LaunchRecipe> r = OwnGemmRecipe(problem.gemm(), g, device);
  if (absl::IsNotFound(r.status())) {
    return absl::InvalidArgumentError("config.gemm: must name a source (mma_sync, wgmma, skinny or cublaslt)");
  }
  return r;
}

absl::Status CompareRecipe(std::string_view prefix_text, const v1::LaunchRecipe& got, const LaunchRecipe& expected) {
  const std::string prefix(prefix_text);
  auto differs = [&](const std::string& field, const std::string& is, const std::string& want) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "recipe.", field, ": is ", is, ", but this template writes ",
                                                   want, " for the problem and config"));
  };
  if (got.template_id() != expected.template_id) {
    return differs("template_id", Shown(got.template_id()), Shown(expected.template_id));
  }
  if (got.template_hash() != expected.template_hash) {
    return differs("template_hash", Shown(got.template_hash()), Shown(expected.template_hash));
  }
  if (got.arch() != expected.arch) return differs("arch", Shown(got.arch()), Shown(expected.arch));
  // NVRTC options are never taken from a recipe that is not this build's own:
  // "--define-macro" or "--pre-include=FILE" would change what compiles.
  if (!std::equal(got.nvrtc_options().begin(), got.nvrtc_options().end(), expected.nvrtc_options.begin(),
                  expected.nvrtc_options.end())) {
    return differs("nvrtc_options", List(got.nvrtc_options()), List(expected.nvrtc_options));
  }
  if (got.kernels_size() != static_cast<int>(expected.kernels.size())) {
    return differs("kernels", absl::StrCat(got.kernels_size(), " kernels"), absl::StrCat(expected.kernels.size()));
  }
  for (int i = 0; i < got.kernels_size(); ++i) {
    const v1::KernelLaunch& k = got.kernels(i);
    const KernelLaunch& want = expected.kernels[i];
    const std::string field = absl::StrCat("kernels[", i, "].");
    if (k.name_expression() != want.name_expression) {
      return differs(field + "name_expression", Shown(k.name_expression()), Shown(want.name_expression));
    }
    // Lowered names come from compiling the recipe (the daemon does so
    // itself); a stored or bundled recipe carries none.
    if (k.lowered_name() != want.lowered_name) {
      return differs(
          field + "lowered_name", Shown(k.lowered_name()),
          want.lowered_name.empty() ? "none (lowered names come from compiling it)" : Shown(want.lowered_name));
    }
    if (!std::equal(k.grid().begin(), k.grid().end(), want.grid.begin(), want.grid.end())) {
      return differs(field + "grid", Dims(k.grid()), Dims(want.grid));
    }
    if (!std::equal(k.block().begin(), k.block().end(), want.block.begin(), want.block.end())) {
      return differs(field + "block", Dims(k.block()), Dims(want.block));
    }
    if (k.dynamic_smem_bytes() != want.dynamic_smem_bytes) {
      return differs(field + "dynamic_smem_bytes", absl::StrCat(k.dynamic_smem_bytes()),
                     absl::StrCat(want.dynamic_smem_bytes));
    }
    if (!std::equal(k.params().begin(), k.params().end(), want.params.begin(), want.params.end())) {
      return differs(field + "params", List(k.params()), List(want.params));
    }
    if (k.programmatic_dependent() != want.programmatic_dependent) {
      return differs(field + "programmatic_dependent", k.programmatic_dependent() ? "true" : "false",
                     want.programmatic_dependent ? "true" : "false");
    }
  }
  if (got.workspace_bytes() != expected.workspace_bytes) {
    return differs("workspace_bytes", absl::StrCat(got.workspace_bytes()), absl::StrCat(expected.workspace_bytes));
  }
  if (got.workspace_zeroed() != expected.workspace_zeroed) {
    return differs("workspace_zeroed", got.workspace_zeroed() ? "true" : "false",
                   expected.workspace_zeroed ? "true" : "false");
  }
  if (got.cublaslt_algo() != expected.cublaslt_algo) {
    return differs("cublaslt_algo", absl::StrCat(got.cublaslt_algo().size(), " bytes ", Shown(got.cublaslt_algo())),
                   absl::StrCat(expected.cublaslt_algo.size(), " bytes ", Shown(expected.cublaslt_algo)));
  }
  if (got.cubin() != expected.cubin) {
    return differs("cubin", absl::StrCat(got.cubin().size(), " bytes"),
                   expected.cubin.empty() ? "none (machine code comes from compiling it)"
                                          : absl::StrCat(expected.cubin.size(), " bytes"));
  }
  // Every field of v1::LaunchRecipe and v1::KernelLaunch is compared above
  // (tests/cache/recipe_check_test.cc counts them); unknown fields are not
  // part of a recipe.
  if (!got.GetReflection()->GetUnknownFields(got).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "recipe: carries fields this build does not know"));
  }
  for (int i = 0; i < got.kernels_size(); ++i) {
    if (const v1::KernelLaunch& k = got.kernels(i); !k.GetReflection()->GetUnknownFields(k).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "recipe.kernels[", i, "]: carries fields this build does not know"));
    }
  }
  return absl::OkStatus();
}

absl::Status VerifyRecipe(const v1::Problem& problem, const v1::Config& config, const v1::LaunchRecipe& recipe,
                          const DeviceInfo& device, std::string_view prefix) {
  absl::StatusOr<LaunchRecipe> expected = TemplateRecipe(problem, config, device);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(prefix), "recipe: this build's template writes none for the problem and config on ",
                     Arch(device), ": ", expected.status().message()));
  }
  return CompareRecipe(prefix, recipe, *expected);
}

}  // namespace ktune
