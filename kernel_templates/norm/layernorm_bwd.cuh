// LayerNorm backward: the fused kernel of norm/norm_bwd.cuh (dx and per-CTA
// dw/db partials in one pass over x and dy) and, with a weight or a bias,
// norm_bwd_reduce (also there) summing the partials. The recipe launches them
// in that order: kernels[0] layernorm_bwd (or layernorm_bwd_cluster), kernels[1]
// norm_bwd_reduce. For a few rows, layernorm_bwd_single_cta alone (one CTA,
// which writes dw and db itself) or layernorm_bwd_single_cluster (one
// cluster, which does).
//
//   xhat = (x - mean) * rstd,  g = dy * w
//   dx   = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
//   dw   = sum_i dy * xhat,  db = sum_i dy
//
// layernorm_bwd arguments, in order (the recipe's `params`):
//   x     const TIn*   (M, N) row-major, the forward's input
//   dy    const TIn*   (M, N) row-major
//   w     const TW*    (N)    read only when HAS_WEIGHT
//   mean  const float* (M)    saved by the forward
//   rstd  const float* (M)    saved by the forward
//   dx    TOut*        (M, N) row-major
//   ws    float*       (PARTS, ceil(M / SPLIT_SIZE), N) f32 workspace, PARTS =
//                      HAS_WEIGHT + HAS_BIAS (none when 0)
//   M, N  int          N % VEC == 0
// SMEM_PARTIALS: the dw/db partials live in dynamic shared memory
// (norm/norm_bwd.cuh); the launch passes PARTS * CHUNKS * VEC * THREADS * 4 bytes.
// PREFETCH_L2: the next row block is prefetched into L2 (norm/norm_bwd.cuh).
// WEIGHT_OFFSET: the forward applied (1 + w) (norm/norm_bwd.cuh).
// REQUIRES: x, dy, w, dx and ws aligned to 16 bytes.
#pragma once

#include "norm/norm_bwd.cuh"

namespace ktune {

template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool HAS_BIAS, bool WEIGHT_OFFSET,
          int NUM_WARPS, int XBLOCK, int VEC, int CHUNKS, bool PERSISTENT, int PIPELINE, int SPLIT_SIZE,
          int CTAS_PER_SM, bool SMEM_PARTIALS, bool PREFETCH_L2>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM)
    layernorm_bwd(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TW* __restrict__ w,
                  const float* __restrict__ mean, const float* __restrict__ rstd,
                  TOut* __restrict__ dx, float* __restrict__ ws, int M, int N) {
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/true, TIn, TOut, TW, HAS_WEIGHT, HAS_BIAS, NUM_WARPS, XBLOCK,
                             VEC, CHUNKS, PERSISTENT, PIPELINE, SPLIT_SIZE, SMEM_PARTIALS,
                             PREFETCH_L2, WEIGHT_OFFSET, /*RESIDUAL=*/false>(x, dy, nullptr, w, mean, rstd, dx,
                                                                            ws, M, N);
}

// The same in clusters of CLUSTER CTAs (2, 4 or 8; sm_90) that add up their
// dw/db partials through distributed shared memory: the workspace has one
// row per cluster, P = gridDim.x / CLUSTER, and the grid is a multiple of
// CLUSTER. The launch passes PARTS * CHUNKS * VEC * THREADS * 4 bytes of
// dynamic shared memory (the partials' staging) whether or not SMEM_PARTIALS.
template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool HAS_BIAS, bool WEIGHT_OFFSET,
          int NUM_WARPS, int VEC, int CHUNKS, int PIPELINE, int SPLIT_SIZE, int CTAS_PER_SM, bool SMEM_PARTIALS,
          bool PREFETCH_L2, int CLUSTER>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM) __cluster_dims__(CLUSTER, 1, 1)
    layernorm_bwd_cluster(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TW* __restrict__ w,
                          const float* __restrict__ mean, const float* __restrict__ rstd,
                          TOut* __restrict__ dx, float* __restrict__ ws, int M, int N) {
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/true, TIn, TOut, TW, HAS_WEIGHT, HAS_BIAS, NUM_WARPS, /*XBLOCK=*/1, VEC,
                             CHUNKS, /*PERSISTENT=*/true, PIPELINE, SPLIT_SIZE, SMEM_PARTIALS, PREFETCH_L2,
                             WEIGHT_OFFSET, /*RESIDUAL=*/false, CLUSTER>(x, dy, nullptr, w, mean, rstd, dx, ws, M, N);
}

