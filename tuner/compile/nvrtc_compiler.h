// Compiles kernel templates to cubin through NVRTC, in parallel.
//
// One NVRTC program per recipe, with the template's embedded headers passed in
// memory, so no file system or host header is involved. A compile error is a
// value (CompileResult::ok == false with the NVRTC log), not an error status:
// a bad candidate is an expected tuning outcome.
// Thread-safe: NVRTC programs are independent; CompileAll uses its own pool.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

struct CompileResult {
  bool ok = false;
  std::string log;  // NVRTC log (errors and warnings)
  double compile_seconds = 0;
};

// NVRTC's version as major * 1000 + minor * 10 (13.0 -> 13000).
int NvrtcVersion();

// Compiles recipe->template_id for recipe->arch with recipe->nvrtc_options,
// instantiating every recipe->kernels[i].name_expression; on success fills
// recipe->cubin and each lowered_name.
CompileResult Compile(LaunchRecipe* recipe);

// Compiles `text`, a whole translation unit with no includes, instead of an
// embedded template: for kernels that exist only in tests (ones that fault or
// hang on purpose). recipe->template_id and template_hash are not used.
CompileResult CompileSource(const std::string& text, LaunchRecipe* recipe);

// Compiles every recipe on `threads` workers (0 = all cores). results[i] is the
// outcome of recipes[i]. `on_done`, if set, is called after each compile (from
// worker threads, serialized) with the number finished so far.
std::vector<CompileResult> CompileAll(std::vector<LaunchRecipe>* recipes, int threads = 0,
                                      const std::function<void(int)>& on_done = nullptr);

}  // namespace ktune
