// The reference every GEMM candidate is checked against: the same function as
// gemm_mma.cuh (D = epilogue(alpha * A x op(B) + beta * C), same layouts,
// epilogues and argument order) computed plainly in fp32 into a float D, one
// output element per thread over 16 x 16 shared-memory tiles. Simple enough
// to trust by reading; tests/gpu/gemm_gpu_test.cc also checks it against a
// float64 host reference.
//
// Kernel arguments: a, b, c, d (float*, [batch, M, N]), bias, M, N, K, alpha,
// beta. Grid (ceil(N / 16), ceil(M / 16), batch), block (16, 16).
#pragma once

#include "common/types.cuh"

namespace ktune {
namespace gemm_reference_detail {

__device__ __forceinline__ float value(bf16 v) { return bf16_bits_to_float(v.bits); }
__device__ __forceinline__ float value(float v) { return v; }

}  // namespace gemm_reference_detail

template <typename TD, bool B_NK, int EPI, bool HAS_C>
__global__ void __launch_bounds__(256)
    gemm_reference(const bf16* __restrict__ a, const bf16* __restrict__ b, const TD* __restrict__ c,
                   float* __restrict__ d, const bf16* __restrict__ bias, int M, int N, int K, float alpha,
                   float beta) {
  using gemm_reference_detail::value;
  constexpr int kTile = 16;
  __shared__ float ta[kTile][kTile];      // A[row, k]
  __shared__ float tb[kTile][kTile + 1];  // B as [k, col]
  const long long batch = blockIdx.z;
  const bf16* a_b = a + batch * M * K;
  const bf16* b_b = b + batch * static_cast<long long>(N) * K;
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
  if constexpr (HAS_C) v += beta * value(c[at]);
  if constexpr (EPI >= 1) v += value(bias[col]);
  if constexpr (EPI == 2) v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  if constexpr (EPI == 3) v = v / (1.0f + expf(-v));
  d[at] = v;
}

}  // namespace ktune
