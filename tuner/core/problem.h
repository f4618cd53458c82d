// Problems ktune tunes, as plain domain values, and their validation.
//
// A NormProblem is what a caller asks about; it is validated once at the edge
// (ValidateNormProblem) and is then trusted by the rest of the tuner. Canonical
// keys are stable text: they are stored in the cache and compared across
// processes and machines, so changing their format needs a schema migration.
// Thread-safe: values and pure functions only.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ktune {

enum class DType { kBF16, kFP16, kFP32, kFP8E4M3 };
enum class NormOp { kRMSNorm, kLayerNorm };
enum class NormPass { kForward, kBackward };

// Bounds on what a request may ask for. They keep a single request's device
// memory (inputs rotated past L2 for timing) and host reference cost bounded.
inline constexpr int64_t kMaxNormM = int64_t{1} << 24;         // 16M rows
inline constexpr int64_t kMaxNormN = int64_t{1} << 18;         // 262144
inline constexpr int64_t kMaxNormElements = int64_t{1} << 31;  // M * N

inline constexpr float kDefaultNormEps = 1e-6f;

struct NormProblem {
  NormOp op = NormOp::kRMSNorm;
  NormPass pass = NormPass::kForward;
  int64_t m = 0;
  int64_t n = 0;
  DType input_dtype = DType::kBF16;
  DType output_dtype = DType::kBF16;  // y (forward) or dx (backward)
  DType weight_dtype = DType::kBF16;  // w and b; the input dtype or fp32 (dw and db likewise)
  bool has_weight = true;
  bool has_bias = false;
  float eps = kDefaultNormEps;
  // The variants (ktune.proto's NormProblem has their full contract); the
  // defaults are the plain norm, whose canonical key does not mention them.
  bool residual = false;       // RMSNorm: fused residual add, in place on the residual
  bool weight_offset = false;  // multiply by (1 + w): Gemma
  // fp8 e4m3 output only: the static per-tensor scale the tuner verifies with
  // (y = saturate(norm(x) * w / scale)); 0 means 1. Not part of the key: the
  // kernel reads the scale from a pointer at launch.
  float out_scale = 0.0f;
};

// The scale a problem's fp8 output is verified with: out_scale, or 1 when unset.
inline float VerifyScale(const NormProblem& p) { return p.out_scale == 0.0f ? 1.0f : p.out_scale; }

bool operator==(const NormProblem& a, const NormProblem& b);

// "bf16", "fp16", "fp32", "fp8e4m3".
std::string DTypeName(DType dtype);
absl::StatusOr<DType> ParseDType(absl::string_view name);
int DTypeBytes(DType dtype);

// "rmsnorm.fwd", "rmsnorm.bwd", "layernorm.fwd", "layernorm.bwd".
std::string OpName(NormOp op, NormPass pass);
inline std::string OpName(const NormProblem& p) { return OpName(p.op, p.pass); }
// Parses an op name as above; "gemm" is reported as not a norm op.
absl::Status ParseNormOpName(absl::string_view name, NormOp* op, NormPass* pass);

// OK, or INVALID_ARGUMENT naming the first field that is out of range or
// unsupported (dtypes other than bf16/fp16/fp32, a weight dtype other than the
// input's or fp32, a bias on RMSNorm; fp8e4m3 output other than on the
// RMSNorm forward, an out_scale that is not finite and > 0 or without fp8
// output, a residual on LayerNorm, a weight offset without a weight).
absl::Status ValidateNormProblem(const NormProblem& problem);

// Stable text identifying the problem, e.g.
// "rmsnorm.fwd m=4096 n=4096 in=bf16 out=bf16 wt=bf16 w=1 b=0 eps=1e-06";
// the variants append " res=1" and " woff=1" when set (so the plain
// problem's key is what it was before they existed); out_scale is not in it.
std::string CanonicalKey(const NormProblem& problem);

// The fewest bytes the op must move through device memory. Forward: read x,
// w, b; write y. Backward: read x, dy, w; write dx, dw, db (the saved mean and
// rstd, M floats each, are not counted). Throughput is reported against this.
int64_t MinimumBytes(const NormProblem& problem);

}  // namespace ktune