// One CTA over all M rows (SPLIT_SIZE >= M; the recipe launches a grid of
// one, a weight or a bias, no reduce kernel): its partials are the whole
// sums, so it writes dw and db (N) TW itself (norm/norm_bwd.cuh,
// DIRECT_GRADS). Arguments as layernorm_bwd's, with dw and db in place of
// ws: x, dy, w, mean, rstd, dx, dw, db, M, N (dw null without a weight, db
// without a bias).
template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool HAS_BIAS, bool WEIGHT_OFFSET,
          int NUM_WARPS, int XBLOCK, int VEC, int CHUNKS, int PIPELINE, int SPLIT_SIZE, int CTAS_PER_SM,
          bool SMEM_PARTIALS, bool PREFETCH_L2>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM)
    layernorm_bwd_single_cta(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TW* __restrict__ w,
                             const float* __restrict__ mean, const float* __restrict__ rstd,
                             TOut* __restrict__ dx, TW* __restrict__ dw, TW* __restrict__ db, int M,
                             int N) {
  static_assert(HAS_WEIGHT || HAS_BIAS, "without a weight or bias layernorm_bwd is one launch already");
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/true, TIn, TOut, TW, HAS_WEIGHT, HAS_BIAS, NUM_WARPS, XBLOCK, VEC,
                             CHUNKS, /*PERSISTENT=*/true, PIPELINE, SPLIT_SIZE, SMEM_PARTIALS, PREFETCH_L2,
                             WEIGHT_OFFSET, /*RESIDUAL=*/false, /*CLUSTER=*/1, /*DIRECT_GRADS=*/true>(
      x, dy, nullptr, w, mean, rstd, dx, nullptr, M, N, dw, db);
}

// One cluster of CLUSTER CTAs (2, 4 or 8; sm_90) over all M rows (CLUSTER *
// SPLIT_SIZE >= M; the recipe launches a grid of CLUSTER, a weight or a bias,
// no reduce kernel): the partials, summed over the cluster as in
// layernorm_bwd_cluster, are the whole sums, so it writes dw and db itself
// (norm/norm_bwd.cuh, DIRECT_GRADS). Arguments as layernorm_bwd_single_cta's:
// x, dy, w, mean, rstd, dx, dw, db, M, N; dynamic shared memory as
// layernorm_bwd_cluster's.
template <typename TIn, typename TOut, typename TW, bool HAS_WEIGHT, bool HAS_BIAS, bool WEIGHT_OFFSET,
          int NUM_WARPS, int VEC, int CHUNKS, int PIPELINE, int SPLIT_SIZE, int CTAS_PER_SM, bool SMEM_PARTIALS,
          bool PREFETCH_L2, int CLUSTER>
__global__ void __launch_bounds__(NUM_WARPS * 32, CTAS_PER_SM) __cluster_dims__(CLUSTER, 1, 1)
    layernorm_bwd_single_cluster(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TW* __restrict__ w,
                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                 TOut* __restrict__ dx, TW* __restrict__ dw, TW* __restrict__ db, int M,
                                 int N) {
  static_assert(HAS_WEIGHT || HAS_BIAS, "without a weight or bias layernorm_bwd is one launch already");
  static_assert(CTAS_PER_SM >= 1 && CTAS_PER_SM * NUM_WARPS * 32 <= 2048,
                "occupancy target out of range");
  norm_bwd_detail::fused_bwd</*LN=*/true, TIn, TOut, TW, HAS_WEIGHT, HAS_BIAS, NUM_WARPS, /*XBLOCK=*/1, VEC,
                             CHUNKS, /*PERSISTENT=*/true, PIPELINE, SPLIT_SIZE, SMEM_PARTIALS, PREFETCH_L2,
                             WEIGHT_OFFSET, /*RESIDUAL=*/false, CLUSTER, /*DIRECT_GRADS=*/true>(
      x, dy, nullptr, w, mean, rstd, dx, nullptr, M, N, dw, db);
}

}  // namespace ktune
