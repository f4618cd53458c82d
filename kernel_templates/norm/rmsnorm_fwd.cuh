// RMSNorm forward, one template for every tuned variant:
//
//   rstd[i] = 1 / sqrt(mean_j(x[i, j]^2) + eps)
//   y[i, j] = x[i, j] * rstd[i] * w[j]          (w[j] = 1 without a weight)
//
// and the variants inference engines call (ktune.proto's NormProblem):
//   RESIDUAL (fused residual add): h = x + residual, added in fp32 and rounded
//     to TIn, is written back to `residual` in place and normalized instead
//     of x: y = h * rstd(h) * w. Each element of the residual is read and
//     then written by the same thread, and nothing else touches it.
//   WEIGHT_OFFSET: the weight is applied as (1 + w[j]) (Gemma).
//   TOut = e4m3: y = saturate_e4m3(h * rstd * w / *scale), the static
//     per-tensor scale read once per CTA (vLLM's rms_norm_static_fp8_quant
//     convention: the product with 1 / scale, rounded to nearest even,
//     clamped to +-448).
//
// Inputs and outputs are bf16, fp16 or fp32; the weight TW is the input's type
// or fp32 (a bf16 model with fp32 norm weights); all arithmetic is fp32. A CTA of NUM_WARPS warps handles XBLOCK rows at a
// time, THREADS / XBLOCK threads per row ("row group"); each thread touches
// CHUNKS vectors of VEC elements per pass, so one pass covers
// R_BLOCK = threads_per_row * VEC * CHUNKS elements of a row:
//
//   PERSISTENT (N <= R_BLOCK): the row stays in registers, x is read once.
//     PIPELINE == 2 (a grid of about one wave, each CTA walks many row
//     blocks): the thread's weight columns are loaded once per CTA and kept.
//     PIPELINE == 1 (a CTA per row block): the weight is loaded one vector at
//     a time as y is stored, so it holds no registers across the reduction
//     (more CTAs fit an SM; the weight is an L1/L2 hit).
//   looped (any N): pass 1 sums squares over R_BLOCK chunks, pass 2 reads the
//     chunks again (from L2 when they are still there) and writes y.
//
// X_KEEP_L2 (persistent only) loads x with an L2 evict_last policy; the host
// derives it from the row's size and the pipeline (tuner/norm/norm_space.cc).
// FULL_TILES, also derived by the host, promises M % XBLOCK == 0 and
// N % R_BLOCK == 0: every row of a row block exists and every vector of a pass
// lies inside its row, so no bounds check is compiled. Those runtime checks are
// branches, and ptxas does not hoist the x and w loads above them; without them
// a short-row kernel issues its loads first (fixed configs, +1-3% at
// 32768 x 1024: bench/results/2026-11-30-norms-gemm-6cf1718.md).
// CTAS_PER_SM is not a tuning knob either: the host derives it from the others
// (an estimate of the registers they need) and sizes pipelined grids by it;
// here it caps the registers so that many CTAs really fit on an SM.
//
// Grid: a persistent PIPELINE == 1 CTA normalizes exactly one row block, so
// its grid must be the row blocks (the host's recipe is); the grid-stride
// loop's back edge cost it 4-5% at short rows (fixed configs:
// bench/results/2026-11-30-norms-gemm-158b556.md). Every other
// variant walks row blocks in a grid-stride loop, so any grid size is correct.
// Why: bench/results/decisions/layernorm-fwd-32768x1024.md
// PIPELINE == 2 (persistent only) issues the next row block's loads before the
// current one is reduced and stored: with a grid of about one wave per SM the
// load latency is hidden inside each CTA instead of by other CTAs.
//
// Kernel arguments, in order (the recipe's `params`):
//   x         const TIn*    (M, N) row-major
//   residual  TIn*          (M, N) row-major, read and written when RESIDUAL (null otherwise)
//   w         const TW*     (N)    read only when HAS_WEIGHT (may be null otherwise)
//   y         TOut*         (M, N) row-major
//   rstd      float*        (M)    written when not null
//   scale     const float*  (1)    read only when TOut is e4m3 (null otherwise)
//   M         int           rows, >= 1
//   N         int           row length, >= 1, N % VEC == 0
//   eps       float
// REQUIRES: x, residual, w and y aligned to 16 bytes (any cudaMalloc'ed
// tensor); residual does not overlap x or y; with FULL_TILES, M % XBLOCK == 0
// and N % R_BLOCK == 0; sm_89 or newer for e4m3.
#pragma once

