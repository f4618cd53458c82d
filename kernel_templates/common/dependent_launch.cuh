// Programmatic dependent launch (sm_90): a kernel launched with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start before the
// kernel ahead of it in the stream has finished, so its launch and its CTAs'
// start overlap that kernel's tail instead of following it. Such a kernel
// must wait for that kernel itself before touching memory it may still read
// or write; a recipe marks the kernels that do (KernelLaunch.
// programmatic_dependent in proto/ktune/v1/ktune.proto). Every norm kernel
// does: the first of a recipe waits for whatever the caller ran before it,
// the backward's reduce for the fused kernel's partials.
//
// Launched the ordinary way, both calls are no-ops: the kernel ahead has
// finished and flushed before this one starts. Before sm_90 they compile to
// nothing.
#pragma once

namespace ktune {

// Blocks until every kernel this grid depends on programmatically has
// completed and its memory writes are visible. Call before the first read of
// anything they write.
__device__ __forceinline__ void wait_for_prerequisite_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the dependent grid launch once every CTA of this grid has called this
// (or exited). It says nothing about this grid's memory: the dependent still
// waits (above) for the whole grid to complete. Call it where the CTA's long
// work is done, so the dependent's CTAs do not take slots this grid's later
// CTAs still need.
__device__ __forceinline__ void allow_dependent_grid_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace ktune
