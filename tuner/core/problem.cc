#include "tuner/core/problem.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/core/safe_text.h"

namespace ktune {

bool operator==(const NormProblem& a, const NormProblem& b) {
  return a.op == b.op && a.pass == b.pass && a.m == b.m && a.n == b.n && a.input_dtype == b.input_dtype &&
         a.output_dtype == b.output_dtype && a.weight_dtype == b.weight_dtype && a.has_weight == b.has_weight &&
         a.has_bias == b.has_bias && a.eps == b.eps && a.residual == b.residual && a.weight_offset == b.weight_offset &&
         a.out_scale == b.out_scale;
}

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return "bf16";
    case DType::kFP16:
      return "fp16";
    case DType::kFP32:
      return "fp32";
    case DType::kFP8E4M3:
      return "fp8e4m3";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3}) {
    if (name == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "' (expected bf16, fp16, fp32 or fp8e4m3)"));
}

int DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
    case DType::kFP16:
      return 2;
    case DType::kFP32:
      return 4;
    case DType::kFP8E4M3:
      return 1;
  }
  return 0;
}

std::string OpName(NormOp op, NormPass pass) {
  return absl::StrCat(op == NormOp::kRMSNorm ? "rmsnorm" : "layernorm", pass == NormPass::kForward ? ".fwd" : ".bwd");
}

absl::Status ParseNormOpName(absl::string_view name, NormOp* op, NormPass* pass) {
  for (NormOp o : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    for (NormPass p : {NormPass::kForward, NormPass::kBackward}) {
      if (name == OpName(o, p)) {
        *op = o;
        *pass = p;
        return absl::OkStatus();
      }
    }
  }
  if (name == "gemm") return absl::InvalidArgumentError("op 'gemm' is not a norm op");
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown op '", SafeText(name), "' (expected rmsnorm.fwd, rmsnorm.bwd, layernorm.fwd, layernorm.bwd or gemm)"));
}

absl::Status ValidateNormProblem(const NormProblem& p) {
  if (p.m < 1 || p.m > kMaxNormM) {
    return absl::InvalidArgumentError(absl::StrCat("problem.m: must be in [1, ", kMaxNormM, "], got ", p.m));
  }
  if (p.n < 1 || p.n > kMaxNormN) {
    return absl::InvalidArgumentError(absl::StrCat("problem.n: must be in [1, ", kMaxNormN, "], got ", p.n));
  }
  if (p.m * p.n > kMaxNormElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem: m * n = ", p.m * p.n, " elements exceeds the limit of ", kMaxNormElements));
  }
  for (auto [field, dtype] :
       {std::pair{"problem.input_dtype", p.input_dtype}, std::pair{"problem.weight_dtype", p.weight_dtype}}) {
    if (dtype == DType::kFP8E4M3) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": fp8e4m3 is not supported for norms (bf16, fp16, fp32)"));
    }
  }
  const bool fp8_out = p.output_dtype == DType::kFP8E4M3;
  if (fp8_out && (p.op != NormOp::kRMSNorm || p.pass != NormPass::kForward)) {
    return absl::InvalidArgumentError(
        absl::StrCat("problem.output_dtype: fp8e4m3 output is for the RMSNorm forward only (bf16, fp16 or fp32 for ",
                     OpName(p), ")"));
  }
  if (p.out_scale != 0.0f) {
    if (!fp8_out) {
      return absl::InvalidArgumentError("problem.out_scale: a scale is for fp8e4m3 output only");
    }
    if (!std::isfinite(p.out_scale) || p.out_scale < 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrFormat("problem.out_scale: must be finite and > 0 (0: 1), got %g", p.out_scale));
    }
  }
  if (!std::isfinite(p.eps) || p.eps <= 0.0f || p.eps > 1.0f) {
    return absl::InvalidArgumentError(absl::StrFormat("problem.eps: must be finite and in (0, 1], got %g", p.eps));
  }
  if (p.weight_dtype != p.input_dtype && p.weight_dtype != DType::kFP32) {
    return absl::InvalidArgumentError(absl::StrCat("problem.weight_dtype: must be the input dtype (",
                                                   DTypeName(p.input_dtype), ") or fp32, got ",
                                                   DTypeName(p.weight_dtype)));
  }
  if (p.has_bias && p.op == NormOp::kRMSNorm) {
    return absl::InvalidArgumentError("problem.has_bias: RMSNorm has no bias");
  }
  if (p.residual && p.op != NormOp::kRMSNorm) {
    return absl::InvalidArgumentError("problem.residual: the fused residual add is RMSNorm's only");
  }
  if (p.weight_offset && !p.has_weight) {
    return absl::InvalidArgumentError("problem.weight_offset: (1 + w) needs a weight (has_weight)");
  }
  return absl::OkStatus();
}

std::string CanonicalKey(const NormProblem& p) {
  // Stored keys read "%s m=%d n=%d in=%s out=%s wt=%s w=%d b=%d eps=%.9g";
  // written with StrCat (and printf for the float) because every request
  // makes one, and StrFormat took a cache hit a microsecond.
  // printf's %.9g is still most of the cost (glibc's float formatting), and
  // nearly every request carries the same eps: each thread remembers the
  // text of the last one it formatted, compared bit for bit (-0 and 0, or
  // two NaNs, print differently).
  thread_local uint32_t last_eps_bits = 0xffffffffu;  // a NaN no caller can pass: eps is validated finite
  thread_local char eps[32] = "";
  uint32_t bits;
  std::memcpy(&bits, &p.eps, sizeof(bits));
  if (bits != last_eps_bits || eps[0] == '\0') {
    std::snprintf(eps, sizeof(eps), "%.9g", static_cast<double>(p.eps));
    last_eps_bits = bits;
  }
  return absl::StrCat(OpName(p), " m=", p.m, " n=", p.n, " in=", DTypeName(p.input_dtype),
                      " out=", DTypeName(p.output_dtype), " wt=", DTypeName(p.weight_dtype),
                      " w=", p.has_weight ? 1 : 0, " b=", p.has_bias ? 1 : 0, " eps=", eps, p.residual ? " res=1" : "",
                      p.weight_offset ? " woff=1" : "");
}

int64_t MinimumBytes(const NormProblem& p) {
  const int64_t in = DTypeBytes(p.input_dtype), out = DTypeBytes(p.output_dtype);
  const int64_t w = p.has_weight ? p.n * DTypeBytes(p.weight_dtype) : 0;
  const int64_t b = p.has_bias ? p.n * DTypeBytes(p.weight_dtype) : 0;
  const int64_t residual = p.residual ? p.m * p.n * in : 0;
  // Forward: read x (and the residual), write y (and the residual).
  if (p.pass == NormPass::kForward) return p.m * p.n * (in + out) + 2 * residual + w + b;
  // Backward: read x and dy (and dresidual), write dx; read w, write dw and db.
  return p.m * p.n * (2 * in + out) + residual + 2 * w + b;
}

}  // namespace ktune
