// LayerNorm forward, one template for every tuned variant:
//
//   mean[i] = mean_j(x[i, j])
//   rstd[i] = 1 / sqrt(mean_j((x[i, j] - mean[i])^2) + eps)
//   y[i, j] = (x[i, j] - mean[i]) * rstd[i] * w[j] + b[j]   (w = 1, b = 0 when absent)
//
// WEIGHT_OFFSET applies the weight as (1 + w[j]) (ktune.proto's NormProblem).
//
// Inputs and outputs are bf16, fp16 or fp32; w and b are TW (the input's type
// or fp32); all arithmetic is fp32. The geometry is rmsnorm_fwd's (see there):
// XBLOCK rows per CTA at a time, THREADS / XBLOCK threads per row, CHUNKS
// vectors of VEC elements per thread and pass; X_KEEP_L2, FULL_TILES and
// CTAS_PER_SM are derived by the host.
//
// The variance is computed stably, never as E[x^2] - E[x]^2 of raw values
// (which cancels catastrophically for rows with |mean| >> std):
//   PERSISTENT: two passes over the row held in registers: the mean first,
//     then the sum of squared deviations from it. x is read once.
//   looped: pass 1 sums x - K and (x - K)^2 with the shift K = x[i, 0], a value
//     of the row (so |mean - K| is of the order of the std and nothing cancels
//     badly); pass 2 reads the row again (from L2) and writes y.
// mean and rstd (float*, either may be null) are what the backward reads.
//
// Kernel arguments, in order (the recipe's `params`):
//   x     const TIn*  (M, N) row-major
//   w     const TW*   (N)    read only when HAS_WEIGHT (may be null otherwise)
//   b     const TW*   (N)    read only when HAS_BIAS (may be null otherwise)
//   y     TOut*       (M, N) row-major
//   mean  float*      (M)    written when not null
//   rstd  float*      (M)    written when not null
//   M     int         rows, >= 1
//   N     int         row length, >= 1, N % VEC == 0
//   eps   float
// REQUIRES: x, w, b and y aligned to 16 bytes (any cudaMalloc'ed tensor); with
// FULL_TILES, M % XBLOCK == 0 and N % R_BLOCK == 0.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/memory.cuh"
#include "common/reduce.cuh"
#include "common/types.cuh"

namespace ktune {
namespace layernorm_fwd_detail {

// y = (x - mu) * r * w + b (w: or 1 + w), rounded to TOut and stored.
template <bool HAS_WEIGHT, bool HAS_BIAS, bool WEIGHT_OFFSET, typename TIn, typename TW, typename TOut, int VEC>
__device__ __forceinline__ void normalize_store(const Packed<TIn, VEC>& xv,
                                                const Packed<TW, VEC>& wv,
                                                const Packed<TW, VEC>& bv, float mu, float r,
                                                TOut* dst) {
  float out[VEC];  // (VEC) f32
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    float v = (xv.get_alt(i) - mu) * r;
    if constexpr (HAS_WEIGHT) {
      float wi = wv.get(i);
      if constexpr (WEIGHT_OFFSET) wi += 1.0f;
      v *= wi;
    }
    if constexpr (HAS_BIAS) v += bv.get(i);
    out[i] = v;
  }
  Packed<TOut, VEC> yv;
  yv.set(out);
  store_packed(dst, yv);
}

}  // namespace layernorm_fwd_detail

