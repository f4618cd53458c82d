// The fused norm backward (RMSNorm and LayerNorm share it; norm/rmsnorm_bwd.cuh
// and norm/layernorm_bwd.cuh are the entry points) and the small kernel that
// sums its per-CTA weight-gradient partials. In the style of
// MixOrderReduction: one pass over x and dy computes, for each row, dx (an
// inner reduction over N) and, for each column, a partial dw and db (an outer
// reduction over the CTA's rows) held in fp32 registers.
//
//   xhat = (x - mean) * rstd               (RMSNorm: mean = 0)
//   g    = dy * w                          (w = 1 without a weight)
//   dx   = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))   (RMSNorm: no mean_j(g) term)
//   dw   = sum_i dy * xhat,  db = sum_i dy
//
// The variants (ktune.proto's NormProblem):
//   WEIGHT_OFFSET: the forward applied (1 + w), so g = dy * (1 + w); dw is
//     the same sum (d(1 + w)/dw = 1).
//   RESIDUAL (RMSNorm; the forward was h = x + residual, y = norm(h) * w):
//     x here is h, and dres (M, N) TIn is the gradient that reached h from
//     its other use, the residual stream. The gradient of h is the sum of
//     both paths, dh = dx_norm + dres, and since h = x + residual it is the
//     gradient of x and of the old residual alike: dx = dx_norm + dres, one
//     tensor for both. dres is read once, as dx is stored.
//
// CTA c walks rows [c * SPLIT_SIZE, min(M, (c + 1) * SPLIT_SIZE)), XBLOCK rows
// at a time (geometry as in rmsnorm_fwd: THREADS / XBLOCK threads per row,
// CHUNKS vectors of VEC per thread and pass), and writes its partial sums to
// row c of the fp32 workspace:
//
//   ws  (PARTS, P, N) f32, P = ceil(M / SPLIT_SIZE) (CLUSTER > 1: gridDim.x /
//       CLUSTER, below); part 0 is dw when
//       HAS_WEIGHT, the next is db when HAS_BIAS. Without either, no workspace.
//
//   PERSISTENT: the row block in registers, x and dy read once; PIPELINE == 2
//     loads the next row block (and its saved mean/rstd) before this one is
//     reduced. Row groups of one CTA own the same columns; their partials are
//     added through shared memory once at the end.
//   PREFETCH_L2 (PERSISTENT, PIPELINE == 1, sm_90): as each row block is
//     loaded, one thread asks the bulk-copy engine to prefetch the next one's
//     x and dy into L2 (two instructions, no registers), so the next loads
//     wait on L2, not DRAM. Where registers allow one or two CTAs per SM
//     (long LayerNorm rows with shared-memory partials) this is the only
//     pipelining there is room for; the host decides (norm_space.cc).
//   SMEM_PARTIALS (PERSISTENT, XBLOCK == 1): the same, but the fp32 partials
//     live in dynamic shared memory instead of registers, so long rows (LayerNorm
//     N >= 8192: x, dy, w and two partials per element do not fit 255
//     registers, or 64 at 1024 threads) still read x and dy once. Each thread
//     owns its slots (no barriers); the layout is (PARTS, CHUNKS, VEC / kW,
//     THREADS) vectors of kW = min(VEC, 4) floats, so a warp's access is one
//     contiguous 512-byte run (no bank conflicts). Shared-memory traffic is
//     4 * PARTS * 2 bytes per element, well under what an SM serves.
//   CLUSTER > 1 (PERSISTENT, XBLOCK == 1, sm_90; the *_bwd_cluster entry
//     points): CLUSTER CTAs of a thread-block cluster add up their partials
//     through distributed shared memory before any of them leaves, so the
//     workspace holds one row per cluster, not per CTA: P = gridDim.x /
//     CLUSTER, and the grid is padded to a multiple of CLUSTER (a CTA past M
//     contributes zeros). Each CTA stages its partials in the SMEM_PARTIALS
//     layout (they are there already with SMEM_PARTIALS), the cluster
//     synchronizes, and CTA rank r sums every CLUSTER-th of each thread's
//     vectors over ranks 0..CLUSTER-1 in order (deterministic) and stores the
//     sum. The workspace round trip (written, then read by the reduce kernel)
//     shrinks CLUSTER-fold: at 16384 x 8192 and SPLIT_SIZE 64 from 8 MiB each
//     way to 2 at CLUSTER 4, about 1.5% of the op's bytes. On the H200 the
//     clustered kernels ran at 0.60-1.03x the same config without a cluster
//     (bench/results/2026-11-30-wgmma-kn-norm-clusters-c3fea25.md), so the
//     tuner offers them only in its unpruned space
//     (tuner/norm/norm_space.cc has the measurement).
//     Why: bench/results/decisions/norm-bwd-clusters.md
//   DIRECT_GRADS (PERSISTENT; the *_bwd_single_cta and *_bwd_single_cluster
//     entry points): the grid is one CTA that walks every row (SPLIT_SIZE >=
//     M), or one cluster whose CTAs together do (CLUSTER * SPLIT_SIZE >= M),
//     so the partials, summed over the cluster, are the whole sums: the
//     kernel writes dw and db itself (grad_w, grad_b), converted to TW, and
//     the recipe has no workspace and no reduce kernel. For the few rows of a
//     decode step the second launch cost more than the sums
//     (bench/results/2026-12-07-norm-issue34-h100-03cafc9.md: a 1 x 4096
//     backward read 3.4 us where an empty launch reads 0.6); one cluster
//     spreads the rows over up to 8 SMs where one CTA would walk them alone
//     (a split grid with the reduce still beat one CTA at 16 x 4096,
//     bench/results/2026-12-07-norm-issue34-h100-a4086b4.md).
//     The stores are one element each: dw and db keep the element alignment
//     every recipe states for them.
//   looped (XBLOCK == 1, any N): pass 1 over R_BLOCK chunks forms the row sums,
//     pass 2 reads the row again (from L2) and writes dx; the partials then
//     cannot live in registers and are accumulated in the CTA's own workspace
//     row (the same thread always owns a column, so no atomics).
#pragma once

