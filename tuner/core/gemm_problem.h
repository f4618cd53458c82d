// GEMM problems as the wire defines them (proto GemmProblem), checked at the
// edge: D = epilogue(alpha * A x B + beta * C) with A [M, K] row-major and B
// given as [N, K] (COL_MAJOR, the nn.Linear weight layout) or [K, N]
// (ROW_MAJOR), batch >= 1. BF16 with fp32 accumulation (D in bf16 or fp32), or
// FP8 e4m3 with per-tensor scales, a bf16 D and B as [N, K] (every fp8 kernel
// reads B K-major). An invalid problem is answered INVALID_ARGUMENT naming
// the field. Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

inline constexpr int64_t kMaxGemmDim = int64_t{1} << 20;  // M, N or K
inline constexpr int64_t kMaxGemmBatch = int64_t{1} << 16;
inline constexpr int64_t kMaxGemmElements = int64_t{1} << 34;  // of A, B or D, over the batch

// OK, or INVALID_ARGUMENT naming the first bad field ("problem.gemm.k: ...").
// batch 0 means 1; c_dtype unspecified means no C (beta = 0).
absl::Status ValidateGemmProblem(const v1::GemmProblem& problem);

// The part of ValidateGemmProblem about sizes (m, n, k, batch and the operands'
// element counts), without the dtype and layout rules: what a shape is
// checked against where ktuned's supported variants are not yet known (a
// shapes list made for several daemons).
absl::Status ValidateGemmShape(const v1::GemmProblem& problem);

// Stable text, e.g. "gemm m=128 n=4096 k=4096 batch=1 a=bf16 b=bf16 c=none d=bf16
// a_layout=row b_layout=col epilogue=none". REQUIRES: ValidateGemmProblem ok.
std::string GemmCanonicalKey(const v1::GemmProblem& problem);

// 2 * M * N * K * batch.
double GemmFlops(const v1::GemmProblem& problem);

// The problem's fields with their defaults applied (REQUIRES: valid).
inline int64_t GemmBatch(const v1::GemmProblem& p) { return p.batch() == 0 ? 1 : p.batch(); }
inline bool GemmBIsNK(const v1::GemmProblem& p) { return p.b_layout() == v1::COL_MAJOR; }  // else [K, N]
inline v1::DType GemmDType(const v1::GemmProblem& p) {
  return p.d_dtype() == v1::DTYPE_UNSPECIFIED ? v1::BF16 : p.d_dtype();
}
inline bool GemmHasC(const v1::GemmProblem& p) { return p.c_dtype() != v1::DTYPE_UNSPECIFIED; }
// fp8 e4m3 A and B (ValidateGemmProblem: both or neither).
inline bool GemmIsFp8(const v1::GemmProblem& p) { return p.a_dtype() == v1::FP8_E4M3; }
// Bias added before the activation: bias, bias + GELU, bias + SiLU.
inline bool GemmHasBias(const v1::GemmProblem& p) {
  return p.epilogue() == v1::EPILOGUE_BIAS || p.epilogue() == v1::EPILOGUE_BIAS_GELU ||
         p.epilogue() == v1::EPILOGUE_BIAS_SILU;
}
// The kernels' EPI code: 0 none, 1 bias, 2 bias + GELU (erf), 3 bias + SiLU. A
// residual add is C with beta = 1 and code 0.
inline int GemmEpilogueCode(const v1::GemmProblem& p) {
  switch (p.epilogue()) {
    case v1::EPILOGUE_BIAS:
      return 1;
    case v1::EPILOGUE_BIAS_GELU:
      return 2;
    case v1::EPILOGUE_BIAS_SILU:
      return 3;
    default:
      return 0;
  }
}

// The most K one fp32 accumulator of an fp8 product may span in our templates.
// Hopper's tensor cores add fp8 products into the accumulator at reduced
// precision (about 14 bits kept, as DeepSeek-V3's report found), so the error
// grows with K: on the H200 every fp8 wgmma config was outside the
// verification tolerance (3-4% off) at K = 8192 and 14336, and inside it at
// K = 4096 and at 14336 split four ways
// (bench/results/2026-11-29-gemm-fp8-wgmma-5ea37ac.md, run 4 at 5ea37ac). Beyond it, split K,
// or promote (CUTLASS's remedy: add into a second set of fp32 registers every
// few steps; the wgmma space's `promote`, for tiles of at most 96
// accumulators).
// Why: bench/results/decisions/fp8-promotion.md
constexpr int64_t kMaxFp8KPerAccumulator = 4096;

}  // namespace ktune
