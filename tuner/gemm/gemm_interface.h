// The interface of a GEMM recipe (launch_recipe.h), for every candidate
// source: the template kernels' arguments, typed and valued for the problem
// (TMA descriptors included), or a cuBLASLt recipe's call (CublasLtCallFor,
// tuner/gpu/cublaslt.h); and the tensors either names.
//
// Tensors, by the runner's argument names: a [M, K], b [N, K] (B as [K, N]:
// [K, N]), c and d [M, N] (a batch > 1 leads each shape), all row-major;
// bias [N] bf16; a_scale, b_scale (fp8: one fp32 each, ROLE_SCALE); ws, the
// launcher's workspace (split-K partials and counters, or cuBLASLt's). A
// tensor the problem lacks (no C, no bias, bf16's scales, no workspace) is
// absent (AbsentTensorSpec). Kernels read A, B, C and D 16 bytes at a time
// (cp.async, TMA, vector stores); cuBLASLt's algorithms are chosen for
// 256-byte aligned matrices (its preference's default). Scalars: M, N, K
// (int), alpha = beta = 1 (float; beta matters only with C).
// Thread-safe: pure functions.
#pragma once

#include "absl/status/status.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

// Writes the interface of `recipe` (a GEMM template's, kernels and params
// and workspace_bytes set, or a cuBLASLt recipe) for `problem`.
// INVALID_ARGUMENT for a parameter the runner does not bind or a malformed
// TMA parameter.
absl::Status WriteGemmInterface(const v1::GemmProblem& problem, LaunchRecipe* recipe);

}  // namespace ktune