#include "common/cluster.cuh"
#include "common/dependent_launch.cuh"
#include "common/memory.cuh"
#include "common/reduce.cuh"
#include "common/types.cuh"

namespace ktune {
namespace norm_bwd_detail {

// The saved statistics of `row` (0 for rows outside the split, which makes
// their xhat, and so every contribution, zero).
template <bool LN>
__device__ __forceinline__ void load_stats(const float* mean, const float* rstd, int row,
                                           bool row_ok, float* mu, float* r) {
  *mu = 0.0f;
  *r = 0.0f;
  if (row_ok) {
    Packed<float, 1> v;
    load_packed<LoadHint::kReuse>(rstd + row, v);
    *r = v.get(0);
    if constexpr (LN) {
      load_packed<LoadHint::kReuse>(mean + row, v);
      *mu = v.get(0);
    }
  }
}

// This thread's parts of sum_j(g * xhat) and (LayerNorm) sum_j(g).
template <bool LN, bool HAS_WEIGHT, bool WEIGHT_OFFSET, typename TIn, typename TW, int VEC, int CHUNKS>
__device__ __forceinline__ void row_sums(const Packed<TIn, VEC> (&xv)[CHUNKS],
                                         const Packed<TIn, VEC> (&dv)[CHUNKS],
                                         const Packed<TW, VEC> (&wv)[CHUNKS], float mu, float r,
                                         float* sgx, float* sg) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float xh = (xv[c].get(i) - mu) * r;
      float g = dv[c].get(i);
      if constexpr (HAS_WEIGHT) g *= WEIGHT_OFFSET ? 1.0f + wv[c].get(i) : wv[c].get(i);
      *sgx = fmaf(g, xh, *sgx);
      if constexpr (LN) *sg += g;
    }
  }
}

// dx of one vector (plus dres's, RESIDUAL), stored; adds dy * xhat and dy to
// the column partials. Uses get_alt so ptxas does not merge these conversions
// with row_sums'.
template <bool HAS_WEIGHT, bool WEIGHT_OFFSET, bool RESIDUAL, bool ACC_W, bool ACC_B, typename TIn, typename TW,
          typename TOut, int VEC>
__device__ __forceinline__ void dx_store_accumulate(const Packed<TIn, VEC>& xv,
                                                    const Packed<TIn, VEC>& dv,
                                                    const Packed<TW, VEC>& wv, float mu, float r,
                                                    float c1, float c2, const TIn* dres_src, TOut* dst,
                                                    float (&acc_w)[VEC], float (&acc_b)[VEC]) {
  Packed<TIn, VEC> rv;  // (VEC) TIn, RESIDUAL: this vector's dres
  if constexpr (RESIDUAL) load_packed<LoadHint::kOnce>(dres_src, rv);
  float out[VEC];  // (VEC) f32 dx
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    const float xh = (xv.get_alt(i) - mu) * r;
    const float d = dv.get_alt(i);
    float g = d;
    if constexpr (HAS_WEIGHT) g *= WEIGHT_OFFSET ? 1.0f + wv.get_alt(i) : wv.get_alt(i);
    out[i] = r * (g - c2 - xh * c1);
    if constexpr (RESIDUAL) out[i] += rv.get(i);
    if constexpr (ACC_W) acc_w[i] = fmaf(d, xh, acc_w[i]);
    if constexpr (ACC_B) acc_b[i] += d;
  }
  Packed<TOut, VEC> o;
  o.set(out);
  store_packed(dst, o);
}

