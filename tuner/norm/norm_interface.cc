#include "tuner/norm/norm_interface.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "tuner/core/recipe_interface.h"
#include "tuner/core/wire.h"

namespace ktune {

absl::Status WriteNormInterface(const NormProblem& p, const NormInterfaceFacts& facts, LaunchRecipe* recipe) {
  const bool fwd = p.pass == NormPass::kForward;
  const bool ln = p.op == NormOp::kLayerNorm;
  const v1::DType in = DTypeToProto(p.input_dtype), out = DTypeToProto(p.output_dtype),
                  wt = DTypeToProto(p.weight_dtype);
  const int64_t m = p.m, n = p.n;
  const int parts = fwd ? 0 : (p.has_weight ? 1 : 0) + (ln && p.has_bias ? 1 : 0);
  auto vector_bytes = [&](v1::DType d) { return static_cast<uint32_t>(facts.vec * ElementBytes(d)); };
  const uint32_t row_alignment = std::max(vector_bytes(in), facts.min_row_alignment);

  const ArgForParam arg_for = [&](const std::string& param) -> absl::StatusOr<v1::KernelArg> {
    if (param == "M") return I32Arg(param, static_cast<int32_t>(m));
    if (param == "N") return I32Arg(param, static_cast<int32_t>(n));
    if (param == "P") return I32Arg(param, static_cast<int32_t>(facts.partial_rows));
    if (param == "eps") return F32Arg(param, p.eps);
    for (const char* tensor :
         {"x", "dy", "w", "b", "y", "dx", "mean", "rstd", "ws", "dw", "db", "residual", "dresidual", "scale"}) {
      if (param == tensor) return TensorArg(param, param);
    }
    return absl::InvalidArgumentError("not a norm kernel parameter");
  };
  const SpecForTensor spec_for = [&](const std::string& t) -> absl::StatusOr<v1::TensorSpec> {
    if (t == "x" || t == "dy") return DenseTensorSpec(t, v1::ROLE_INPUT, in, {m, n}, row_alignment);
    if (t == "y" || t == "dx") return DenseTensorSpec(t, v1::ROLE_OUTPUT, out, {m, n}, vector_bytes(out));
    if (t == "residual" || t == "dresidual") {
      // Forward: read and written in place (h = x + residual); backward: the
      // gradient of h from the residual stream, read.
      const bool present = p.residual && (t == "residual") == fwd;
      const v1::TensorRole role = t == "residual" ? v1::ROLE_INPUT_OUTPUT : v1::ROLE_INPUT;
      if (!present) return AbsentTensorSpec(t, role, in);
      return DenseTensorSpec(t, role, in, {m, n}, vector_bytes(in));
    }
    if (t == "scale") {  // fp8 output: y = saturate(norm * w / scale), one fp32 read at launch
      if (p.output_dtype != DType::kFP8E4M3) return AbsentTensorSpec(t, v1::ROLE_SCALE, v1::FP32);
      return DenseTensorSpec(t, v1::ROLE_SCALE, v1::FP32, {}, 4);
    }
    if (t == "w" || t == "b") {
      const bool present = t == "w" ? p.has_weight : ln && p.has_bias;
      if (!present) return AbsentTensorSpec(t, v1::ROLE_INPUT, wt);
      return DenseTensorSpec(t, v1::ROLE_INPUT, wt, {n}, vector_bytes(wt));
    }
    if (t == "mean" || t == "rstd") {
      if (t == "mean" && !ln) return AbsentTensorSpec(t, fwd ? v1::ROLE_OUTPUT : v1::ROLE_INPUT, v1::FP32);
      // Forward statistics are written only where the caller binds them.
      v1::TensorSpec s = DenseTensorSpec(t, fwd ? v1::ROLE_OUTPUT : v1::ROLE_INPUT, v1::FP32, {m}, 4);
      s.set_optional(fwd);
      return s;
    }
    if (t == "ws") {
      if (recipe->workspace_bytes == 0) return AbsentTensorSpec(t, v1::ROLE_OUTPUT, v1::FP32);
      return WorkspaceTensorSpec(t, recipe->workspace_bytes, v1::FP32, {parts, facts.partial_rows, n});
    }
    if (t == "dw" || t == "db") {
      const bool present = t == "dw" ? p.has_weight : ln && p.has_bias;
      if (!present) return AbsentTensorSpec(t, v1::ROLE_OUTPUT, wt);
      return DenseTensorSpec(t, v1::ROLE_OUTPUT, wt, {n}, static_cast<uint32_t>(ElementBytes(wt)));
    }
    return absl::InvalidArgumentError(absl::StrCat("no norm tensor ", t));
  };
  return WriteInterface(arg_for, spec_for, recipe);
}

}  // namespace ktune
