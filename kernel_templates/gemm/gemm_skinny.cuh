// GEMM for a few rows of A (M <= 16: decode steps, small batches), where the
// work is streaming B once from HBM, not multiplying:
//
//   D[b] = epilogue(alpha * A[b] x B[b]^T + beta * C[b])
//
// A is [M, K], B is [N, K] (nn.Linear's weight), row-major TAB: bf16, or fp8
// e4m3 whose per-tensor scales multiply the product as alpha does; fp32
// accumulation; C and D are TD (bf16 for e4m3). A CTA owns 16 columns of D
// (16 rows of B) and its WARPS warps split K between them, so every SM
// streams B rows with 16-byte loads, UNROLL chunks of 64 bytes of K in flight
// per warp, and the warps' partial sums meet once in shared memory.
//
// The multiply runs on the tensor cores with B as the MMA's A operand (16
// rows of B x 32 bytes of K: mma.m16n8k16 for bf16, m16n8k32 for e4m3) and A
// as its B operand (MB = 8 or 16 rows of A): D^T = B x A^T. Both shapes take
// their fragments as the same 32-bit words: of A, a0/a1 hold rows g/g + 8 at
// bytes 4t..4t+3 of the step's 32 and a2/a3 the same rows at bytes 16 + 4t..;
// of B, b0 and b1 those bytes of column g. Each thread loads 16 consecutive
// bytes of K of its rows and feeds them to two MMAs under a fixed permutation
// of K: its words 2s and 2s + 1 are the words at bytes 4t and 16 + 4t of step
// s, in both operands alike, so the sum over K is unchanged while every load
// stays one aligned 16-byte access.
//
// PIPELINED keeps two rounds of loads in registers: the next round's loads are
// in flight while this round multiplies, instead of every warp waiting a full
// memory latency per round. The two rounds would take the kernel to ~250
// registers and one CTA per SM, so it is also bounded to 128 registers (512
// threads per SM). On the H200 at fixed configs
// (bench/results/2026-11-30-gemm-skinny-pipelined-fb2fcd5.md) the best
// pipelined config was 3-9% faster than the best plain one for bf16 at M = 1
// and 16, 0-5% for fp8 at M = 1, and 4-8% slower for fp8 at M = 16, so the
// tuner tries both.
// Why: bench/results/decisions/skinny-gemm.md
//
// Kernel arguments, in order: a, b, c, d, bias, M, N, K, alpha, beta, as
// kernel_templates/gemm/gemm_mma.cuh, then a_scale, b_scale (const float*,
// e4m3: the per-tensor scales; null: 1). Grid (ceil(N / 16), 1, batch),
// WARPS * 32 threads. REQUIRES: M <= MB; K * sizeof(TAB) % 16 == 0; a and b
// 16-byte aligned; sm_89 or newer for e4m3.
#pragma once

#include "common/memory.cuh"
#include "common/types.cuh"
#include "gemm/epilogue.cuh"

