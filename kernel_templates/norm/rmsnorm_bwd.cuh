// RMSNorm backward: the fused kernel of norm/norm_bwd.cuh (dx and per-CTA
// dw partials in one pass over x and dy) and, with a weight, norm_bwd_reduce
// (also there) summing the partials into dw. The recipe launches them in that
// order: kernels[0] rmsnorm_bwd (or rmsnorm_bwd_cluster), kernels[1] norm_bwd_reduce.
// For a few rows, rmsnorm_bwd_single_cta alone (one CTA, which writes dw
// itself) or rmsnorm_bwd_single_cluster (one cluster, which does).
//
//   xhat = x * rstd,  g = dy * w   (WEIGHT_OFFSET: g = dy * (1 + w))
//   dx   = rstd * (g - xhat * mean_j(g * xhat)) (+ dresidual, RESIDUAL),  dw = sum_i dy * xhat
//
// rmsnorm_bwd arguments, in order (the recipe's `params`):
//   x          const TIn*   (M, N) row-major, the forward's input (RESIDUAL: its h = x + residual)
//   dy         const TIn*   (M, N) row-major
//   dresidual  const TIn*   (M, N) row-major, RESIDUAL only (null otherwise): the
//              gradient of h from the residual stream (norm/norm_bwd.cuh)
//   w     const TW*    (N)    read only when HAS_WEIGHT
//   rstd  const float* (M)    saved by the forward
//   dx    TOut*        (M, N) row-major
//   ws    float*       (ceil(M / SPLIT_SIZE), N) f32 workspace (HAS_WEIGHT only)
//   M, N  int          N % VEC == 0
// SMEM_PARTIALS: the dw partials live in dynamic shared memory (norm/norm_bwd.cuh);
// the launch passes CHUNKS * VEC * THREADS * 4 bytes of it.
// PREFETCH_L2: the next row block is prefetched into L2 (norm/norm_bwd.cuh).
// REQUIRES: x, dy, w, dx and ws aligned to 16 bytes.
#pragma once

#include "norm/norm_bwd.cuh"

namespace ktune {

template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool RESIDUAL, bool WEIGHT_OFFSET,
          int NUM_WARPS, int XBLOCK, int VEC, int CHUNKS, bool PERSISTENT, int PIPELINE, int SPLIT_SIZE,
          int CTAS_PER_SM, bool SMEM_PARTIALS, bool PREFETCH_L2>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM)
    rmsnorm_bwd(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TIn* __restrict__ dresidual,
                const TW* __restrict__ w, const float* __restrict__ rstd, TOut* __restrict__ dx,
                float* __restrict__ ws, int M, int N) {
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/false, TIn, TOut, TW, HAS_WEIGHT, /*HAS_BIAS=*/false,
                             NUM_WARPS, XBLOCK, VEC, CHUNKS, PERSISTENT, PIPELINE, SPLIT_SIZE, SMEM_PARTIALS,
                             PREFETCH_L2, WEIGHT_OFFSET, RESIDUAL>(
      x, dy, dresidual, w, nullptr, rstd, dx, ws, M, N);
}

// The same in clusters of CLUSTER CTAs (2, 4 or 8; sm_90) that add up their
// dw partials through distributed shared memory: the workspace has one row
// per cluster, P = gridDim.x / CLUSTER, and the grid is a multiple of
// CLUSTER. The launch passes CHUNKS * VEC * THREADS * 4 bytes of dynamic
// shared memory (the partials' staging) whether or not SMEM_PARTIALS.
template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool RESIDUAL, bool WEIGHT_OFFSET,
          int NUM_WARPS, int VEC, int CHUNKS, int PIPELINE, int SPLIT_SIZE, int CTAS_PER_SM, bool SMEM_PARTIALS,
          int CLUSTER>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM) __cluster_dims__(CLUSTER, 1, 1)
    rmsnorm_bwd_cluster(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TIn* __restrict__ dresidual,
                        const TW* __restrict__ w, const float* __restrict__ rstd, TOut* __restrict__ dx,
                        float* __restrict__ ws, int M, int N) {
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/false, TIn, TOut, TW, HAS_WEIGHT, /*HAS_BIAS=*/false, NUM_WARPS,
                             /*XBLOCK=*/1, VEC, CHUNKS, /*PERSISTENT=*/true, PIPELINE, SPLIT_SIZE,
                             SMEM_PARTIALS, /*PREFETCH_L2=*/false, WEIGHT_OFFSET, RESIDUAL, CLUSTER>(
      x, dy, dresidual, w, nullptr, rstd, dx, ws, M, N);
}

