// Conversions between the wire messages (proto/ktune/v1) and the domain values
// of the tuner. Decoding checks that every enum is known and every count fits
// its type, and says which field is wrong; range checks beyond that are
// ValidateNormProblem's. Thread-safe: pure functions.
#pragma once

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/fingerprint.h"
#include "tuner/gemm_skinny_space.h"
#include "tuner/gemm_space.h"
#include "tuner/gemm_wgmma_space.h"
#include "tuner/launch_recipe.h"
#include "tuner/norm_config.h"
#include "tuner/problem.h"

namespace ktune {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);

// INVALID_ARGUMENT naming the field for unknown enums; output dtype
// unspecified means the input dtype, eps 0 means kDefaultNormEps.
absl::StatusOr<NormProblem> NormProblemFromProto(const v1::NormProblem& problem);
v1::NormProblem NormProblemToProto(const NormProblem& problem);

absl::StatusOr<NormConfig> NormConfigFromProto(const v1::NormConfig& config);
v1::NormConfig NormConfigToProto(const NormConfig& config);

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

// The problem part of a cache key, the one spelling every caller uses (the
// daemon's lookups, stored and bundled entries, prewarm's dedup and shards):
// the op name and CanonicalKey of the decoded norm problem, or "gemm" and
// GemmCanonicalKey, so equivalent spellings (an unset output dtype, batch 0,
// eps 0) are one key. INVALID_ARGUMENT naming the field for a problem that
// does not decode (norm) or validate (GEMM); norm ranges are
// ValidateNormProblem's.
struct ProblemKeyParts {
  std::string op;   // "rmsnorm.fwd", "gemm"
  std::string key;  // "rmsnorm.fwd m=4096 n=4096 ...", "gemm m=1 n=4096 ..."
};
absl::StatusOr<ProblemKeyParts> ProblemKeyOf(const v1::Problem& problem);

DeviceInfo DeviceFromProto(const v1::DeviceFingerprint& device);
v1::DeviceFingerprint DeviceToProto(const DeviceInfo& device);

SoftwareFingerprint SoftwareFromProto(const v1::SoftwareFingerprint& software);
v1::SoftwareFingerprint SoftwareToProto(const SoftwareFingerprint& software);

// include_cubin false leaves the cubin out (stored entries never carry it).
v1::LaunchRecipe RecipeToProto(const LaunchRecipe& recipe, bool include_cubin);
LaunchRecipe RecipeFromProto(const v1::LaunchRecipe& recipe);

}  // namespace ktune
