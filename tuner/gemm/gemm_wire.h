// Conversions between the GEMM configs of the wire (v1::GemmConfig's
// mma_sync, wgmma and skinny tiles) and the templates' config values, and the
// recipe our templates write for a stored GEMM config. Decoding checks field
// ranges only and names the field; each template's CanImplement judges the
// rest. Thread-safe: pure functions.
#pragma once

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"

namespace ktune {

// The mma.sync GEMM tile; INVALID_ARGUMENT naming the field when one is < 1.
absl::StatusOr<GemmTileConfig> GemmTileConfigFromProto(const v1::MmaSyncTile& tile);
v1::MmaSyncTile GemmTileConfigToProto(const GemmTileConfig& config);
// Field checks only (every field >= 1; a split_k of 0, from an entry written
// before split-K existed, reads as 1); CanImplementWgmma judges the rest.
absl::StatusOr<WgmmaTileConfig> WgmmaTileConfigFromProto(const v1::WgmmaTile& tile);
v1::WgmmaTile WgmmaTileConfigToProto(const WgmmaTileConfig& config);
absl::StatusOr<SkinnyConfig> SkinnyConfigFromProto(const v1::SkinnyTile& tile);
v1::SkinnyTile SkinnyConfigToProto(const SkinnyConfig& config);

// The recipe our templates write for a stored GEMM config (mma_sync, wgmma or
// skinny) on `device`: INVALID_ARGUMENT where its fields do not parse (as
// *ConfigFromProto says), FAILED_PRECONDITION with CanImplement*'s reason
// where the template refuses the problem, NOT_FOUND for a cuBLASLt config or
// none (no template writes those).
absl::StatusOr<LaunchRecipe> OwnGemmRecipe(const v1::GemmProblem& problem, const v1::GemmConfig& config,
                                           const DeviceInfo& device);

}  // namespace ktune