// One CTA over all M rows (SPLIT_SIZE >= M; the recipe launches a grid of
// one, HAS_WEIGHT, no reduce kernel): its partials are the whole sums, so it
// writes dw (N) TW itself (norm/norm_bwd.cuh, DIRECT_GRADS). Arguments as
// rmsnorm_bwd's, with dw in place of ws: x, dy, dresidual, w, rstd, dx, dw, M, N.
template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool RESIDUAL, bool WEIGHT_OFFSET,
          int NUM_WARPS, int XBLOCK, int VEC, int CHUNKS, int PIPELINE, int SPLIT_SIZE, int CTAS_PER_SM,
          bool SMEM_PARTIALS, bool PREFETCH_L2>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM)
    rmsnorm_bwd_single_cta(const TIn* __restrict__ x, const TIn* __restrict__ dy,
                           const TIn* __restrict__ dresidual, const TW* __restrict__ w,
                           const float* __restrict__ rstd, TOut* __restrict__ dx, TW* __restrict__ dw,
                           int M, int N) {
  static_assert(HAS_WEIGHT, "without a weight there is no dw: rmsnorm_bwd is one launch already");
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/false, TIn, TOut, TW, HAS_WEIGHT, /*HAS_BIAS=*/false,
                             NUM_WARPS, XBLOCK, VEC, CHUNKS, /*PERSISTENT=*/true, PIPELINE, SPLIT_SIZE,
                             SMEM_PARTIALS, PREFETCH_L2, WEIGHT_OFFSET, RESIDUAL, /*CLUSTER=*/1,
                             /*DIRECT_GRADS=*/true>(x, dy, dresidual, w, nullptr, rstd, dx, nullptr, M, N,
                                                    dw, nullptr);
}

// One cluster of CLUSTER CTAs (2, 4 or 8; sm_90) over all M rows (CLUSTER *
// SPLIT_SIZE >= M; the recipe launches a grid of CLUSTER, HAS_WEIGHT, no
// reduce kernel): the partials, summed over the cluster as in
// rmsnorm_bwd_cluster, are the whole sums, so it writes dw (N) TW itself
// (norm/norm_bwd.cuh, DIRECT_GRADS). Arguments as rmsnorm_bwd_single_cta's:
// x, dy, dresidual, w, rstd, dx, dw, M, N; dynamic shared memory as
// rmsnorm_bwd_cluster's.
template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool RESIDUAL, bool WEIGHT_OFFSET,
          int NUM_WARPS, int VEC, int CHUNKS, int PIPELINE, int SPLIT_SIZE, int CTAS_PER_SM, bool SMEM_PARTIALS,
          int CLUSTER>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM) __cluster_dims__(CLUSTER, 1, 1)
    rmsnorm_bwd_single_cluster(const TIn* __restrict__ x, const TIn* __restrict__ dy,
                               const TIn* __restrict__ dresidual, const TW* __restrict__ w,
                               const float* __restrict__ rstd, TOut* __restrict__ dx, TW* __restrict__ dw,
                               int M, int N) {
  static_assert(HAS_WEIGHT, "without a weight there is no dw: rmsnorm_bwd is one launch already");
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/false, TIn, TOut, TW, HAS_WEIGHT, /*HAS_BIAS=*/false, NUM_WARPS,
                             /*XBLOCK=*/1, VEC, CHUNKS, /*PERSISTENT=*/true, PIPELINE, SPLIT_SIZE,
                             SMEM_PARTIALS, /*PREFETCH_L2=*/false, WEIGHT_OFFSET, RESIDUAL, CLUSTER,
                             /*DIRECT_GRADS=*/true>(x, dy, dresidual, w, nullptr, rstd, dx, nullptr, M, N, dw,
                                                    nullptr);
}

}  // namespace ktune
