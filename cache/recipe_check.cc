#include "cache/recipe_check.h"

#include <algorithm>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/message_differencer.h"
#include "tuner/core/fingerprint.h"

namespace ktune {
namespace {

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

// A message as text for an error, cut short like Shown's.
std::string ShownMessage(const google::protobuf::Message& m) {
  const std::string text = m.ShortDebugString();
  return absl::StrCat("{", text.substr(0, 240), text.size() > 240 ? "...}" : "}");
}

// The first of `got` and `want` (repeated messages) that differ, as
// differs(field[i], ...); OK when equal in count and every field.
template <typename Got, typename Want, typename Differs>
absl::Status CompareMessages(const std::string& field, const Got& got, const Want& want, Differs differs) {
  using google::protobuf::util::MessageDifferencer;
  const size_t n = std::max<size_t>(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (i >= static_cast<size_t>(got.size())) return differs(at, "missing", ShownMessage(want[i]));
    if (i >= static_cast<size_t>(want.size())) return differs(at, ShownMessage(got[i]), "none");
    if (!MessageDifferencer::Equals(got[i], want[i])) return differs(at, ShownMessage(got[i]), ShownMessage(want[i]));
  }
  return absl::OkStatus();
}

}  // namespace

v1::LaunchRecipe StoredRecipe(const v1::LaunchRecipe& recipe) {
  v1::LaunchRecipe stored = recipe;
  stored.clear_cubin();
  stored.clear_tensors();
  stored.clear_cublaslt_call();
  for (v1::KernelLaunch& k : *stored.mutable_kernels()) {
    k.clear_lowered_name();
    k.clear_args();
  }
  return stored;
}

LaunchRecipe StoredRecipe(LaunchRecipe recipe) {
  recipe.cubin.clear();
  recipe.tensors.clear();
  recipe.cublaslt_call.Clear();
  for (KernelLaunch& k : recipe.kernels) {
    k.lowered_name.clear();
    k.args.clear();
  }
  return recipe;
}

absl::Status CompareStoredRecipe(std::string_view prefix, const v1::LaunchRecipe& stored,
                                 const LaunchRecipe& expected) {
  return CompareRecipe(prefix, stored, StoredRecipe(expected));
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
    if (absl::Status s = CompareMessages(field + "args", k.args(), want.args, differs); !s.ok()) return s;
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
  if (absl::Status s = CompareMessages("tensors", got.tensors(), expected.tensors, differs); !s.ok()) return s;
  if (!google::protobuf::util::MessageDifferencer::Equals(got.cublaslt_call(), expected.cublaslt_call)) {
    return differs("cublaslt_call", ShownMessage(got.cublaslt_call()), ShownMessage(expected.cublaslt_call));
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

namespace {

// The recipe this build's template writes, or INVALID_ARGUMENT saying it
// writes none.
absl::StatusOr<LaunchRecipe> TemplateRecipeFor(const OpRegistry& ops, const v1::Problem& problem,
                                               const v1::Config& config, const DeviceInfo& device,
                                               std::string_view prefix) {
  absl::StatusOr<LaunchRecipe> expected = ops.TemplateRecipe(problem, config, device);
  if (!expected.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(prefix), "recipe: this build's template writes none for the problem and config on ",
                     Arch(device), ": ", expected.status().message()));
  }
  return expected;
}

}  // namespace

absl::Status VerifyRecipe(const OpRegistry& ops, const v1::Problem& problem, const v1::Config& config,
                          const v1::LaunchRecipe& recipe, const DeviceInfo& device, std::string_view prefix) {
  absl::StatusOr<LaunchRecipe> expected = TemplateRecipeFor(ops, problem, config, device, prefix);
  if (!expected.ok()) return expected.status();
  return CompareRecipe(prefix, recipe, *expected);
}

absl::Status VerifyStoredRecipe(const OpRegistry& ops, const v1::Problem& problem, const v1::Config& config,
                                const v1::LaunchRecipe& recipe, const DeviceInfo& device, std::string_view prefix) {
  absl::StatusOr<LaunchRecipe> expected = TemplateRecipeFor(ops, problem, config, device, prefix);
  if (!expected.ok()) return expected.status();
  return CompareStoredRecipe(prefix, recipe, *expected);
}

}  // namespace ktune