// This thread's VEC partials of one (part, chunk) slot of the SMEM_PARTIALS
// layout: `slot` points at the slot's (VEC / kW, THREADS) vectors.
template <int VEC, int THREADS>
__device__ __forceinline__ void smem_partials_load(const float* slot, float (&a)[VEC]) {
  constexpr int kW = VEC < 4 ? VEC : 4;  // floats per access
#pragma unroll
  for (int q = 0; q < VEC / kW; ++q) {
    const float* p = slot + (q * THREADS + static_cast<int>(threadIdx.x)) * kW;
    if constexpr (kW == 4) {
      const float4 v = *reinterpret_cast<const float4*>(p);
      a[4 * q] = v.x;
      a[4 * q + 1] = v.y;
      a[4 * q + 2] = v.z;
      a[4 * q + 3] = v.w;
    } else if constexpr (kW == 2) {
      const float2 v = *reinterpret_cast<const float2*>(p);
      a[2 * q] = v.x;
      a[2 * q + 1] = v.y;
    } else {
      a[q] = *p;
    }
  }
}

template <int VEC, int THREADS>
__device__ __forceinline__ void smem_partials_store(float* slot, const float (&a)[VEC]) {
  constexpr int kW = VEC < 4 ? VEC : 4;  // floats per access
#pragma unroll
  for (int q = 0; q < VEC / kW; ++q) {
    float* p = slot + (q * THREADS + static_cast<int>(threadIdx.x)) * kW;
    if constexpr (kW == 4) {
      *reinterpret_cast<float4*>(p) = make_float4(a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]);
    } else if constexpr (kW == 2) {
      *reinterpret_cast<float2*>(p) = make_float2(a[2 * q], a[2 * q + 1]);
    } else {
      *p = a[q];
    }
  }
}

// Adds kW floats at `local` (this CTA's shared memory) as CTA `rank` of the
// cluster holds them at the same offset.
template <int kW>
__device__ __forceinline__ void add_from_cluster_rank(const float* local, unsigned int rank, float (&sum)[kW]) {
  const unsigned int remote = map_shared_rank(local, rank);
  float v[4];
  if constexpr (kW == 4) {
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "r"(remote)
                 : "memory");
  } else if constexpr (kW == 2) {
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v[0]), "=f"(v[1]) : "r"(remote) : "memory");
  } else {
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v[0]) : "r"(remote) : "memory");
  }
#pragma unroll
  for (int i = 0; i < kW; ++i) sum[i] += v[i];
}

// One gradient element, converted to TW.
template <typename TW>
__device__ __forceinline__ void store_grad_element(TW* dst, float value) {
  float one[1] = {value};
  Packed<TW, 1> v;
  v.set(one);
  store_packed(dst, v);
}

// This thread's VEC column sums at `col`: as fp32 partials into the CTA's
// workspace row, or (DIRECT_GRADS: they are the whole sums) as the gradient
// itself: one vector where the gradient is aligned for it (a fresh
// allocation is), else one element at a time (the recipe promises dw and db
// only element alignment: a caller's may be a view into a flat buffer). The
// test is the same for every thread of the grid, so no warp diverges.
template <bool DIRECT_GRADS, int VEC, typename TW>
__device__ __forceinline__ void store_partials(const float (&a)[VEC], float* ws_row, TW* grad, int col) {
  if constexpr (DIRECT_GRADS) {
    constexpr int kBytes = Packed<TW, VEC>::kBytes;
    constexpr unsigned long long kAlign = kBytes < 16 ? kBytes : 16;  // 32 bytes go as two 16-byte stores
    TW* dst = grad + col;
    if (reinterpret_cast<unsigned long long>(dst) % kAlign == 0) {
      Packed<TW, VEC> v;
      v.set(a);
      store_packed(dst, v);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) store_grad_element(dst + i, a[i]);
    }
  } else {
    Packed<float, VEC> v;
    v.set(a);
    store_packed(ws_row + col, v);
  }
}

