// Conversions between the wire messages (proto/ktune/v1) and the domain values
// of the tuner (GEMM configs: tuner/gemm/gemm_wire.h). Decoding checks that every enum is known and every count fits
// its type, and says which field is wrong; range checks beyond that are
// ValidateNormProblem's. Thread-safe: pure functions.
#pragma once

#include <initializer_list>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/norm_config.h"
#include "tuner/core/problem.h"

namespace ktune {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype);
v1::DType DTypeToProto(DType dtype);

// INVALID_ARGUMENT naming the field for unknown enums; output dtype
// unspecified means the input dtype, eps 0 means kDefaultNormEps.
absl::StatusOr<NormProblem> NormProblemFromProto(const v1::NormProblem& problem);
v1::NormProblem NormProblemToProto(const NormProblem& problem);

absl::StatusOr<NormConfig> NormConfigFromProto(const v1::NormConfig& config);
v1::NormConfig NormConfigToProto(const NormConfig& config);

// OK, or INVALID_ARGUMENT naming the first of `fields` below 1 as
// "<prefix><field>: must be >= 1, got <value>" (the config decoders' check).
absl::Status RequirePositive(absl::string_view prefix, std::initializer_list<std::pair<const char*, int>> fields);

DeviceInfo DeviceFromProto(const v1::DeviceFingerprint& device);
v1::DeviceFingerprint DeviceToProto(const DeviceInfo& device);

SoftwareFingerprint SoftwareFromProto(const v1::SoftwareFingerprint& software);
v1::SoftwareFingerprint SoftwareToProto(const SoftwareFingerprint& software);

// include_cubin false leaves the cubin out (stored entries never carry it).
v1::LaunchRecipe RecipeToProto(const LaunchRecipe& recipe, bool include_cubin);
LaunchRecipe RecipeFromProto(const v1::LaunchRecipe& recipe);

// The v1::Problem of a norm or GEMM problem.
v1::Problem ProblemOf(const NormProblem& problem);
v1::Problem ProblemOf(const v1::GemmProblem& problem);

}  // namespace ktune