#include "common/dependent_launch.cuh"
#include "common/memory.cuh"
#include "common/reduce.cuh"
#include "common/types.cuh"

namespace ktune {
namespace rmsnorm_fwd_detail {

// Sum of squares of the thread's elements, two independent accumulators.
template <typename T, int VEC, int CHUNKS>
__device__ __forceinline__ float sum_squares(const Packed<T, VEC> (&v)[CHUNKS]) {
  float even = 0.0f;
  float odd = 0.0f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float f = v[c].get(i);
      if (((c * VEC + i) & 1) == 0) {
        even = fmaf(f, f, even);
      } else {
        odd = fmaf(f, f, odd);
      }
    }
  }
  return even + odd;
}

// h = x + residual in fp32, rounded to TIn: becomes the row (x), and is
// stored to the residual when the vector is inside the problem.
template <typename TIn, int VEC, int CHUNKS, int TPR, bool FULL_TILES>
__device__ __forceinline__ void add_residual(Packed<TIn, VEC> (&xv)[CHUNKS], const Packed<TIn, VEC> (&rv)[CHUNKS],
                                             TIn* res_row, bool row_ok, int lane, int n, int base) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    float h[VEC];  // (VEC) f32
#pragma unroll
    for (int i = 0; i < VEC; ++i) h[i] = xv[c].get(i) + rv[c].get(i);
    xv[c].set(h);
    const int col = base + (c * TPR + lane) * VEC;  // element column
    if (row_ok && (FULL_TILES || col < n)) store_packed(res_row + col, xv[c]);
  }
}

// y = x * r (* w, or * (1 + w)) (* out_mul for fp8), rounded to TOut and stored.
template <bool HAS_WEIGHT, bool WEIGHT_OFFSET, typename TIn, typename TW, typename TOut, int VEC>
__device__ __forceinline__ void normalize_store(const Packed<TIn, VEC>& xv,
                                                const Packed<TW, VEC>& wv, float r, float out_mul, TOut* dst) {
  float out[VEC];  // (VEC) f32
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    float v = xv.get_alt(i) * r;  // not get(): see Packed::get_alt
    if constexpr (HAS_WEIGHT) {
      float wi = wv.get(i);
      if constexpr (WEIGHT_OFFSET) wi += 1.0f;
      v *= wi;
    }
    if constexpr (IsE4m3<TOut>::value) v *= out_mul;
    out[i] = v;
  }
  Packed<TOut, VEC> yv;
  yv.set(out);
  store_packed(dst, yv);
}

}  // namespace rmsnorm_fwd_detail