// CLUSTER > 1: the cluster's partials, summed over its CTAs, into this
// cluster's workspace rows, or (DIRECT_GRADS: the grid is this one cluster)
// into the gradients, grads[part]. `slots` are this CTA's (PARTS, CHUNKS,
// VEC / kW, THREADS) staged vectors (the SMEM_PARTIALS layout), complete on
// every CTA of the cluster (the caller's cluster_sync). Rank r takes every
// CLUSTER-th of this thread's PARTS * CHUNKS * VEC / kW vectors.
template <int CLUSTER, int PARTS, int CHUNKS, int VEC, int THREADS, bool DIRECT_GRADS, typename TW>
__device__ __forceinline__ void cluster_sum_partials(const float* slots, float* ws_row, long long part_stride,
                                                     TW* const (&grads)[2], int N) {
  constexpr int kW = VEC < 4 ? VEC : 4;  // floats per access
  constexpr int kPerChunk = VEC / kW;    // vectors per chunk
  constexpr int kSlot = VEC * THREADS;   // floats of one (part, chunk) slot
  const unsigned int rank = cluster_rank();
#pragma unroll
  for (int v = 0; v < PARTS * CHUNKS * kPerChunk; ++v) {
    if (v % CLUSTER != static_cast<int>(rank)) continue;
    const int part = v / (CHUNKS * kPerChunk);
    const int c = v / kPerChunk % CHUNKS;
    const int q = v % kPerChunk;
    const int col = (c * THREADS + static_cast<int>(threadIdx.x)) * VEC + q * kW;  // element column
    if (col >= N) continue;  // N % VEC == 0: a vector is all in or all out
    const float* local = slots + (part * CHUNKS + c) * kSlot + (q * THREADS + static_cast<int>(threadIdx.x)) * kW;
    float sum[kW];
#pragma unroll
    for (int i = 0; i < kW; ++i) sum[i] = 0.0f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) add_from_cluster_rank<kW>(local, r, sum);
    store_partials<DIRECT_GRADS>(sum, DIRECT_GRADS ? nullptr : ws_row + part * part_stride, grads[part], col);
  }
}

template <bool LN, typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool HAS_BIAS,
          int NUM_WARPS, int XBLOCK, int VEC, int CHUNKS, bool PERSISTENT, int PIPELINE,
          int SPLIT_SIZE, bool SMEM_PARTIALS, bool PREFETCH_L2, bool WEIGHT_OFFSET, bool RESIDUAL,
          int CLUSTER = 1, bool DIRECT_GRADS = false>