template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool HAS_BIAS, bool WEIGHT_OFFSET, int NUM_WARPS,
          int XBLOCK, int VEC, int CHUNKS, bool PERSISTENT, int PIPELINE, bool X_KEEP_L2, bool FULL_TILES, int CTAS_PER_SM>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM)
    layernorm_fwd(const TIn* __restrict__ x, const TW* __restrict__ w, const TW* __restrict__ b,
                  TOut* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd, int M,
                  int N, float eps) {
  constexpr int kThreads = NUM_WARPS * 32;
  // The recipe allows a programmatic dependent launch (sm_90): the kernel may
  // start before the work ahead of it in the stream has finished, so nothing
  // is read or written before the wait. Once every CTA has started, the next
  // kernel may launch; it waits for this one in turn.
  wait_for_prerequisite_grids();
  allow_dependent_grid_launch();
  constexpr int kTpr = kThreads / XBLOCK;       // threads per row
  constexpr int kRBlock = kTpr * VEC * CHUNKS;  // row elements per pass
  static_assert(NUM_WARPS >= 1 && NUM_WARPS <= 32, "NUM_WARPS must be in [1, 32]");
  static_assert(XBLOCK >= 1 && kThreads % XBLOCK == 0, "XBLOCK must divide the CTA's threads");
  static_assert((kTpr & (kTpr - 1)) == 0, "threads per row must be a power of two");
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  static_assert(VEC * ElementTraits<TIn>::kBytes <= 16, "input vectors are at most 16 bytes");
  static_assert(VEC * ElementTraits<TW>::kBytes <= 32, "weight vectors are at most 32 bytes");
  static_assert(CHUNKS >= 1, "CHUNKS must be >= 1");
  static_assert(PIPELINE == 1 || PIPELINE == 2, "PIPELINE is 1 or 2");
  static_assert(PERSISTENT || PIPELINE == 1, "the looped variant is not pipelined");
  static_assert(PERSISTENT || !X_KEEP_L2, "X_KEEP_L2 is for the persistent variant's one read of x");
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * kThreads <= 2048, "occupancy target out of range");
  static_assert(HAS_WEIGHT || !WEIGHT_OFFSET, "the weight offset needs a weight");
  using layernorm_fwd_detail::normalize_store;
  using XVec = Packed<TIn, VEC>;
  using WVec = Packed<TW, VEC>;

  __shared__ float scratch[2 * NUM_WARPS];  // (2, NUM_WARPS) f32 cross-warp partial sums

  const int row_in_block = threadIdx.x / kTpr;                // [0, XBLOCK)
  const int lane = threadIdx.x % kTpr;                        // [0, kTpr)
  const unsigned int row_blocks = (M + XBLOCK - 1) / XBLOCK;  // row blocks in the problem
  // Approximate division: IEEE `1.0f / N` compiles to rcp.rn, whose slow-path
  // CALL splits the first basic block so the x loads cannot be hoisted above it
  // (a 2-3% loss at short rows). __fdividef is within 2 ulp for any N here.
  // Why: bench/results/decisions/layernorm-fwd-32768x1024.md
  const float inv_n = __fdividef(1.0f, static_cast<float>(N));
  int parity = 0;  // alternates the cross-warp scratch slot

  if constexpr (PERSISTENT) {
    // PIPELINE == 2: w and b are kept for every row the CTA walks; PIPELINE
    // == 1 (a CTA per row block): loaded one vector at a time as y is stored,
    // holding no registers across the reductions (see rmsnorm_fwd).
    // x is read once; X_KEEP_L2 loads it with an L2 evict_last policy (see
    // common/memory.cuh for when that is faster).
    constexpr LoadHint kXHint = X_KEEP_L2 ? LoadHint::kKeepL2 : LoadHint::kOnce;
    constexpr bool kKeepParams = PIPELINE == 2;
    WVec wv[CHUNKS];  // (CHUNKS, VEC) TW, this thread's weight columns for every row
    WVec bv[CHUNKS];  // (CHUNKS, VEC) TW, this thread's bias columns for every row
    if constexpr (HAS_WEIGHT && kKeepParams) {
      load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(w, true, lane, N, 0, wv);
    }
    if constexpr (HAS_BIAS && kKeepParams) {
      load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(b, true, lane, N, 0, bv);
    }
    XVec xa[CHUNKS];  // (CHUNKS, VEC) TIn, the row block being normalized
    XVec xb[CHUNKS];  // (CHUNKS, VEC) TIn, the next row block (PIPELINE == 2)
    unsigned int rb = blockIdx.x;  // row block index
    if constexpr (PIPELINE == 2) {
      const int row = static_cast<int>(rb) * XBLOCK + row_in_block;  // [0, M + XBLOCK)
      load_row_chunks<kXHint, kTpr, FULL_TILES>(x + static_cast<long long>(row) * N,
                                               rb < row_blocks && (FULL_TILES || row < M), lane, N, 0, xa);
    }
    for (; rb < row_blocks; rb += gridDim.x) {
      const int row = static_cast<int>(rb) * XBLOCK + row_in_block;  // [0, M + XBLOCK)
      const bool row_ok = FULL_TILES || row < M;
      if constexpr (PIPELINE == 1) {
        load_row_chunks<kXHint, kTpr, FULL_TILES>(x + static_cast<long long>(row) * N, row_ok, lane, N,
                                                 0, xa);
      } else {
        const unsigned int next = rb + gridDim.x;                             // next row block
        const int next_row = static_cast<int>(next) * XBLOCK + row_in_block;  // row of `next`
        load_row_chunks<kXHint, kTpr, FULL_TILES>(x + static_cast<long long>(next_row) * N,
                                                 next < row_blocks && (FULL_TILES || next_row < M), lane, N, 0, xb);
      }
      // Pass 1: the mean (padding vectors are zero and add nothing).
      float s = 0.0f;  // this thread's part of sum(x)
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) s += xa[c].get(i);
      }
      s = group_sum<kTpr, kThreads>(s, scratch, parity);
      parity ^= 1;
      const float mu = s * inv_n;  // mean of `row`
      // Pass 2: squared deviations, over the row's own columns only.
      float ss = 0.0f;  // this thread's part of sum((x - mu)^2)
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * kTpr + lane) * VEC;  // element column
        if (FULL_TILES || col < N) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = xa[c].get_alt2(i) - mu;  // a conversion of its own: see types.cuh
            ss = fmaf(d, d, ss);
          }
        }
      }
      ss = group_sum<kTpr, kThreads>(ss, scratch, parity);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_n + eps);  // rstd of `row`
      if (lane == 0 && row_ok) {
        if (mean != nullptr) mean[row] = mu;
        if (rstd != nullptr) rstd[row] = r;
      }
      TOut* y_row = y + static_cast<long long>(row) * N;  // (N) TOut
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * kTpr + lane) * VEC;  // element column
        if (row_ok && (FULL_TILES || col < N)) {
          if constexpr (HAS_WEIGHT && !kKeepParams) load_packed<LoadHint::kReuse>(w + col, wv[c]);
          if constexpr (HAS_BIAS && !kKeepParams) load_packed<LoadHint::kReuse>(b + col, bv[c]);
          normalize_store<HAS_WEIGHT, HAS_BIAS, WEIGHT_OFFSET>(xa[c], wv[c], bv[c], mu, r, y_row + col);
        }
      }
      if constexpr (PIPELINE == 2) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) xa[c] = xb[c];
      }
      if constexpr (PIPELINE == 1) break;  // one row block per CTA (see the header)
    }
  } else {
    for (unsigned int rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
      const int row = static_cast<int>(rb) * XBLOCK + row_in_block;  // [0, M + XBLOCK)
      const bool row_ok = FULL_TILES || row < M;
      const TIn* x_row = x + static_cast<long long>(row) * N;  // (N) TIn
      // The shift: the row's first element (every thread of the row reads it).
      float shift = 0.0f;
      if (row_ok) {
        Packed<TIn, 1> first;
        load_packed<LoadHint::kReuse>(x_row, first);
        shift = first.get(0);
      }
      float s1 = 0.0f;  // this thread's part of sum(x - K)
      float s2 = 0.0f;  // this thread's part of sum((x - K)^2)
      for (int base = 0; base < N; base += kRBlock) {
        XVec xv[CHUNKS];  // (CHUNKS, VEC) TIn; kept in L2 for pass 2
        load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(x_row, row_ok, lane, N, base, xv);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int col = base + (c * kTpr + lane) * VEC;  // element column
          if (FULL_TILES || col < N) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              const float d = xv[c].get(i) - shift;
              s1 += d;
              s2 = fmaf(d, d, s2);
            }
          }
        }
      }
      s1 = group_sum<kTpr, kThreads>(s1, scratch, parity);
      parity ^= 1;
      s2 = group_sum<kTpr, kThreads>(s2, scratch, parity);
      parity ^= 1;
      const float d_mean = s1 * inv_n;                               // mean - K
      const float var = fmaxf(s2 * inv_n - d_mean * d_mean, 0.0f);  // biased variance
      const float mu = shift + d_mean;                               // mean of `row`
      const float r = rsqrtf(var + eps);                             // rstd of `row`
      if (lane == 0 && row_ok) {
        if (mean != nullptr) mean[row] = mu;
        if (rstd != nullptr) rstd[row] = r;
      }
      TOut* y_row = y + static_cast<long long>(row) * N;  // (N) TOut
      for (int base = 0; base < N; base += kRBlock) {
        XVec xv[CHUNKS];  // (CHUNKS, VEC) TIn, last use
        WVec wv[CHUNKS];  // (CHUNKS, VEC) TW
        WVec bv[CHUNKS];  // (CHUNKS, VEC) TW
        load_row_chunks<LoadHint::kOnce, kTpr, FULL_TILES>(x_row, row_ok, lane, N, base, xv);
        if constexpr (HAS_WEIGHT) load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(w, true, lane, N, base, wv);
        if constexpr (HAS_BIAS) load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(b, true, lane, N, base, bv);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int col = base + (c * kTpr + lane) * VEC;  // element column
          if (row_ok && (FULL_TILES || col < N)) {
            normalize_store<HAS_WEIGHT, HAS_BIAS, WEIGHT_OFFSET>(xv[c], wv[c], bv[c], mu, r, y_row + col);
          }
        }
      }
    }
  }
}

}  // namespace ktune
