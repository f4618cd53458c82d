// The reference every GEMM candidate is checked against: the same function as
// the candidates (D = epilogue(alpha * A x op(B) + beta * C), same layouts,
// epilogues and argument order as gemm_mma.cuh) computed plainly in fp32 into
// a float D, one output element per thread over 16 x 16 shared-memory tiles.
// Simple enough to trust by reading; tests/gpu/gemm_gpu_test.cc also checks
// the candidates it passes against a float64 host reference.
//
// A and B are bf16, or fp8 e4m3 (TAB = ktune::e4m3) with per-tensor scales:
// the product is multiplied by *a_scale * *b_scale (the scales may be null
// for bf16, meaning 1).
//
// Kernel arguments: a, b, c, d (float*, [batch, M, N]), bias (bf16), M, N, K,
// alpha, beta, a_scale, b_scale. Grid (ceil(N / 16), ceil(M / 16), batch),
// block (16, 16).
#pragma once

#include "common/types.cuh"

namespace ktune {

namespace gemm_reference_detail {

__device__ __forceinline__ float value(bf16 v) { return bf16_bits_to_float(v.bits); }
__device__ __forceinline__ float value(float v) { return v; }
__device__ __forceinline__ float value(e4m3 v) {
  const int sign = v.bits >> 7, exp = (v.bits >> 3) & 15, mant = v.bits & 7;
  if (exp == 15 && mant == 7) return __int_as_float(0x7fc00000);  // NaN
  const float mag = exp == 0 ? ldexpf(static_cast<float>(mant), -9)  // subnormal: mant / 8 * 2^-6
                             : ldexpf(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

}  // namespace gemm_reference_detail

template <typename TAB, typename TD, bool B_NK, int EPI, bool HAS_C>
__global__ void __launch_bounds__(256)
    gemm_reference(const TAB* __restrict__ a, const TAB* __restrict__ b, const TD* __restrict__ c,
                   float* __restrict__ d, const bf16* __restrict__ bias, int M, int N, int K, float alpha,
                   float beta, const float* __restrict__ a_scale, const float* __restrict__ b_scale) {
  using gemm_reference_detail::value;
  constexpr int kTile = 16;
  __shared__ float ta[kTile][kTile];      // A[row, k]
  __shared__ float tb[kTile][kTile + 1];  // B as [k, col]
  const long long batch = blockIdx.z;
  const TAB* a_b = a + batch * M * K;
  const TAB* b_b = b + batch * static_cast<long long>(N) * K;
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    const int ka = k0 + threadIdx.x;  // A: thread (y, x) loads A[row, k0 + x]
    ta[threadIdx.y][threadIdx.x] =
        row < M && ka < K ? value(a_b[static_cast<long long>(row) * K + ka]) : 0.0f;
    const int kb = k0 + threadIdx.y;  // B: thread (y, x) loads B[k0 + y, col]
    float bv = 0.0f;
    if (col < N && kb < K) {
      bv = B_NK ? value(b_b[static_cast<long long>(col) * K + kb]) : value(b_b[static_cast<long long>(kb) * N + col]);
    }
    tb[threadIdx.y][threadIdx.x] = bv;
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kTile; ++q) acc = fmaf(ta[threadIdx.y][q], tb[q][threadIdx.x], acc);
    __syncthreads();
  }
  if (row >= M || col >= N) return;
  const long long at = batch * M * static_cast<long long>(N) + static_cast<long long>(row) * N + col;
  float v = alpha * acc;
  if (a_scale != nullptr) v *= *a_scale;
  if (b_scale != nullptr) v *= *b_scale;
  if constexpr (HAS_C) v += beta * value(c[at]);
  if constexpr (EPI >= 1) v += value(bias[col]);
  if constexpr (EPI == 2) v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  if constexpr (EPI == 3) v = v / (1.0f + expf(-v));
  d[at] = v;
}

}  // namespace ktune