__device__ __forceinline__ void fused_bwd(const TIn* __restrict__ x, const TIn* __restrict__ dy,
                                          const TIn* __restrict__ dres, const TW* __restrict__ w,
                                          const float* __restrict__ mean,
                                          const float* __restrict__ rstd, TOut* __restrict__ dx,
                                          float* __restrict__ ws, int M, int N,
                                          TW* __restrict__ grad_w = nullptr, TW* __restrict__ grad_b = nullptr) {
  constexpr int kThreads = NUM_WARPS * 32;
  constexpr int kTpr = kThreads / XBLOCK;       // threads per row
  constexpr int kRBlock = kTpr * VEC * CHUNKS;  // row elements per pass
  constexpr bool kAccW = HAS_WEIGHT;            // dw partials exist
  constexpr bool kAccB = LN && HAS_BIAS;        // db partials exist
  static_assert(NUM_WARPS >= 1 && NUM_WARPS <= 32, "NUM_WARPS must be in [1, 32]");
  static_assert(XBLOCK >= 1 && kThreads % XBLOCK == 0, "XBLOCK must divide the CTA's threads");
  static_assert((kTpr & (kTpr - 1)) == 0, "threads per row must be a power of two");
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  static_assert(VEC * ElementTraits<TIn>::kBytes <= 16, "input vectors are at most 16 bytes");
  static_assert(VEC * ElementTraits<TW>::kBytes <= 32, "weight vectors are at most 32 bytes");
  static_assert(CHUNKS >= 1, "CHUNKS must be >= 1");
  static_assert(PIPELINE == 1 || PIPELINE == 2, "PIPELINE is 1 or 2");
  static_assert(PERSISTENT || (PIPELINE == 1 && XBLOCK == 1),
                "the looped variant is one row at a time, not pipelined");
  static_assert(!PREFETCH_L2 || (PERSISTENT && PIPELINE == 1),
                "the L2 prefetch is the persistent, unpipelined variant's");
  static_assert(SPLIT_SIZE >= 1 && SPLIT_SIZE % XBLOCK == 0,
                "SPLIT_SIZE must be a multiple of XBLOCK");
  static_assert(LN || !HAS_BIAS, "RMSNorm has no bias");
  static_assert(HAS_WEIGHT || !WEIGHT_OFFSET, "the weight offset needs a weight");
  static_assert(!SMEM_PARTIALS || (PERSISTENT && XBLOCK == 1 && (kAccW || kAccB)),
                "shared-memory partials are for persistent, one-row-per-CTA kernels with partials");
  static_assert(CLUSTER == 1 || (PERSISTENT && XBLOCK == 1 && (kAccW || kAccB) && CLUSTER <= 8 &&
                                 (CLUSTER & (CLUSTER - 1)) == 0),
                "clusters of 2, 4 or 8 sum the partials of persistent, one-row-per-CTA kernels");
  static_assert(!DIRECT_GRADS || (PERSISTENT && (kAccW || kAccB)),
                "one CTA or cluster writing dw and db itself is persistent and has partials");
  using XVec = Packed<TIn, VEC>;
  using WVec = Packed<TW, VEC>;

  // The recipe allows a programmatic dependent launch (sm_90): the kernel may
  // start before the work ahead of it in the stream has finished (the
  // previous call's reduce may still read the workspace), so nothing is read
  // or written before the wait.
  wait_for_prerequisite_grids();

  __shared__ float scratch[2 * NUM_WARPS];  // (2, NUM_WARPS) f32 cross-warp partial sums
  // SMEM_PARTIALS: (PARTS, CHUNKS, VEC, kThreads) f32, the launch's dynamic
  // shared memory (the host sizes it; see the layout at the top).
  extern __shared__ __align__(16) float smem_partials[];
  constexpr int kSlot = VEC * kThreads;  // floats of one (part, chunk) slot
  float* smem_w = smem_partials;                              // dw slots, CHUNKS of them
  float* smem_b = smem_partials + (kAccW ? CHUNKS * kSlot : 0);  // db slots

  const int row_in_block = threadIdx.x / kTpr;                           // [0, XBLOCK)
  const int lane = threadIdx.x % kTpr;                                   // [0, kTpr)
  const int row_begin = static_cast<int>(blockIdx.x) * SPLIT_SIZE;       // first row of the split
  const int row_end = min(M, row_begin + SPLIT_SIZE);                    // one past its last
  const long long parts_rows =                                           // P
      CLUSTER > 1 ? static_cast<long long>(gridDim.x) / CLUSTER : (M + SPLIT_SIZE - 1) / SPLIT_SIZE;
  // (N) f32 dw and db partials of this CTA; DIRECT_GRADS has no workspace.
  float* ws_w = DIRECT_GRADS ? nullptr : ws + static_cast<long long>(blockIdx.x / CLUSTER) * N;
  float* ws_b = DIRECT_GRADS ? nullptr : ws_w + (kAccW ? parts_rows * N : 0);
  const float inv_n = 1.0f / static_cast<float>(N);
  int parity = 0;  // alternates the cross-warp scratch slot

  if constexpr (PERSISTENT) {
    WVec wv[CHUNKS];  // (CHUNKS, VEC) TW, this thread's weight columns for every row
    if constexpr (HAS_WEIGHT) load_row_chunks<LoadHint::kReuse, kTpr>(w, true, lane, N, 0, wv);
    constexpr int kAccChunks = SMEM_PARTIALS ? 1 : CHUNKS;  // chunks of partials in registers
    float acc_w[kAccChunks][VEC];  // (kAccChunks, VEC) f32 partial dw of this thread's columns
    float acc_b[kAccChunks][VEC];  // (kAccChunks, VEC) f32 partial db
#pragma unroll
    for (int c = 0; c < kAccChunks; ++c) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        acc_w[c][i] = 0.0f;
        acc_b[c][i] = 0.0f;
      }
    }
    if constexpr (SMEM_PARTIALS) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {  // this thread's own slots only: no barrier
        if constexpr (kAccW) smem_partials_store<VEC, kThreads>(smem_w + c * kSlot, acc_w[0]);
        if constexpr (kAccB) smem_partials_store<VEC, kThreads>(smem_b + c * kSlot, acc_b[0]);
      }
    }
    XVec xa[CHUNKS], da[CHUNKS];  // (CHUNKS, VEC) TIn, x and dy of the row block at hand
    XVec xb[CHUNKS], db[CHUNKS];  // (CHUNKS, VEC) TIn, the next row block (PIPELINE == 2)
    float mu_a, r_a, mu_b, r_b;   // saved mean / rstd of those rows
    if constexpr (PIPELINE == 2) {
      const int row = row_begin + row_in_block;  // [row_begin, row_begin + XBLOCK)
      const bool ok = row < row_end;
      load_row_chunks<LoadHint::kOnce, kTpr>(x + static_cast<long long>(row) * N, ok, lane, N, 0, xa);
      load_row_chunks<LoadHint::kOnce, kTpr>(dy + static_cast<long long>(row) * N, ok, lane, N, 0,
                                               da);
      load_stats<LN>(mean, rstd, row, ok, &mu_a, &r_a);
    }
    for (int r0 = row_begin; r0 < row_end; r0 += XBLOCK) {
      const int row = r0 + row_in_block;  // [r0, r0 + XBLOCK)
      const bool row_ok = row < row_end;
      if constexpr (PIPELINE == 1) {
        load_row_chunks<LoadHint::kOnce, kTpr>(x + static_cast<long long>(row) * N, row_ok, lane, N,
                                                 0, xa);
        load_row_chunks<LoadHint::kOnce, kTpr>(dy + static_cast<long long>(row) * N, row_ok, lane,
                                                 N, 0, da);
        load_stats<LN>(mean, rstd, row, row_ok, &mu_a, &r_a);
        const int next = r0 + XBLOCK;  // the next row block's first row
        if (PREFETCH_L2 && threadIdx.x == 0 && next < row_end) {
          const long long first = static_cast<long long>(next) * N;  // its first element
          const unsigned int bytes =
              static_cast<unsigned int>(min(XBLOCK, row_end - next)) * N * ElementTraits<TIn>::kBytes;
          prefetch_l2_bulk(x + first, bytes);
          prefetch_l2_bulk(dy + first, bytes);
        }
      } else {
        const int next = row + XBLOCK;  // this row group's row in the next block
        const bool next_ok = next < row_end;
        load_row_chunks<LoadHint::kOnce, kTpr>(x + static_cast<long long>(next) * N, next_ok, lane,
                                                 N, 0, xb);
        load_row_chunks<LoadHint::kOnce, kTpr>(dy + static_cast<long long>(next) * N, next_ok, lane,
                                                 N, 0, db);
        load_stats<LN>(mean, rstd, next, next_ok, &mu_b, &r_b);
      }
      float sgx = 0.0f;  // this thread's part of sum_j(g * xhat)
      float sg = 0.0f;   // this thread's part of sum_j(g) (LayerNorm)
      row_sums<LN, HAS_WEIGHT, WEIGHT_OFFSET>(xa, da, wv, mu_a, r_a, &sgx, &sg);
      sgx = group_sum<kTpr, kThreads>(sgx, scratch, parity);
      parity ^= 1;
      if constexpr (LN) {
        sg = group_sum<kTpr, kThreads>(sg, scratch, parity);
        parity ^= 1;
      }
      const float c1 = sgx * inv_n;  // mean_j(g * xhat)
      const float c2 = sg * inv_n;   // mean_j(g), 0 for RMSNorm
      TOut* dx_row = dx + static_cast<long long>(row) * N;  // (N) TOut
      const TIn* dres_row = RESIDUAL ? dres + static_cast<long long>(row) * N : nullptr;  // (N) TIn
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * kTpr + lane) * VEC;  // element column
        if (row_ok && col < N) {
          if constexpr (SMEM_PARTIALS) {
            float aw[VEC], ab[VEC];  // (VEC) f32 this vector's partials, from shared memory
            if constexpr (kAccW) smem_partials_load<VEC, kThreads>(smem_w + c * kSlot, aw);
            if constexpr (kAccB) smem_partials_load<VEC, kThreads>(smem_b + c * kSlot, ab);
            dx_store_accumulate<HAS_WEIGHT, WEIGHT_OFFSET, RESIDUAL, kAccW, kAccB>(
                xa[c], da[c], wv[c], mu_a, r_a, c1, c2, dres_row + col, dx_row + col, aw, ab);
            if constexpr (kAccW) smem_partials_store<VEC, kThreads>(smem_w + c * kSlot, aw);
            if constexpr (kAccB) smem_partials_store<VEC, kThreads>(smem_b + c * kSlot, ab);
          } else {
            dx_store_accumulate<HAS_WEIGHT, WEIGHT_OFFSET, RESIDUAL, kAccW, kAccB>(
                xa[c], da[c], wv[c], mu_a, r_a, c1, c2, dres_row + col, dx_row + col, acc_w[c], acc_b[c]);
          }
        }
      }
      if constexpr (PIPELINE == 2) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          xa[c] = xb[c];
          da[c] = db[c];
        }
        mu_a = mu_b;
        r_a = r_b;
      }
    }

    // The rows are done; what is left is short. The reduce kernel may launch
    // now (programmatic dependent launch; it waits for this grid's results).
    allow_dependent_grid_launch();

    // The CTA's partials. In a cluster: staged in shared memory and summed
    // over the cluster. One row group: straight from registers. Several:
    // chunk by chunk through shared memory, each column summed over the groups.
    if constexpr (CLUSTER > 1) {
      if constexpr (!SMEM_PARTIALS) {
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {  // this thread's own slots: no barrier
          if constexpr (kAccW) smem_partials_store<VEC, kThreads>(smem_w + c * kSlot, acc_w[c]);
          if constexpr (kAccB) smem_partials_store<VEC, kThreads>(smem_b + c * kSlot, acc_b[c]);
        }
      }
      cluster_sync();  // every CTA's partials staged
      TW* const grads[2] = {kAccW ? grad_w : grad_b, grad_b};  // (N) TW each, DIRECT_GRADS: part 0, part 1
      cluster_sum_partials<CLUSTER, int{kAccW} + int{kAccB}, CHUNKS, VEC, kThreads, DIRECT_GRADS>(
          smem_partials, ws_w, parts_rows * N, grads, N);
      cluster_sync();  // no CTA leaves while a peer may still read its shared memory
    } else if constexpr (SMEM_PARTIALS) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * kTpr + lane) * VEC;  // element column
        if (col < N) {
          float a[VEC];  // (VEC) f32
          if constexpr (kAccW) {
            smem_partials_load<VEC, kThreads>(smem_w + c * kSlot, a);
            store_partials<DIRECT_GRADS>(a, ws_w, grad_w, col);
          }
          if constexpr (kAccB) {
            smem_partials_load<VEC, kThreads>(smem_b + c * kSlot, a);
            store_partials<DIRECT_GRADS>(a, ws_b, grad_b, col);
          }
        }
      }
    } else if constexpr (XBLOCK == 1) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * kTpr + lane) * VEC;  // element column
        if (col < N) {
          if constexpr (kAccW) store_partials<DIRECT_GRADS>(acc_w[c], ws_w, grad_w, col);
          if constexpr (kAccB) store_partials<DIRECT_GRADS>(acc_b[c], ws_b, grad_b, col);
        }
      }
    } else if constexpr (kAccW || kAccB) {
      constexpr int kPass = kTpr * VEC;        // columns of one chunk
      __shared__ float red[XBLOCK * kPass];    // (XBLOCK, kPass) f32 per-group partials
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        if ((part == 0 && !kAccW) || (part == 1 && !kAccB)) continue;
        float* out = part == 0 ? ws_w : ws_b;      // (N) f32 (DIRECT_GRADS: unused)
        TW* grad = part == 0 ? grad_w : grad_b;  // (N) TW, DIRECT_GRADS
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            red[row_in_block * kPass + lane * VEC + i] = part == 0 ? acc_w[c][i] : acc_b[c][i];
          }
          __syncthreads();
          for (int k = threadIdx.x; k < kPass; k += kThreads) {
            float s = 0.0f;
#pragma unroll
            for (int g = 0; g < XBLOCK; ++g) s += red[g * kPass + k];
            const int col = c * kPass + k;  // element column
            if (col < N) {
              if constexpr (DIRECT_GRADS) {
                store_grad_element(grad + col, s);
              } else {
                out[col] = s;
              }
            }
          }
          __syncthreads();
        }
      }
    }
  } else {
    for (int row = row_begin; row < row_end; ++row) {
      const TIn* x_row = x + static_cast<long long>(row) * N;    // (N) TIn
      const TIn* dy_row = dy + static_cast<long long>(row) * N;  // (N) TIn
      float mu, r;
      load_stats<LN>(mean, rstd, row, true, &mu, &r);
      float sgx = 0.0f;  // this thread's part of sum_j(g * xhat)
      float sg = 0.0f;   // this thread's part of sum_j(g)
      for (int base = 0; base < N; base += kRBlock) {
        XVec xv[CHUNKS], dv[CHUNKS];  // (CHUNKS, VEC) TIn; kept in L2 for pass 2
        WVec wv[CHUNKS];              // (CHUNKS, VEC) TW
        load_row_chunks<LoadHint::kReuse, kTpr>(x_row, true, lane, N, base, xv);
        load_row_chunks<LoadHint::kReuse, kTpr>(dy_row, true, lane, N, base, dv);
        if constexpr (HAS_WEIGHT) load_row_chunks<LoadHint::kReuse, kTpr>(w, true, lane, N, base, wv);
        row_sums<LN, HAS_WEIGHT, WEIGHT_OFFSET>(xv, dv, wv, mu, r, &sgx, &sg);
      }
      sgx = group_sum<kTpr, kThreads>(sgx, scratch, parity);
      parity ^= 1;
      if constexpr (LN) {
        sg = group_sum<kTpr, kThreads>(sg, scratch, parity);
        parity ^= 1;
      }
      const float c1 = sgx * inv_n;  // mean_j(g * xhat)
      const float c2 = sg * inv_n;   // mean_j(g), 0 for RMSNorm
      const bool first = row == row_begin;  // the partials start here
      TOut* dx_row = dx + static_cast<long long>(row) * N;  // (N) TOut
      const TIn* dres_row = RESIDUAL ? dres + static_cast<long long>(row) * N : nullptr;  // (N) TIn
      for (int base = 0; base < N; base += kRBlock) {
        XVec xv[CHUNKS], dv[CHUNKS];  // (CHUNKS, VEC) TIn, last use
        WVec wv[CHUNKS];              // (CHUNKS, VEC) TW
        load_row_chunks<LoadHint::kOnce, kTpr>(x_row, true, lane, N, base, xv);
        load_row_chunks<LoadHint::kOnce, kTpr>(dy_row, true, lane, N, base, dv);
        if constexpr (HAS_WEIGHT) load_row_chunks<LoadHint::kReuse, kTpr>(w, true, lane, N, base, wv);
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int col = base + (c * kTpr + lane) * VEC;  // element column
          if (col < N) {
            float acc_w[VEC], acc_b[VEC];  // (VEC) f32 this column's partials so far
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              // Plain (coherent) accesses: this thread wrote them for the previous row.
              acc_w[i] = kAccW && !first ? ws_w[col + i] : 0.0f;
              acc_b[i] = kAccB && !first ? ws_b[col + i] : 0.0f;
            }
            dx_store_accumulate<HAS_WEIGHT, WEIGHT_OFFSET, RESIDUAL, kAccW, kAccB>(
                xv[c], dv[c], wv[c], mu, r, c1, c2, dres_row + col, dx_row + col, acc_w, acc_b);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              if constexpr (kAccW) ws_w[col + i] = acc_w[i];
              if constexpr (kAccB) ws_b[col + i] = acc_b[i];
            }
          }
        }
      }
    }
    allow_dependent_grid_launch();  // as in the persistent variant
  }
}

}  // namespace norm_bwd_detail

