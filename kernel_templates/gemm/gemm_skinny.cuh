// GEMM for a few rows of A (M <= 16: decode steps, small batches), where the
// work is streaming B once from HBM, not multiplying:
//
//   D[b] = epilogue(alpha * A[b] x B[b]^T + beta * C[b])
//
// A is [M, K], B is [N, K] (nn.Linear's weight), row-major bf16; fp32
// accumulation; C and D are TD. A CTA owns 16 columns of D (16 rows of B) and
// its WARPS warps split K between them, so every SM streams B rows with
// 16-byte loads, UNROLL chunks of 32 K in flight per warp, and the warps'
// partial sums meet once in shared memory.
//
// The multiply runs on the tensor cores with B as mma.m16n8k16's A operand
// (16 rows of B x 16 of K) and A as its B operand (MB = 8 or 16 rows of A):
// D^T = B x A^T. Each thread loads 8 consecutive K of its rows (16 bytes) and
// feeds them to two k16 MMAs under a fixed permutation of K: thread t's
// elements 4s + {0,1} and 4s + {2,3} of its chunk are the MMA's k = 2t + {0,1}
// and 2t + 8 + {0,1} of step s, in both operands alike, so the sum over K is
// unchanged while every load stays one aligned 16-byte access.
//
// Kernel arguments, in order: a, b, c, d, bias, M, N, K, alpha, beta, as
// kernel_templates/gemm/gemm_mma.cuh. Grid (ceil(N / 16), 1, batch), WARPS * 32
// threads. REQUIRES: M <= MB; K % 8 == 0; a and b 16-byte aligned.
#pragma once

#include "common/memory.cuh"
#include "common/types.cuh"
#include "gemm/epilogue.cuh"

namespace ktune {
namespace gemm_skinny_detail {

constexpr int kChunk = 32;  // K per warp step: 4 lanes x 8 elements

// acc += a (16 x 16) x b (16 x 8), bf16 in, fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&acc)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                                         unsigned int a3, unsigned int b0, unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace gemm_skinny_detail

template <typename TD, int EPI, bool HAS_C, int MB, int WARPS, int UNROLL>
__global__ void __launch_bounds__(WARPS * 32, 1)
    gemm_skinny(const bf16* __restrict__ a, const bf16* __restrict__ b, const TD* __restrict__ c,
                TD* __restrict__ d, const bf16* __restrict__ bias, int M, int N, int K, float alpha, float beta) {
  using namespace gemm_skinny_detail;
  static_assert(MB == 8 || MB == 16, "8 or 16 rows of A");
  static_assert(WARPS >= 1 && WARPS <= 32 && UNROLL >= 1 && UNROLL <= 8, "1-32 warps, 1-8 chunks in flight");
  constexpr int kMmaN = MB / 8;  // n8 MMAs per k16 step (the rows of A)
  __shared__ float partial[WARPS][16][MB];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 16;
  const long long batch = blockIdx.z;
  const bf16* a_b = a + batch * M * K;
  const bf16* b_b = b + batch * static_cast<long long>(N) * K;

  // This thread's rows: of B, n0 + g and n0 + g + 8; of A, g (and g + 8).
  const bool b_row_ok[2] = {n0 + g < N, n0 + g + 8 < N};
  const bool a_row_ok[2] = {g < M, g + 8 < M};
  const bf16* b_row[2] = {b_b + static_cast<long long>(b_row_ok[0] ? n0 + g : 0) * K,
                          b_b + static_cast<long long>(b_row_ok[1] ? n0 + g + 8 : 0) * K};
  const bf16* a_row[2] = {a_b + static_cast<long long>(a_row_ok[0] ? g : 0) * K,
                          a_b + static_cast<long long>(a_row_ok[1] ? g + 8 : 0) * K};

  float acc[kMmaN][4] = {};
  const int chunks = (K + kChunk - 1) / kChunk;
  for (int first = warp * UNROLL; first < chunks; first += WARPS * UNROLL) {
    unsigned int bw[UNROLL][2][4], aw[UNROLL][kMmaN][4];
    // Every load of the step first, then the MMAs.
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int k = (first + u) * kChunk + 8 * t;
      const bool k_ok = first + u < chunks && k < K;  // K % 8 == 0: the whole 8 are in
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (k_ok && b_row_ok[r]) {
          GlobalAccess<16, LoadHint::kOnce>::load(b_row[r] + k, bw[u][r]);
        } else {
          bw[u][r][0] = bw[u][r][1] = bw[u][r][2] = bw[u][r][3] = 0;
        }
      }
#pragma unroll
      for (int r = 0; r < kMmaN; ++r) {
        if (k_ok && a_row_ok[r]) {
          GlobalAccess<16, LoadHint::kReuse>::load(a_row[r] + k, aw[u][r]);
        } else {
          aw[u][r][0] = aw[u][r][1] = aw[u][r][2] = aw[u][r][3] = 0;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int r = 0; r < kMmaN; ++r) {
          mma16816(acc[r], bw[u][0][2 * s], bw[u][1][2 * s], bw[u][0][2 * s + 1], bw[u][1][2 * s + 1],
                   aw[u][r][2 * s], aw[u][r][2 * s + 1]);
        }
      }
    }
  }

  // acc[r]: rows (of D^T) n = g, g + 8; columns m = 8r + 2t + {0, 1}.
#pragma unroll
  for (int r = 0; r < kMmaN; ++r) {
    partial[warp][g][8 * r + 2 * t] = acc[r][0];
    partial[warp][g][8 * r + 2 * t + 1] = acc[r][1];
    partial[warp][g + 8][8 * r + 2 * t] = acc[r][2];
    partial[warp][g + 8][8 * r + 2 * t + 1] = acc[r][3];
  }
  __syncthreads();
  // One thread per pair of adjacent columns of D (n, n + 1) and row m.
  for (int i = threadIdx.x; i < 8 * MB; i += WARPS * 32) {
    const int m = i / 8, n = 2 * (i % 8);
    float v0 = 0.0f, v1 = 0.0f;
#pragma unroll 4
    for (int w = 0; w < WARPS; ++w) {
      v0 += partial[w][n][m];
      v1 += partial[w][n + 1][m];
    }
    const long long d_off = batch * M * static_cast<long long>(N);
    gemm_epilogue::store_pair<TD, bf16, EPI, HAS_C>(d + d_off, c + d_off, bias, m, n0 + n, M, N, alpha, beta, v0,
                                                    v1);
  }
}

}  // namespace ktune
