// The interface of a norm recipe (launch_recipe.h): each kernel's arguments,
// typed and valued for the problem, and the tensors they name with their
// layout contract, so a generic launcher needs nothing norm-specific.
//
// The tensors, by the kernels' parameter names: x, dy [M, N] and y, dx
// [M, N] (row-major, in the input and output dtype); w, b [N] and dw, db [N]
// (the weight dtype); mean, rstd [M] fp32 (forward: outputs a caller may
// leave unbound; backward: the forward's, required); the backward's fp32
// partials ws [parts, P, N], the launcher's workspace. A tensor the problem
// lacks (no weight, no bias, no partials) is absent (AbsentTensorSpec).
// The variants: residual [M, N] (input dtype, ROLE_INPUT_OUTPUT: the forward
// adds x to it in place), dresidual [M, N] (input dtype, the backward's
// gradient from the residual stream), scale (one fp32, ROLE_SCALE: the fp8
// output's per-tensor scale); absent where the problem has no such variant.
// Scalars: M, N, P (int), eps (float).
// Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/problem.h"

namespace ktune {

// What the recipe writer knows of the config that the interface states.
struct NormInterfaceFacts {
  int vec = 1;  // elements per vector access of x, dy, y, dx, w and b
  // x and dy: at least this alignment besides the vectors' (the bulk L2
  // prefetch of the next rows moves 16-byte units); 0 for none.
  uint32_t min_row_alignment = 0;
  int64_t partial_rows = 0;  // backward: rows of each part of ws (the reduce kernel's P)
};

// Writes the interface of `recipe` (NormLaunchRecipe's, kernels and params
// and workspace_bytes set) for `problem`. INVALID_ARGUMENT for a parameter
// the norm kernels do not take.
absl::Status WriteNormInterface(const NormProblem& problem, const NormInterfaceFacts& facts, LaunchRecipe* recipe);

}  // namespace ktune