// Sums the workspace partials into dw and db: column j of each part is the sum
// over its P rows, in a fixed order (the result is deterministic). It may be
// launched as a programmatic dependent of the fused kernel (common/
// dependent_launch.cuh): the fused kernel lets it launch once its rows are
// done, and it waits for the partials before reading them.
// A CTA of (THREADS_X, THREADS_Y) threads covers THREADS_X consecutive columns
// (coalesced 4-byte loads along a workspace row); its THREADS_Y thread rows
// split the P rows between them, 8 loads in flight each, and add up through
// shared memory. Grid: (ceil(N / THREADS_X), PARTS).
//
// Kernel arguments, in order (the recipe's `params`):
//   ws  const float*  (PARTS, P, N) f32, as the fused kernel wrote it
//   dw  TW*           (N) written when HAS_WEIGHT (may be null otherwise)
//   db  TW*           (N) written when HAS_BIAS (may be null otherwise)
//   P   int           partial rows, ceil(M / SPLIT_SIZE)
//   N   int
template <typename TW, bool HAS_WEIGHT, bool HAS_BIAS, int THREADS_X, int THREADS_Y>
__global__ void __launch_bounds__(THREADS_X * THREADS_Y)
    norm_bwd_reduce(const float* __restrict__ ws, TW* __restrict__ dw, TW* __restrict__ db, int P,
                    int N) {
  static_assert(HAS_WEIGHT || HAS_BIAS, "nothing to reduce");
  static_assert(THREADS_X % 32 == 0 && THREADS_X * THREADS_Y <= 1024, "whole warps, <= 1024");
  __shared__ float red[THREADS_Y * THREADS_X];  // (THREADS_Y, THREADS_X) f32
  // The recipe marks this kernel programmatic_dependent: launched so, it may
  // start while the fused kernel is finishing, and waits here for its partials.
  wait_for_prerequisite_grids();
  const int part = blockIdx.y;                                       // [0, PARTS)
  const int col = blockIdx.x * THREADS_X + threadIdx.x;              // element column
  const float* src = ws + static_cast<long long>(part) * P * N;      // (P, N) f32
  TW* dst = (HAS_WEIGHT && part == 0) ? dw : db;                     // (N) TW
  // Independent accumulators: 8 loads in flight per thread. The partials were
  // just written (L2 hits), so the kernel is latency-bound: the more loads in
  // flight, the fewer round trips.
  constexpr int kInFlight = 8;
  float a[kInFlight];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u) a[u] = 0.0f;
  if (col < N) {
    int p = threadIdx.y;
    for (; p + (kInFlight - 1) * THREADS_Y < P; p += kInFlight * THREADS_Y) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        a[u] += src[static_cast<long long>(p + u * THREADS_Y) * N + col];
      }
    }
    for (; p < P; p += THREADS_Y) a[0] += src[static_cast<long long>(p) * N + col];
  }
  red[threadIdx.y * THREADS_X + threadIdx.x] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  __syncthreads();
  if (threadIdx.y == 0 && col < N) {
    float s = 0.0f;
#pragma unroll
    for (int t = 0; t < THREADS_Y; ++t) s += red[t * THREADS_X + threadIdx.x];
    norm_bwd_detail::store_grad_element(dst + col, s);
  }
}

}  // namespace ktune
