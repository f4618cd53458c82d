// GEMM on tensor cores through mma.sync (sm_80 and later), one template for
// every tuned variant:
//
//   D[b] = epilogue(alpha * A[b] x op(B[b]) + beta * C[b])
//
// A is [M, K] row-major; B is [N, K] (B_NK, the nn.Linear weight layout:
// D = A x B^T) or [K, N] row-major; T is bf16 or fp16, accumulation fp32, D and
// C are TD (T or float). Batches are contiguous (A[b] = A + b * M * K, ...),
// one per gridDim.z.
//
// Tiling: a CTA computes a BM x BN tile of D with WARPS_M x WARPS_N warps, each
// a (BM / WARPS_M) x (BN / WARPS_N) warp tile of m16n8k16 MMAs. K advances BK
// at a time through a ring of STAGES shared-memory stages filled by cp.async
// (16-byte copies, zero-filled outside the matrix), so STAGES - 1 tiles are in
// flight while one is multiplied. Shared-memory rows are stored as 16-byte
// chunks XOR-swizzled by row, so the ldmatrix reads of 8 rows hit 8 different
// bank groups. CTAs are rasterised in groups of GROUP_M tile rows (consecutive
// CTAs share B tiles in L2).
//
// Split-K (SPLIT_K > 1, for problems whose tiles alone leave SMs idle): the
// grid's y is the split; split s multiplies K tiles [s * kt / SPLIT_K,
// (s + 1) * kt / SPLIT_K) of the kt = ceil(K / BK) (every split has at least
// one when kt >= SPLIT_K). Each split writes its fp32 accumulators to the
// workspace in fragment order (every split of a tile has the same
// thread-to-fragment map, so no layout change), then counts itself in on the
// tile's counter; the split that arrives last adds the others' partials and
// runs the epilogue, and sets the counter back to 0 for the next launch. One
// workspace serves one launch at a time. The sum's order depends on which
// split arrives last, so D may differ in its last bits from run to run. A
// fixed order, reading this CTA's own partial back, spilled: 4 bytes at 128
// accumulators (64 x 256 on four warps), and 8 bytes even at 64 (64 x 128,
// BK 64, with a GELU or SiLU epilogue), in the compile checks when split-K
// was added here (1da3e05). The wgmma
// template, whose consumers have 232 registers for 128 accumulators, sums in
// split order.
//
// C, when HAS_C, is added as beta * C before the epilogue; a residual add is
// C with beta = 1. Epilogues (EPI): 0 none, 1 + bias[n], 2 gelu(. + bias[n])
// (erf form, torch's default), 3 silu(. + bias[n]).
//
// Kernel arguments, in order (the recipe's `params`):
//   a         const T*   [batch, M, K]
//   b         const T*   [batch, N, K] (B_NK) or [batch, K, N]
//   c         const TD*  [batch, M, N], read when HAS_C (may be null otherwise)
//   d         TD*        [batch, M, N]
//   bias      const T*   [N], read when EPI > 0 (may be null otherwise)
//   M, N, K   int
//   alpha, beta  float
//   ws        unsigned char*  SPLIT_K > 1: the workspace (null otherwise):
//             (batch, tiles, SPLIT_K, BM * BN) f32 partials, then (batch, tiles)
//             u32 counters, zeroed before the first launch
// REQUIRES: K % 8 == 0 (16-byte rows of A and of B_NK); N % 8 == 0 when B is
// [K, N]; every pointer 16-byte aligned; dynamic shared memory of
// STAGES * (BM + BN) * BK * sizeof(T) bytes.
#pragma once

#include "common/types.cuh"
#include "gemm/epilogue.cuh"

