// Thread-block cluster helpers (sm_90), shared by the kernels that run in
// clusters: gemm/gemm_wgmma.cuh (2x1 pairs multicasting B) and
// norm/norm_bwd.cuh (CTAs adding up their partials through distributed
// shared memory).
#pragma once

namespace ktune {

// This CTA's rank in its cluster.
__device__ __forceinline__ unsigned int cluster_rank() {
  unsigned int r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Every thread of every CTA of the cluster arrives and waits; shared-memory
// writes before it are visible to the cluster's reads after it. Not
// .aligned: the GEMM's producer warp reaches it with its threads apart.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// The address of `local` (this CTA's shared memory) in CTA `rank`'s.
__device__ __forceinline__ unsigned int map_shared_rank(const void* local, unsigned int rank) {
  unsigned int remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(static_cast<unsigned int>(__cvta_generic_to_shared(local))), "r"(rank));
  return remote;
}

}  // namespace ktune