template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool RESIDUAL, bool WEIGHT_OFFSET,
          int NUM_WARPS, int XBLOCK, int VEC, int CHUNKS, bool PERSISTENT, int PIPELINE, bool X_KEEP_L2,
          bool FULL_TILES, int CTAS_PER_SM>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM)
    rmsnorm_fwd(const TIn* __restrict__ x, TIn* __restrict__ residual, const TW* __restrict__ w,
                TOut* __restrict__ y, float* __restrict__ rstd, const float* __restrict__ scale, int M, int N,
                float eps) {
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
  static_assert(CHUNKS >= 1, "CHUNKS must be >= 1");
  static_assert(PIPELINE == 1 || PIPELINE == 2, "PIPELINE is 1 or 2");
  static_assert(PERSISTENT || PIPELINE == 1, "the looped variant is not pipelined");
  static_assert(PERSISTENT || !X_KEEP_L2, "X_KEEP_L2 is for the persistent variant's one read of x");
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * kThreads <= 2048, "occupancy target out of range");
  static_assert(VEC * ElementTraits<TW>::kBytes <= 32, "weight vectors are at most 32 bytes");
  static_assert(HAS_WEIGHT || !WEIGHT_OFFSET, "the weight offset needs a weight");
  using rmsnorm_fwd_detail::add_residual;
  using rmsnorm_fwd_detail::normalize_store;
  using rmsnorm_fwd_detail::sum_squares;
  using XVec = Packed<TIn, VEC>;

  __shared__ float scratch[2 * NUM_WARPS];  // (2, NUM_WARPS) f32 cross-warp partial sums

  const int row_in_block = threadIdx.x / kTpr;                   // [0, XBLOCK)
  const int lane = threadIdx.x % kTpr;                           // [0, kTpr)
  const unsigned int row_blocks = (M + XBLOCK - 1) / XBLOCK;     // row blocks in the problem
  // Approximate division: IEEE `1.0f / N` compiles to rcp.rn, whose slow-path
  // CALL splits the first basic block so the x loads cannot be hoisted above it
  // (a 2-3% loss at short rows). __fdividef is within 2 ulp for any N here.
  const float inv_n = __fdividef(1.0f, static_cast<float>(N));
  int parity = 0;  // alternates the cross-warp scratch slot
  float out_mul = 1.0f;  // 1 / scale for the fp8 output
  if constexpr (IsE4m3<TOut>::value) out_mul = 1.0f / *scale;

  if constexpr (PERSISTENT) {
    // x is read once; X_KEEP_L2 loads it with an L2 evict_last policy (see
    // common/memory.cuh for when that is faster).
    constexpr LoadHint kXHint = X_KEEP_L2 ? LoadHint::kKeepL2 : LoadHint::kOnce;
    constexpr bool kKeepWeight = PIPELINE == 2;  // else loaded as y is stored
    Packed<TW, VEC> wv[CHUNKS];  // (CHUNKS, VEC) TW, this thread's weight columns for every row
    if constexpr (HAS_WEIGHT && kKeepWeight) {
      load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(w, true, lane, N, 0, wv);
    }
    XVec xa[CHUNKS];  // (CHUNKS, VEC) TIn, the row block being normalized
    XVec xb[CHUNKS];  // (CHUNKS, VEC) TIn, the next row block (PIPELINE == 2)
    XVec res_a[CHUNKS];  // (CHUNKS, VEC) TIn, RESIDUAL: the residual of xa's rows
    XVec res_b[CHUNKS];  // (CHUNKS, VEC) TIn, RESIDUAL: the residual of xb's rows
    unsigned int rb = blockIdx.x;  // row block index
    if constexpr (PIPELINE == 2) {
      const int row = static_cast<int>(rb) * XBLOCK + row_in_block;  // [0, M + XBLOCK)
      const bool ok = rb < row_blocks && (FULL_TILES || row < M);
      load_row_chunks<kXHint, kTpr, FULL_TILES>(x + static_cast<long long>(row) * N, ok, lane, N, 0, xa);
      if constexpr (RESIDUAL) {
        load_row_chunks<kXHint, kTpr, FULL_TILES>(residual + static_cast<long long>(row) * N, ok, lane, N, 0, res_a);
      }
    }
    for (; rb < row_blocks; rb += gridDim.x) {
      const int row = static_cast<int>(rb) * XBLOCK + row_in_block;  // [0, M + XBLOCK)
      const bool row_ok = FULL_TILES || row < M;
      if constexpr (PIPELINE == 1) {
        load_row_chunks<kXHint, kTpr, FULL_TILES>(x + static_cast<long long>(row) * N, row_ok, lane, N,
                                                 0, xa);
        if constexpr (RESIDUAL) {
          load_row_chunks<kXHint, kTpr, FULL_TILES>(residual + static_cast<long long>(row) * N, row_ok, lane, N,
                                                   0, res_a);
        }
      } else {
        const unsigned int next = rb + gridDim.x;                          // next row block
        const int next_row = static_cast<int>(next) * XBLOCK + row_in_block;  // row of `next`
        const bool next_ok = next < row_blocks && (FULL_TILES || next_row < M);
        load_row_chunks<kXHint, kTpr, FULL_TILES>(x + static_cast<long long>(next_row) * N, next_ok, lane, N, 0,
                                                 xb);
        if constexpr (RESIDUAL) {
          load_row_chunks<kXHint, kTpr, FULL_TILES>(residual + static_cast<long long>(next_row) * N, next_ok, lane,
                                                   N, 0, res_b);
        }
      }
      if constexpr (RESIDUAL) {
        add_residual<TIn, VEC, CHUNKS, kTpr, FULL_TILES>(xa, res_a, residual + static_cast<long long>(row) * N, row_ok,
                                                         lane, N, 0);
      }
      float ss = sum_squares(xa);  // this thread's part of sum(x^2)
      ss = group_sum<kTpr, kThreads>(ss, scratch, parity);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_n + eps);  // rstd of `row`
      if (rstd != nullptr && lane == 0 && row_ok) rstd[row] = r;
      TOut* y_row = y + static_cast<long long>(row) * N;  // (N) TOut
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * kTpr + lane) * VEC;  // element column
        if (row_ok && (FULL_TILES || col < N)) {
          if constexpr (HAS_WEIGHT && !kKeepWeight) load_packed<LoadHint::kReuse>(w + col, wv[c]);
          normalize_store<HAS_WEIGHT, WEIGHT_OFFSET>(xa[c], wv[c], r, out_mul, y_row + col);
        }
      }
      if constexpr (PIPELINE == 2) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          xa[c] = xb[c];
          if constexpr (RESIDUAL) res_a[c] = res_b[c];
        }
      }
      if constexpr (PIPELINE == 1) break;  // one row block per CTA (see the header)
    }
  } else {
    for (unsigned int rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
      const int row = static_cast<int>(rb) * XBLOCK + row_in_block;  // [0, M + XBLOCK)
      const bool row_ok = FULL_TILES || row < M;
      const TIn* x_row = x + static_cast<long long>(row) * N;  // (N) TIn
      TIn* res_row = RESIDUAL ? residual + static_cast<long long>(row) * N : nullptr;  // (N) TIn
      float ss = 0.0f;  // this thread's part of sum(x^2)
      for (int base = 0; base < N; base += kRBlock) {
        XVec xv[CHUNKS];  // (CHUNKS, VEC) TIn; kept in L2 for pass 2
        load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(x_row, row_ok, lane, N, base, xv);
        if constexpr (RESIDUAL) {
          XVec rv[CHUNKS];  // (CHUNKS, VEC) TIn, the residual (coherent loads: this kernel rewrites it)
          load_row_chunks<LoadHint::kOnce, kTpr, FULL_TILES>(res_row, row_ok, lane, N, base, rv);
          add_residual<TIn, VEC, CHUNKS, kTpr, FULL_TILES>(xv, rv, res_row, row_ok, lane, N, base);
        }
        ss += sum_squares(xv);
      }
      ss = group_sum<kTpr, kThreads>(ss, scratch, parity);
      parity ^= 1;
      const float r = rsqrtf(ss * inv_n + eps);  // rstd of `row`
      if (rstd != nullptr && lane == 0 && row_ok) rstd[row] = r;
      TOut* y_row = y + static_cast<long long>(row) * N;  // (N) TOut
      for (int base = 0; base < N; base += kRBlock) {
        XVec xv[CHUNKS];  // (CHUNKS, VEC) TIn, last use
        Packed<TW, VEC> wv[CHUNKS];  // (CHUNKS, VEC) TW
        // Pass 2 reads h back from the residual, written by this same thread
        // in pass 1 (coherent loads, program order).
        load_row_chunks<LoadHint::kOnce, kTpr, FULL_TILES>(RESIDUAL ? res_row : x_row, row_ok, lane, N, base, xv);
        if constexpr (HAS_WEIGHT) load_row_chunks<LoadHint::kReuse, kTpr, FULL_TILES>(w, true, lane, N, base, wv);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int col = base + (c * kTpr + lane) * VEC;  // element column
          if (row_ok && (FULL_TILES || col < N)) {
            normalize_store<HAS_WEIGHT, WEIGHT_OFFSET>(xv[c], wv[c], r, out_mul, y_row + col);
          }
        }
      }
    }
  }
}

}  // namespace ktune
