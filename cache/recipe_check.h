// The one recipe check of the answer contract (DESIGN.md): a recipe is served
// or stored only if it is exactly the recipe this build's templates write for
// its problem and config on its device, in every field. Import (ValidateEntry,
// so DecodeBundle and PlanMerge) goes through VerifyStoredRecipe and a tune's
// answer through VerifyRecipe; a stored entry's answer and a tune's winner
// through their two halves (the op's TemplateRecipe, tuner/op.h, then
// CompareStoredRecipe against the stored recipe, CompareRecipe against the
// measured one); heuristic and nearest answers serve TemplateRecipe's own
// output. Nothing here knows an op: the registry is passed in. So nothing a
// bundle, a store or an earlier request holds can change what a caller gets:
// launch geometry, workspace, kernel names, NVRTC options all come from the
// template. Build products (the cubin and lowered names from compiling the
// recipe; the interface, args, tensors and cuBLASLt call, from the template)
// are never part of a stored one (StoredRecipe); answers carry them fresh.
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

// The form in which a recipe is stored (Store, bundles): without its build
// products, which compiling it and this build's template give again: the
// cubin, the lowered names and the interface (each kernel's args, the
// tensors, the cuBLASLt call). Every write of an entry goes through it.
v1::LaunchRecipe StoredRecipe(const v1::LaunchRecipe& recipe);
LaunchRecipe StoredRecipe(LaunchRecipe recipe);

// OK iff `recipe` equals `expected` in every field (template id and hash,
// arch, NVRTC options, each kernel's name expression, lowered name, grid,
// block, shared memory, params, PDL flag and args, workspace size and
// zeroing, cuBLASLt algorithm and call, tensors, cubin). Otherwise
// INVALID_ARGUMENT naming the first field that differs, after `prefix`:
// "entry 0: recipe.kernels[0].grid: is (157, 1, 1), but this template writes
// (160, 1, 1) for the problem and config".
absl::Status CompareRecipe(std::string_view prefix, const v1::LaunchRecipe& recipe, const LaunchRecipe& expected);

// CompareRecipe of a stored recipe (an entry's, a bundle's) with the stored
// form of `expected`: the stored one carries no build products, and one that
// does is refused like any other difference.
absl::Status CompareStoredRecipe(std::string_view prefix, const v1::LaunchRecipe& stored, const LaunchRecipe& expected);

// The problem's op's TemplateRecipe (tuner/op.h, through `ops`), then
// CompareRecipe: `recipe` (a served one, interface included) is exactly what
// this build writes for (problem, config) on `device`. A config the template
// refuses is INVALID_ARGUMENT "PREFIX recipe: ...".
absl::Status VerifyRecipe(const OpRegistry& ops, const v1::Problem& problem, const v1::Config& config,
                          const v1::LaunchRecipe& recipe, const DeviceInfo& device, std::string_view prefix = "");

// The same for a stored recipe (an entry's, at import): CompareStoredRecipe.
absl::Status VerifyStoredRecipe(const OpRegistry& ops, const v1::Problem& problem, const v1::Config& config,
                                const v1::LaunchRecipe& recipe, const DeviceInfo& device, std::string_view prefix = "");

}  // namespace ktune
