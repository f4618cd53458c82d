// The search space of the norm kernels: which configs exist for a problem,
// which of them can run (CanImplement), the heuristic answer when nothing is
// tuned, and the launch recipe of one (problem, config) pair.
//
// Contract between this file and kernel_templates/norm/: every config that
// CanImplement accepts must compile under NVRTC and compute the right answer
// for every problem it was accepted for; tests/tuner/ checks both.
// Thread-safe: pure functions.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "tuner/fingerprint.h"
#include "tuner/launch_recipe.h"
#include "tuner/norm_config.h"
#include "tuner/problem.h"

namespace ktune {

// OK, or FAILED_PRECONDITION saying why `config` cannot run `problem` on
// `device` (divisibility, vector width, register budget, thread limits).
absl::Status CanImplement(const NormProblem& problem, const NormConfig& config,
                          const DeviceInfo& device);

// Every config in the (pruned) grid that CanImplement accepts, in a fixed
// order (the tie-break order). Never empty for a valid problem.
std::vector<NormConfig> NormSearchSpace(const NormProblem& problem, const DeviceInfo& device);

// A good config without measuring: what a compiler gets on a cache miss.
// Always accepted by CanImplement.
NormConfig HeuristicNormConfig(const NormProblem& problem, const DeviceInfo& device);

// The template id serving the problem ("norm/rmsnorm_fwd").
std::string NormTemplateId(const NormProblem& problem);

// The recipe for (problem, config): template id and hash, NVRTC options, name
// expression, grid/block/shared memory. lowered_name and cubin are left empty
// (the compiler fills them). REQUIRES: CanImplement(problem, config, device).
absl::StatusOr<LaunchRecipe> NormLaunchRecipe(const NormProblem& problem, const NormConfig& config,
                                              const DeviceInfo& device);

}  // namespace ktune
