#include "tuner/gemm/gemm_interface.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/recipe_interface.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/gpu/tma_descriptor.h"

namespace ktune {

absl::Status WriteGemmInterface(const v1::GemmProblem& p, LaunchRecipe* recipe) {
  const bool library = recipe->is_cublaslt_call();
  const int64_t m = p.m(), n = p.n(), k = p.k(), batch = GemmBatch(p);
  const uint32_t matrix_alignment = library ? 256 : 16;
  // Shapes outermost first; a batch leads them.
  auto shape = [&](int64_t rows, int64_t cols) {
    return batch > 1 ? std::vector<int64_t>{batch, rows, cols} : std::vector<int64_t>{rows, cols};
  };
  const ArgForParam arg_for = [&](const std::string& param) -> absl::StatusOr<v1::KernelArg> {
    if (param == "M") return I32Arg(param, static_cast<int32_t>(m));
    if (param == "N") return I32Arg(param, static_cast<int32_t>(n));
    if (param == "K") return I32Arg(param, static_cast<int32_t>(k));
    if (param == "alpha" || param == "beta") return F32Arg(param, 1.0f);
    if (param.rfind("tma_", 0) == 0) {
      absl::StatusOr<TmaTensor> tensor = GemmTmaTensor(p, param, 0, 0);
      if (!tensor.ok()) return tensor.status();
      absl::StatusOr<v1::TmaDescriptor> d = DescribeTma(*tensor, param.substr(4, 1));  // "a" or "b"
      if (!d.ok()) return d.status();
      return TmaArg(param, *std::move(d));
    }
    for (const char* tensor : {"a", "b", "c", "d", "bias", "ws", "a_scale", "b_scale"}) {
      if (param == tensor) return TensorArg(param, param);
    }
    return absl::InvalidArgumentError("not a GEMM kernel parameter");
  };
  const SpecForTensor spec_for = [&](const std::string& t) -> absl::StatusOr<v1::TensorSpec> {
    if (t == "a") return DenseTensorSpec(t, v1::ROLE_INPUT, p.a_dtype(), shape(m, k), matrix_alignment);
    if (t == "b") {
      return DenseTensorSpec(t, v1::ROLE_INPUT, p.b_dtype(), GemmBIsNK(p) ? shape(n, k) : shape(k, n),
                             matrix_alignment);
    }
    if (t == "c") {
      if (!GemmHasC(p)) return AbsentTensorSpec(t, v1::ROLE_INPUT, GemmDType(p));
      return DenseTensorSpec(t, v1::ROLE_INPUT, GemmDType(p), shape(m, n), matrix_alignment);
    }
    if (t == "d") return DenseTensorSpec(t, v1::ROLE_OUTPUT, GemmDType(p), shape(m, n), matrix_alignment);
    if (t == "bias") {
      if (!GemmHasBias(p)) return AbsentTensorSpec(t, v1::ROLE_INPUT, v1::BF16);
      return DenseTensorSpec(t, v1::ROLE_INPUT, v1::BF16, {n}, library ? 16 : 2);
    }
    if (t == "a_scale" || t == "b_scale") {
      if (!GemmIsFp8(p)) return AbsentTensorSpec(t, v1::ROLE_SCALE, v1::FP32);
      return DenseTensorSpec(t, v1::ROLE_SCALE, v1::FP32, {}, 4);
    }
    if (t == "ws") {
      if (recipe->workspace_bytes == 0) return AbsentTensorSpec(t, v1::ROLE_OUTPUT, v1::DTYPE_UNSPECIFIED);
      return WorkspaceTensorSpec(t, recipe->workspace_bytes);
    }
    return absl::InvalidArgumentError(absl::StrCat("no GEMM tensor ", t));
  };
  if (!library) return WriteInterface(arg_for, spec_for, recipe);
  // A library call: the tensors its call names, and its workspace.
  recipe->cublaslt_call = CublasLtCallFor(p);
  const v1::CublasLtCall& call = recipe->cublaslt_call;
  std::vector<std::string> named = {call.a().tensor(), call.b().tensor()};
  for (const std::string& t : {call.c().tensor(), call.d().tensor(), call.bias(), call.a_scale(), call.b_scale()}) {
    if (!t.empty()) named.push_back(t);
  }
  if (recipe->workspace_bytes > 0) named.push_back("ws");
  return WriteInterface(arg_for, spec_for, recipe, named);
}

}  // namespace ktune
