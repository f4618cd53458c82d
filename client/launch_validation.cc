#include "client/launch_validation.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/launch_args.h"

namespace ktune {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool PowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

absl::Status ValidateDims(const std::string& field, const google::protobuf::RepeatedField<uint32_t>& dims,
                          uint64_t max) {
  if (dims.empty() || dims.size() > 3) {
    return Invalid(field, absl::StrCat("needs 1 to 3 dimensions (x, y, z), has ", dims.size()));
  }
  uint64_t product = 1;
  for (int i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) return Invalid(absl::StrCat(field, "[", i, "]"), "must be >= 1");
    product *= dims[i];
  }
  if (product > max) return Invalid(field, absl::StrCat(product, " in all, more than ", max));
  return absl::OkStatus();
}

absl::Status ValidateTma(const std::string& field, const v1::LaunchRecipe& recipe, const v1::TmaDescriptor& t) {
  if (FindTensor(recipe, t.tensor()) < 0) {
    return Invalid(absl::StrCat(field, ".tensor"), absl::StrCat("no tensor \"", t.tensor(), "\""));
  }
  const int rank = t.dims_size();
  if (rank < 1 || rank > kMaxTmaRank) {
    return Invalid(absl::StrCat(field, ".dims"), absl::StrCat("rank ", rank, " (1 to ", kMaxTmaRank, ")"));
  }
  if (t.strides_bytes_size() != rank - 1) {
    return Invalid(absl::StrCat(field, ".strides_bytes"),
                   absl::StrCat(t.strides_bytes_size(), " strides for rank ", rank, " (rank - 1)"));
  }
  if (t.box_size() != rank) {
    return Invalid(absl::StrCat(field, ".box"), absl::StrCat(t.box_size(), " entries for rank ", rank));
  }
  if (!t.element_strides().empty() && t.element_strides_size() != rank) {
    return Invalid(absl::StrCat(field, ".element_strides"),
                   absl::StrCat(t.element_strides_size(), " entries for rank ", rank, " (or none: all 1)"));
  }
  for (int i = 0; i < rank; ++i) {
    if (t.dims(i) == 0) return Invalid(absl::StrCat(field, ".dims[", i, "]"), "must be >= 1");
    if (t.box(i) == 0 || t.box(i) > 256) return Invalid(absl::StrCat(field, ".box[", i, "]"), "must be in 1..256");
  }
  for (int i = 0; i < t.strides_bytes_size(); ++i) {
    if (t.strides_bytes(i) % 16 != 0) {
      return Invalid(absl::StrCat(field, ".strides_bytes[", i, "]"), "must be a multiple of 16");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateMatrix(const std::string& field, const v1::LaunchRecipe& recipe, const v1::CublasLtCall::Matrix& m,
                            bool required) {
  if (m.tensor().empty()) {
    return required ? Invalid(absl::StrCat(field, ".tensor"), "missing") : absl::OkStatus();
  }
  if (FindTensor(recipe, m.tensor()) < 0) {
    return Invalid(absl::StrCat(field, ".tensor"), absl::StrCat("no tensor \"", m.tensor(), "\""));
  }
  if (m.rows() == 0 || m.cols() == 0) return Invalid(field, "rows and cols must be >= 1");
  if (m.ld() < static_cast<int64_t>(m.rows())) return Invalid(absl::StrCat(field, ".ld"), "must be >= rows");
  if (m.batch() < 0) return Invalid(absl::StrCat(field, ".batch"), "must be >= 0");
  return absl::OkStatus();
}

absl::Status ValidateCublasLtCall(const v1::LaunchRecipe& recipe) {
  if (recipe.cublaslt_algo().size() != 64) {
    return Invalid("cublaslt_algo",
                   absl::StrCat("a cuBLASLt algorithm is 64 bytes, got ", recipe.cublaslt_algo().size()));
  }
  if (!recipe.kernels().empty()) return Invalid("kernels", "a cuBLASLt recipe launches no kernels");
  const v1::CublasLtCall& call = recipe.cublaslt_call();
  constexpr uint32_t kCudaR32F = 0;  // cudaDataType_t CUDA_R_32F
  if (call.scale_type() != kCudaR32F) {
    return Invalid("cublaslt_call.scale_type", "alpha and beta are floats: only CUDA_R_32F (0)");
  }
  struct {
    const char* field;
    const v1::CublasLtCall::Matrix& m;
    bool required;
  } const matrices[] = {{"cublaslt_call.a", call.a(), true},
                        {"cublaslt_call.b", call.b(), true},
                        {"cublaslt_call.c", call.c(), false},
                        {"cublaslt_call.d", call.d(), true}};
  for (const auto& m : matrices) {
    if (absl::Status s = ValidateMatrix(m.field, recipe, m.m, m.required); !s.ok()) return s;
  }
  struct {
    const char* field;
    const std::string& tensor;
  } const pointers[] = {{"cublaslt_call.bias", call.bias()},
                        {"cublaslt_call.a_scale", call.a_scale()},
                        {"cublaslt_call.b_scale", call.b_scale()}};
  for (const auto& p : pointers) {
    if (!p.tensor.empty() && FindTensor(recipe, p.tensor) < 0) {
      return Invalid(p.field, absl::StrCat("no tensor \"", p.tensor, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKernel(const v1::LaunchRecipe& recipe, int index) {
  const v1::KernelLaunch& k = recipe.kernels(index);
  const std::string field = absl::StrCat("kernels[", index, "]");
  if (k.lowered_name().empty()) {
    return Invalid(absl::StrCat(field, ".lowered_name"), "missing (the recipe was not compiled)");
  }
  if (absl::Status s = ValidateDims(absl::StrCat(field, ".grid"), k.grid(), uint64_t{1} << 40); !s.ok()) return s;
  if (absl::Status s = ValidateDims(absl::StrCat(field, ".block"), k.block(), 1024); !s.ok()) return s;
  if (k.dynamic_smem_bytes() > kMaxDynamicSmemBytes) {
    return Invalid(absl::StrCat(field, ".dynamic_smem_bytes"), absl::StrCat("more than ", kMaxDynamicSmemBytes));
  }
  if (k.args_size() > kMaxKernelArgs) {
    return Invalid(absl::StrCat(field, ".args"), absl::StrCat("more than ", kMaxKernelArgs, " arguments"));
  }
  if (k.args_size() != k.params_size()) {
    return Invalid(absl::StrCat(field, ".args"),
                   absl::StrCat(k.args_size(), " arguments for ", k.params_size(),
                                " params (a recipe without its interface cannot be launched)"));
  }
  for (int i = 0; i < k.args_size(); ++i) {
    const v1::KernelArg& a = k.args(i);
    const std::string arg_field = absl::StrCat(field, ".args[", i, "]");
    if (!a.name().empty() && a.name() != k.params(i)) {
      return Invalid(absl::StrCat(arg_field, ".name"),
                     absl::StrCat("\"", a.name(), "\" where params has \"", k.params(i), "\""));
    }
    switch (a.value_case()) {
      case v1::KernelArg::kTensor:
        if (FindTensor(recipe, a.tensor()) < 0) {
          return Invalid(absl::StrCat(arg_field, ".tensor"), absl::StrCat("no tensor \"", a.tensor(), "\""));
        }
        break;
      case v1::KernelArg::kTma:
        if (absl::Status s = ValidateTma(absl::StrCat(arg_field, ".tma"), recipe, a.tma()); !s.ok()) return s;
        break;
      case v1::KernelArg::kI32:
      case v1::KernelArg::kI64:
      case v1::KernelArg::kF32:
        break;
      case v1::KernelArg::VALUE_NOT_SET:
        return Invalid(arg_field, "no value (tensor, i32, i64, f32 or tma)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsCublasLtRecipe(const v1::LaunchRecipe& recipe) {
  return recipe.template_id() == "cublaslt" || !recipe.cublaslt_algo().empty();
}

absl::Status ValidateLaunchRecipe(const v1::LaunchRecipe& recipe) {
  if (recipe.tensors_size() > kMaxRecipeTensors) {
    return Invalid("tensors", absl::StrCat(recipe.tensors_size(), " tensors, more than ", kMaxRecipeTensors));
  }
  if (recipe.workspace_bytes() > kMaxWorkspaceBytes) {
    return Invalid("workspace_bytes", absl::StrCat(recipe.workspace_bytes(), ", more than ", kMaxWorkspaceBytes));
  }
  absl::flat_hash_set<std::string> names;
  int workspaces = 0;
  for (int i = 0; i < recipe.tensors_size(); ++i) {
    const v1::TensorSpec& t = recipe.tensors(i);
    const std::string field = absl::StrCat("tensors[", i, "]");
    if (t.name().empty()) return Invalid(absl::StrCat(field, ".name"), "missing");
    if (!names.insert(t.name()).second) {
      return Invalid(absl::StrCat(field, ".name"), absl::StrCat("\"", t.name(), "\" names two tensors"));
    }
    if (t.alignment_bytes() != 0 && (!PowerOfTwo(t.alignment_bytes()) || t.alignment_bytes() > kMaxAlignmentBytes)) {
      return Invalid(absl::StrCat(field, ".alignment_bytes"),
                     absl::StrCat(t.alignment_bytes(), " is not a power of two up to ", kMaxAlignmentBytes));
    }
    if (t.role() == v1::ROLE_WORKSPACE) {
      if (++workspaces > 1) return Invalid(absl::StrCat(field, ".role"), "a second workspace (the launcher owns one)");
      if (t.bytes() > recipe.workspace_bytes()) {
        return Invalid(
            absl::StrCat(field, ".bytes"),
            absl::StrCat(t.bytes(), " bytes of workspace, more than workspace_bytes (", recipe.workspace_bytes(), ")"));
      }
    }
  }
  if (IsCublasLtRecipe(recipe)) return ValidateCublasLtCall(recipe);
  if (recipe.cubin().empty()) return Invalid("cubin", "missing (ask for the answer with include_cubin)");
  if (recipe.cubin().size() > kMaxCubinBytes) {
    return Invalid("cubin", absl::StrCat(recipe.cubin().size(), " bytes, more than ", kMaxCubinBytes));
  }
  if (recipe.kernels().empty()) return Invalid("kernels", "none");
  if (recipe.kernels_size() > kMaxRecipeKernels) {
    return Invalid("kernels", absl::StrCat(recipe.kernels_size(), " kernels, more than ", kMaxRecipeKernels));
  }
  for (int i = 0; i < recipe.kernels_size(); ++i) {
    if (absl::Status s = ValidateKernel(recipe, i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ktune
