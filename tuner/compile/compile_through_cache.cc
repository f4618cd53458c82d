#include "tuner/compile/compile_through_cache.h"

#include <chrono>
#include <utility>

#include "tuner/compile/nvrtc_compiler.h"

namespace ktune {

CompileBatchResult CompileThroughCache(const std::vector<LaunchRecipe*>& recipes, KernelCache* cache, int threads,
                                       const std::function<void(int)>& on_compiled) {
  CompileBatchResult out;
  out.results.resize(recipes.size());
  std::vector<size_t> index;  // into recipes, of those NVRTC compiles
  std::vector<LaunchRecipe> to_compile;
  for (size_t i = 0; i < recipes.size(); ++i) {
    LaunchRecipe* recipe = recipes[i];
    if (recipe->is_cublaslt_call()) {  // a library call: nothing to compile
      out.results[i].ok = true;
      continue;
    }
    if (cache != nullptr && cache->Lookup(recipe, NvrtcVersion())) {
      out.results[i].ok = true;
      out.results[i].cache_hit = true;
      ++out.cache_hits;
      continue;
    }
    index.push_back(i);
    to_compile.push_back(*recipe);  // compiled on a copy: a failure leaves the recipe as it was
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<CompileResult> compiled = CompileAll(&to_compile, threads, on_compiled);
  out.compile_wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t b = 0; b < to_compile.size(); ++b) {
    CachedCompile& r = out.results[index[b]];
    r.compiled = true;
    r.ok = compiled[b].ok;
    r.log = compiled[b].log;
    r.compile_seconds = compiled[b].compile_seconds;
    ++out.compiled;
    out.compile_seconds += compiled[b].compile_seconds;
    if (!r.ok) continue;
    LaunchRecipe* recipe = recipes[index[b]];
    recipe->cubin = std::move(to_compile[b].cubin);
    for (size_t k = 0; k < recipe->kernels.size(); ++k) {
      recipe->kernels[k].lowered_name = to_compile[b].kernels[k].lowered_name;
    }
    if (cache != nullptr) cache->Store(*recipe, NvrtcVersion());
  }
  return out;
}

CachedCompile CompileThroughCache(LaunchRecipe* recipe, KernelCache* cache) {
  return CompileThroughCache(std::vector<LaunchRecipe*>{recipe}, cache, /*threads=*/1).results[0];
}

}  // namespace ktune
