// The epilogue every GEMM template shares: from two fp32 accumulators of
// adjacent columns to D, through alpha, beta * C, bias and the activation.
//
//   D[row, col + e] = act(alpha * acc_e + beta * C[row, col + e] + bias[col + e])
//
// Both tensor-core fragment layouts in use (mma.sync m16n8 and wgmma m64nN)
// give a thread pairs of adjacent columns of one row, so the pair is the unit:
// one 4-byte (bf16) or 8-byte (fp32) store when N is even, scalars at an odd
// right edge (store_one: a single value, for fragments transposed against
// D). Epilogues (EPI): 0 none, 1 + bias, 2 gelu(. + bias) (erf form,
// torch's default), 3 silu(. + bias); C is read when HAS_C.
#pragma once

#include "common/types.cuh"

namespace ktune {
namespace gemm_epilogue {

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <>
__device__ __forceinline__ fp16 from_float<fp16>(float v) {
  fp16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}

template <int EPI>
__device__ __forceinline__ float activate(float v) {
  if constexpr (EPI == 2) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  if constexpr (EPI == 3) return v / (1.0f + __expf(-v));
  return v;
}

// The epilogue's values of D[row, col] and D[row, col + 1] from accumulators
// acc0, acc1; C and bias are read only inside the matrix.
template <typename TD, typename TB, int EPI, bool HAS_C>
__device__ __forceinline__ void finish_pair(const TD* c, const TB* bias, int row, int col, int M, int N, float alpha,
                                            float beta, float acc0, float acc1, float (&v)[2]) {
  static_assert(EPI >= 0 && EPI <= 3, "epilogue 0..3");
  v[0] = alpha * acc0;
  v[1] = alpha * acc1;
  if (row >= M) return;
  const long long base = static_cast<long long>(row) * N;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    if (col + e >= N) break;
    if constexpr (HAS_C) v[e] += beta * to_float(c[base + col + e]);
    if constexpr (EPI >= 1) v[e] = activate<EPI>(v[e] + to_float(bias[col + e]));
  }
}

// Two bf16 or fp16 values packed in a word, element 0 in the low half.
template <typename TD>
__device__ __forceinline__ unsigned int pack_pair(const float (&v)[2]) {
  static_assert(sizeof(TD) == 2, "16-bit outputs");
  return static_cast<unsigned int>(from_float<TD>(v[0]).bits) |
         (static_cast<unsigned int>(from_float<TD>(v[1]).bits) << 16);
}

// D[row, col] and D[row, col + 1] of the [M, N] matrix at d (C likewise at c)
// from accumulators acc0, acc1; nothing outside the matrix is read or written.
// REQUIRES: col even; d, c 8-byte aligned.
template <typename TD, typename TB, int EPI, bool HAS_C>
__device__ __forceinline__ void store_pair(TD* d, const TD* c, const TB* bias, int row, int col, int M,
                                           int N, float alpha, float beta, float acc0, float acc1) {
  if (row >= M || col >= N) return;
  float v[2];
  finish_pair<TD, TB, EPI, HAS_C>(c, bias, row, col, M, N, alpha, beta, acc0, acc1, v);
  const long long base = static_cast<long long>(row) * N;
  const bool second = col + 1 < N;
  if (second && (N % 2) == 0) {  // an aligned pair: one store
    if constexpr (sizeof(TD) == 2) {
      *reinterpret_cast<unsigned int*>(d + base + col) = pack_pair<TD>(v);
    } else {
      *reinterpret_cast<float2*>(d + base + col) = make_float2(v[0], v[1]);
    }
  } else {
    d[base + col] = from_float<TD>(v[0]);
    if (second) d[base + col + 1] = from_float<TD>(v[1]);
  }
}

// D[row, col] alone, from accumulator acc; nothing outside the matrix is
// read or written. For fragments whose pairs run down D's columns (the
// swapped wgmma tiles: the kernel computes D^T).
template <typename TD, typename TB, int EPI, bool HAS_C>
__device__ __forceinline__ void store_one(TD* d, const TD* c, const TB* bias, int row, int col, int M, int N,
                                          float alpha, float beta, float acc) {
  if (row >= M || col >= N) return;
  const long long at = static_cast<long long>(row) * N + col;
  float v = alpha * acc;
  if constexpr (HAS_C) v += beta * to_float(c[at]);
  if constexpr (EPI >= 1) v = activate<EPI>(v + to_float(bias[col]));
  d[at] = from_float<TD>(v);
}

}  // namespace gemm_epilogue
}  // namespace ktune
