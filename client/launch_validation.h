// What a launcher checks of a recipe before loading anything: every field a
// launch reads is present, consistent and bounded, so that a bad recipe is an
// INVALID_ARGUMENT naming its field, never a driver error or a fault later.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// Bounds on what one recipe may ask of a launcher.
inline constexpr int kMaxRecipeKernels = 16;
inline constexpr int kMaxRecipeTensors = 64;
inline constexpr int kMaxKernelArgs = 64;
inline constexpr uint64_t kMaxCubinBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxWorkspaceBytes = uint64_t{16} << 30;
inline constexpr uint32_t kMaxDynamicSmemBytes = 1u << 20;
inline constexpr uint32_t kMaxAlignmentBytes = 4096;
inline constexpr int kMaxTmaRank = 5;  // cuTensorMapEncodeTiled's

// OK if `recipe` can be launched from its fields alone: a kernel recipe has a
// cubin and, per kernel, a lowered name, a grid and block of at most three
// positive dimensions, and one typed argument per parameter (same names, in
// order) naming only known tensors; TMA descriptors have a rank in 1..5 and
// dims, strides and box to match; tensors have unique names and power-of-two
// alignments, at most one is the workspace and it fits workspace_bytes. A
// cuBLASLt recipe has the 64 bytes of its algorithm and a call whose
// matrices name known tensors. Else INVALID_ARGUMENT naming the field.
absl::Status ValidateLaunchRecipe(const v1::LaunchRecipe& recipe);

// The recipe is one cublasLtMatmul call (template_id "cublaslt", or an
// algorithm present), not kernels.
bool IsCublasLtRecipe(const v1::LaunchRecipe& recipe);

}  // namespace ktune
