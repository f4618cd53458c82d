// Sum reductions over a "row group": GROUP consecutive threads of a CTA that
// share one row. Groups of up to 32 threads reduce with butterfly shuffles
// inside their warp; larger groups (a row spanning several warps) combine the
// warps' sums through shared memory.
//
// Every thread of a group ends with the bitwise-same sum: each butterfly step
// adds the same two values on both lanes (float addition is commutative), and
// the cross-warp step reads the warps' sums in the same order everywhere.
#pragma once

namespace ktune {

// Sum of `v` over the GROUP lanes of the caller's group (GROUP a power of two
// <= 32, groups aligned to GROUP lanes).
template <int GROUP>
__device__ __forceinline__ float group_sum_in_warp(float v) {
  static_assert(GROUP >= 1 && GROUP <= 32 && (GROUP & (GROUP - 1)) == 0,
                "GROUP must be a power of two <= 32");
#pragma unroll
  for (int offset = GROUP / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum of `v` over GROUP consecutive threads of a CTA of THREADS threads.
// `scratch` holds 2 * (THREADS / 32) floats of shared memory; `parity`
// alternates between consecutive calls so one barrier per call suffices: a warp
// can only overwrite a slot after every warp passed the next call's barrier,
// i.e. after every warp finished reading it.
// REQUIRES: called by every thread of the CTA (it may contain a barrier).
template <int GROUP, int THREADS>
__device__ __forceinline__ float group_sum(float v, float* scratch, int parity) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS must be whole warps, <= 1024");
  static_assert(GROUP >= 1 && GROUP <= THREADS && (GROUP & (GROUP - 1)) == 0,
                "GROUP must be a power of two <= THREADS");
  constexpr int kWarpGroup = GROUP < 32 ? GROUP : 32;
  v = group_sum_in_warp<kWarpGroup>(v);
  if constexpr (GROUP <= 32) {
    return v;
  } else {
    constexpr int kWarps = THREADS / 32;
    constexpr int kWarpsPerGroup = GROUP / 32;  // warps sharing one row
    const int warp = threadIdx.x / 32;          // [0, kWarps)
    const int lane = threadIdx.x % 32;          // [0, 32)
    float* slots = scratch + parity * kWarps;   // (kWarps) f32
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    const int first = warp - warp % kWarpsPerGroup;  // first warp of this row
    const float s = slots[first + lane % kWarpsPerGroup];
    return group_sum_in_warp<kWarpsPerGroup>(s);
  }
}

}  // namespace ktune