namespace ktune {
namespace gemm_mma_detail {

// Physical 16-byte chunk of logical chunk `chunk` in shared-memory row `row`
// of a tile whose rows hold CPR chunks. Any 8 consecutive rows read at one
// logical chunk land in 8 different 16-byte bank groups (one 128-byte line
// holds 128 / (16 * CPR) rows).
template <int CPR>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(CPR == 2 || CPR == 4 || CPR >= 8, "rows of 2, 4 or >= 8 chunks");
  if constexpr (CPR >= 8) {
    return chunk ^ (row & 7);
  } else if constexpr (CPR == 4) {
    return chunk ^ ((row >> 1) & 3);
  } else {
    return chunk ^ ((row >> 2) & 1);
  }
}

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned int (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned int (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// acc += a (16x16, row) x b (16x8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma16816(float (&acc)[4], const unsigned int (&a)[4],
                                         unsigned int b0, unsigned int b1);
template <>
__device__ __forceinline__ void mma16816<bf16>(float (&acc)[4], const unsigned int (&a)[4],
                                               unsigned int b0, unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<fp16>(float (&acc)[4], const unsigned int (&a)[4],
                                               unsigned int b0, unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Split-K, after a CTA's main loop (see the header): `acc` is this thread's
// fragment of split `split`'s partial sum of tile `slot` (of `slots` in the
// launch). Returns true in the CTA of the last split to arrive, with `acc` now
// the sum over every split: that CTA runs the epilogue. `arrival` is one word
// of shared memory no thread still reads.
// REQUIRES: every thread of the CTA calls it.
template <int MMA_M, int MMA_N, int THREADS, int SPLIT_K>
__device__ __forceinline__ bool reduce_split_k(float (&acc)[MMA_M][MMA_N][4], unsigned char* ws,
                                               unsigned int* arrival, long long slot, long long slots,
                                               int split) {
  constexpr int kTileFloats = MMA_M * MMA_N * 4 * THREADS;  // BM * BN
  float* partials = reinterpret_cast<float*>(ws);
  unsigned int* counters = reinterpret_cast<unsigned int*>(ws + slots * SPLIT_K * kTileFloats * sizeof(float));
  // (MMA_M * MMA_N, THREADS) float4: a warp's store is 512 contiguous bytes.
  auto at = [&](int s, int i, int j) {
    return reinterpret_cast<float4*>(partials + (slot * SPLIT_K + s) * kTileFloats) + (i * MMA_N + j) * THREADS +
           threadIdx.x;
  };
#pragma unroll
  for (int i = 0; i < MMA_M; ++i) {
#pragma unroll
    for (int j = 0; j < MMA_N; ++j) *at(split, i, j) = make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]);
  }
  __threadfence();  // the partial is visible before the split counts in
  __syncthreads();
  if (threadIdx.x == 0) *arrival = atomicAdd(&counters[slot], 1u);
  __syncthreads();
  if (*arrival != SPLIT_K - 1) return false;
  __threadfence();  // see every other split's partial
#pragma unroll 1
  for (int s = 0; s < SPLIT_K; ++s) {
    if (s == split) continue;
#pragma unroll
    for (int i = 0; i < MMA_M; ++i) {
#pragma unroll
      for (int j = 0; j < MMA_N; ++j) {
        const float4 v = __ldcg(at(s, i, j));  // L2: written by other SMs
        acc[i][j][0] += v.x;
        acc[i][j][1] += v.y;
        acc[i][j][2] += v.z;
        acc[i][j][3] += v.w;
      }
    }
  }
  if (threadIdx.x == 0) counters[slot] = 0u;  // ready for the next launch
  return true;
}

}  // namespace gemm_mma_detail

template <typename T, typename TD, bool B_NK, int EPI, bool HAS_C, int BM, int BN, int BK,
          int WARPS_M, int WARPS_N, int STAGES, int GROUP_M, int SPLIT_K>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32)
    gemm_mma(const T* __restrict__ a, const T* __restrict__ b, const TD* __restrict__ c,
             TD* __restrict__ d, const T* __restrict__ bias, int M, int N, int K, float alpha,
             float beta, unsigned char* __restrict__ ws) {
  using namespace gemm_mma_detail;
  using gemm_epilogue::store_pair;
  constexpr int kThreads = WARPS_M * WARPS_N * 32;
  constexpr int kWarpM = BM / WARPS_M;  // warp tile rows
  constexpr int kWarpN = BN / WARPS_N;  // warp tile columns
  constexpr int kMmaM = kWarpM / 16;    // m16 tiles per warp
  constexpr int kMmaN = kWarpN / 8;     // n8 tiles per warp
  constexpr int kChunk = 8;             // elements per 16-byte chunk
  constexpr int kCprA = BK / kChunk;    // chunks per row of an A (and B_NK) tile
  constexpr int kCprB = B_NK ? kCprA : BN / kChunk;
  constexpr int kTileA = BM * BK;  // elements of one A stage
  constexpr int kTileB = BN * BK;  // elements of one B stage
  static_assert(sizeof(T) == 2, "T is bf16 or fp16");
  static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0,
                "warp tiles are multiples of 16 x 16");
  static_assert(BK % 16 == 0 && BK >= 16, "BK is a multiple of 16");
  static_assert(STAGES >= 2, "at least double buffering");
  static_assert((BM * kCprA) % kThreads == 0 && (BN * BK / kChunk) % kThreads == 0,
                "every thread copies whole chunks of each tile");
  static_assert(EPI >= 0 && EPI <= 3, "epilogue 0..3");
  static_assert(SPLIT_K >= 1, "SPLIT_K >= 1");

  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem_a = reinterpret_cast<T*>(smem_raw);  // (STAGES, BM, BK) T, swizzled chunks
  T* smem_b = smem_a + STAGES * kTileA;        // (STAGES, BN, BK) or (STAGES, BK, BN) T

  // Grouped rasterisation of the tile grid.
  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x;
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (pid / per_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int tile_m = first_m + (pid % per_group) % group_rows;
  const int tile_n = (pid % per_group) / group_rows;
  const int m0 = tile_m * BM;
  const int n0 = tile_n * BN;

  const long long batch = blockIdx.z;
  const T* a_b = a + batch * M * K;                   // [M, K]
  const T* b_b = b + batch * static_cast<long long>(N) * K;  // [N, K] or [K, N]

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int warp_m = warp / WARPS_N;  // [0, WARPS_M)
  const int warp_n = warp % WARPS_N;  // [0, WARPS_N)

  // Copies k-tile `kt` into stage `stage`: chunks outside A, B are zeros.
  auto load_tile = [&](int kt, int stage) {
    const int k0 = kt * BK;
    T* sa = smem_a + stage * kTileA;
#pragma unroll
    for (int it = 0; it < BM * kCprA / kThreads; ++it) {
      const int i = static_cast<int>(threadIdx.x) + it * kThreads;  // chunk of the tile
      const int row = i / kCprA, chunk = i % kCprA;
      const int gm = m0 + row, gk = k0 + chunk * kChunk;
      const bool ok = gm < M && gk < K;
      cp_async16(sa + row * BK + swizzle<kCprA>(row, chunk) * kChunk,
                 ok ? a_b + static_cast<long long>(gm) * K + gk : a_b, ok);
    }
    T* sb = smem_b + stage * kTileB;
    if constexpr (B_NK) {
#pragma unroll
      for (int it = 0; it < BN * kCprB / kThreads; ++it) {
        const int i = static_cast<int>(threadIdx.x) + it * kThreads;
        const int row = i / kCprB, chunk = i % kCprB;
        const int gn = n0 + row, gk = k0 + chunk * kChunk;
        const bool ok = gn < N && gk < K;
        cp_async16(sb + row * BK + swizzle<kCprB>(row, chunk) * kChunk,
                   ok ? b_b + static_cast<long long>(gn) * K + gk : b_b, ok);
      }
    } else {
#pragma unroll
      for (int it = 0; it < BK * kCprB / kThreads; ++it) {
        const int i = static_cast<int>(threadIdx.x) + it * kThreads;
        const int row = i / kCprB, chunk = i % kCprB;  // row: k, chunk: 8 columns of n
        const int gk = k0 + row, gn = n0 + chunk * kChunk;
        const bool ok = gk < K && gn < N;
        cp_async16(sb + row * BN + swizzle<kCprB>(row, chunk) * kChunk,
                   ok ? b_b + static_cast<long long>(gk) * N + gn : b_b, ok);
      }
    }
  };

  float acc[kMmaM][kMmaN][4];  // (kMmaM, kMmaN, 4) f32, the warp tile
#pragma unroll
  for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;
    }
  }

  // This CTA's K tiles: [k_first, k_first + k_tiles) of the problem's.
  const int k_total = (K + BK - 1) / BK;
  const int split = SPLIT_K > 1 ? static_cast<int>(blockIdx.y) : 0;
  const int k_first = split * k_total / SPLIT_K;
  const int k_tiles = (split + 1) * k_total / SPLIT_K - k_first;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_tile(k_first + s, s);
    cp_async_commit();  // empty groups keep the count uniform
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies)
    __syncthreads();              // everyone's copies; stage kt - 1 is free
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load_tile(k_first + next, next % STAGES);
    cp_async_commit();

    const T* sa = smem_a + (kt % STAGES) * kTileA;
    const T* sb = smem_b + (kt % STAGES) * kTileB;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned int af[kMmaM][4];  // A fragments, one 16 x 16 per m tile
