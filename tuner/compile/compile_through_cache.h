// The one way a recipe becomes runnable code: the on-disk kernel cache first
// (tuner/compile/kernel_cache.h), NVRTC (tuner/compile/nvrtc_compiler.h) for the rest, in
// parallel, and every successful compile stored back. The tuning pipeline
// (tuner/run/pipeline.h), the norm backward's reduce pass and the daemon's
// served recipes (daemon/answers.cc AttachCode) all compile through it, so a
// cubin a tune compiled is the one a later answer serves.
//
// Contract: a hit or a successful compile fills recipe->cubin and every
// kernel's lowered_name and changes nothing else; a failed compile leaves the
// recipe as it was. A compile error is a value (ok == false with the NVRTC
// log), never an error status. A cuBLASLt call (is_cublaslt_call()) has no
// code: it is reported ok and left alone. Cache errors are logged by the
// cache and never fail a compile.
// Thread-safe: the cache is; callers must not share a recipe between calls.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tuner/compile/kernel_cache.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

struct CachedCompile {
  bool ok = false;
  bool cache_hit = false;      // the cubin came from the kernel cache
  bool compiled = false;       // NVRTC ran (ok or not)
  std::string log;             // NVRTC's log when compiled
  double compile_seconds = 0;  // NVRTC time for this recipe (0 on a hit)
};

struct CompileBatchResult {
  std::vector<CachedCompile> results;  // results[i] is recipes[i]'s
  int cache_hits = 0;
  int compiled = 0;                 // recipes NVRTC compiled (ok or not)
  double compile_seconds = 0;       // NVRTC time summed over those
  double compile_wall_seconds = 0;  // wall time of the parallel NVRTC step
};

// Compiles every recipe of `recipes` (not owned; none null) through `cache`
// (may be null: NVRTC only) on `threads` workers (0 = all cores).
// `on_compiled`, if set, is called after each NVRTC compile (from worker
// threads, serialized) with the number finished so far; hits are not counted.
CompileBatchResult CompileThroughCache(const std::vector<LaunchRecipe*>& recipes, KernelCache* cache, int threads = 0,
                                       const std::function<void(int)>& on_compiled = nullptr);

// One recipe, on the calling thread.
CachedCompile CompileThroughCache(LaunchRecipe* recipe, KernelCache* cache);

}  // namespace ktune
