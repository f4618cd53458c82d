// The one recipe check of the answer contract (DESIGN.md): a recipe is served
// or stored only if it is exactly the recipe this build's templates write for
// its problem and config on its device, in every field. Import (ValidateEntry,
// so DecodeBundle and PlanMerge) and a tune's answer go through VerifyRecipe;
// a stored entry's answer and a tune's winner through its two halves
// (the op's TemplateRecipe, tuner/op.h, then CompareRecipe against the stored
// or measured recipe); heuristic and nearest answers serve TemplateRecipe's
// own output. Nothing here knows an op: the registry is passed in. So nothing
// a bundle, a store or an earlier request holds can change what a caller gets:
// launch geometry, workspace, kernel names, NVRTC options all come from the
// template. Compiled code (cubin, lowered names) is a product of compiling
// that recipe, never part of a stored one.
// Thread-safe: pure functions.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/op.h"

namespace ktune {

// OK iff `recipe` equals `expected` in every field (template id and hash,
// arch, NVRTC options, each kernel's name expression, lowered name, grid,
// block, shared memory, params and PDL flag, workspace size and zeroing,
// cuBLASLt algorithm, cubin). Otherwise INVALID_ARGUMENT naming the first
// field that differs, after `prefix`: "entry 0: recipe.kernels[0].grid: is
// (157, 1, 1), but this template writes (160, 1, 1) for the problem and config".
absl::Status CompareRecipe(std::string_view prefix, const v1::LaunchRecipe& recipe, const LaunchRecipe& expected);

// The problem's op's TemplateRecipe (tuner/op.h, through `ops`), then
// CompareRecipe: `recipe` is exactly what this build writes for (problem,
// config) on `device`. A config the template refuses is INVALID_ARGUMENT
// "PREFIX recipe: ...".
absl::Status VerifyRecipe(const OpRegistry& ops, const v1::Problem& problem, const v1::Config& config,
                          const v1::LaunchRecipe& recipe, const DeviceInfo& device, std::string_view prefix = "");

}  // namespace ktune