#pragma unroll
      for (int i = 0; i < kMmaM; ++i) {
        const int row = warp_m * kWarpM + i * 16 + lane % 16;
        const int chunk = kk * 2 + lane / 16;
        ldmatrix_x4(af[i], sa + row * BK + swizzle<kCprA>(row, chunk) * kChunk);
      }
      unsigned int bf[kMmaN][2];  // B fragments, one k16 x n8 per n tile
#pragma unroll
      for (int j = 0; j < kMmaN; j += 2) {
        unsigned int r[4];
        if constexpr (B_NK) {
          // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
          const int row = warp_n * kWarpN + j * 8 + lane % 8 + (lane / 16) * 8;
          const int chunk = kk * 2 + (lane / 8) % 2;
          ldmatrix_x4(r, sb + row * BK + swizzle<kCprB>(row, chunk) * kChunk);
        } else {
          // stored [k][n]; transposed: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), ...
          const int row = kk * 16 + lane % 8 + ((lane / 8) % 2) * 8;
          const int chunk = (warp_n * kWarpN + j * 8) / kChunk + lane / 16;
          ldmatrix_x4_trans(r, sb + row * BN + swizzle<kCprB>(row, chunk) * kChunk);
        }
        bf[j][0] = r[0];
        bf[j][1] = r[1];
        if (j + 1 < kMmaN) {
          bf[j + 1][0] = r[2];
          bf[j + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
        for (int j = 0; j < kMmaN; ++j) mma16816<T>(acc[i][j], af[i], bf[j][0], bf[j][1]);
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (SPLIT_K > 1) {
    // The ring is free once every thread has passed reduce_split_k's first
    // barrier: its first word holds the arrival count.
    const long long slot = batch * gridDim.x + blockIdx.x;
    if (!reduce_split_k<kMmaM, kMmaN, kThreads, SPLIT_K>(acc, ws, reinterpret_cast<unsigned int*>(smem_raw), slot,
                                                         static_cast<long long>(gridDim.x) * gridDim.z, split)) {
      return;  // another split of this tile finishes it
    }
  }

  // Epilogue straight from the accumulators: thread (g = lane / 4, t = lane % 4)
  // holds rows g and g + 8, columns 2t and 2t + 1 of each m16n8 tile.
  const long long d_off = batch * M * static_cast<long long>(N);
#pragma unroll
  for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) {
      const int col = n0 + warp_n * kWarpN + j * 8 + (lane % 4) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + warp_m * kWarpM + i * 16 + lane / 4 + h * 8;
        store_pair<TD, T, EPI, HAS_C>(d + d_off, c + d_off, bias, row, col, M, N, alpha, beta,
                                      acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
    }
  }
}

}  // namespace ktune