namespace ktune {
namespace gemm_skinny_detail {

constexpr int kChunkBytes = 64;  // of K per warp step: 4 lanes x 16 bytes

// acc += a (16 x 32 bytes of K) x b (32 bytes of K x 8), fp32 accumulators:
// m16n8k16 for bf16, m16n8k32 for e4m3.
template <typename TAB>
__device__ __forceinline__ void mma_step(float (&acc)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                                         unsigned int a3, unsigned int b0, unsigned int b1);
template <>
__device__ __forceinline__ void mma_step<bf16>(float (&acc)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                                               unsigned int a3, unsigned int b0, unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_step<e4m3>(float (&acc)[4], unsigned int a0, unsigned int a1, unsigned int a2,
                                               unsigned int a3, unsigned int b0, unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace gemm_skinny_detail

// At least 512 threads per SM for the pipelined loop (see the header).
template <int WARPS, bool PIPELINED>
constexpr int kSkinnyMinBlocks = PIPELINED && WARPS <= 8 ? 16 / WARPS : 1;

template <typename TAB, typename TD, int EPI, bool HAS_C, int MB, int WARPS, int UNROLL, bool PIPELINED>
__global__ void __launch_bounds__(WARPS * 32, (kSkinnyMinBlocks<WARPS, PIPELINED>))
    gemm_skinny(const TAB* __restrict__ a, const TAB* __restrict__ b, const TD* __restrict__ c,
                TD* __restrict__ d, const bf16* __restrict__ bias, int M, int N, int K, float alpha, float beta,
                const float* __restrict__ a_scale, const float* __restrict__ b_scale) {
  using namespace gemm_skinny_detail;
  constexpr int kChunk = kChunkBytes / static_cast<int>(sizeof(TAB));  // elements of K per warp step
  constexpr int kLoad = 16 / static_cast<int>(sizeof(TAB));             // elements per 16-byte load
  static_assert(sizeof(TAB) == 2 || sizeof(TAB) == 1, "bf16 or e4m3 operands");
  static_assert(MB == 8 || MB == 16, "8 or 16 rows of A");
  static_assert(WARPS >= 1 && WARPS <= 32 && UNROLL >= 1 && UNROLL <= 8, "1-32 warps, 1-8 chunks in flight");
  constexpr int kMmaN = MB / 8;  // n8 MMAs per k16 step (the rows of A)
  __shared__ float partial[WARPS][16][MB];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 16;
  const long long batch = blockIdx.z;
  const TAB* a_b = a + batch * M * K;
  const TAB* b_b = b + batch * static_cast<long long>(N) * K;

  // This thread's rows: of B, n0 + g and n0 + g + 8; of A, g (and g + 8).
  const bool b_row_ok[2] = {n0 + g < N, n0 + g + 8 < N};
  const bool a_row_ok[2] = {g < M, g + 8 < M};
  const TAB* b_row[2] = {b_b + static_cast<long long>(b_row_ok[0] ? n0 + g : 0) * K,
                          b_b + static_cast<long long>(b_row_ok[1] ? n0 + g + 8 : 0) * K};
  const TAB* a_row[2] = {a_b + static_cast<long long>(a_row_ok[0] ? g : 0) * K,
                          a_b + static_cast<long long>(a_row_ok[1] ? g + 8 : 0) * K};

  float acc[kMmaN][4] = {};
  const int chunks = (K + kChunk - 1) / kChunk;
  // A round: chunks first .. first + UNROLL - 1 of this warp's rows of B and
  // A, all loaded before any is multiplied. Chunks past K load as zeros.
  struct Round {
    unsigned int b[UNROLL][2][4];
    unsigned int a[UNROLL][kMmaN][4];
  };
  auto load = [&](Round& r, int first) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int k = (first + u) * kChunk + kLoad * t;
      const bool k_ok = first + u < chunks && k < K;  // K % kLoad == 0: the whole load is in
#pragma unroll
      for (int row = 0; row < 2; ++row) {
        if (k_ok && b_row_ok[row]) {
          GlobalAccess<16, LoadHint::kOnce>::load(b_row[row] + k, r.b[u][row]);
        } else {
          r.b[u][row][0] = r.b[u][row][1] = r.b[u][row][2] = r.b[u][row][3] = 0;
        }
      }
#pragma unroll
      for (int row = 0; row < kMmaN; ++row) {
        if (k_ok && a_row_ok[row]) {
          GlobalAccess<16, LoadHint::kReuse>::load(a_row[row] + k, r.a[u][row]);
        } else {
          r.a[u][row][0] = r.a[u][row][1] = r.a[u][row][2] = r.a[u][row][3] = 0;
        }
      }
    }
  };
  auto multiply = [&](const Round& r) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int row = 0; row < kMmaN; ++row) {
          mma_step<TAB>(acc[row], r.b[u][0][2 * s], r.b[u][1][2 * s], r.b[u][0][2 * s + 1], r.b[u][1][2 * s + 1],
                        r.a[u][row][2 * s], r.a[u][row][2 * s + 1]);
        }
      }
    }
  };
  // Warp w takes rounds at chunks w * UNROLL, then every WARPS * UNROLL.
  constexpr int kStride = WARPS * UNROLL;
  if constexpr (!PIPELINED) {
    for (int first = warp * UNROLL; first < chunks; first += kStride) {
      Round r;
      load(r, first);
      multiply(r);
    }
  } else {
    Round even, odd;
    int first = warp * UNROLL;
    load(even, first);
    for (; first < chunks; first += 2 * kStride) {
      load(odd, first + kStride);  // in flight while `even` multiplies
      multiply(even);
      load(even, first + 2 * kStride);
      multiply(odd);
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
  // fp8's per-tensor scales multiply the product, as alpha does.
  if (a_scale != nullptr) alpha *= *a_scale;
  if (b_scale != nullptr) alpha *= *b_scale;
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
