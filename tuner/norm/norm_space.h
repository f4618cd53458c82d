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
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/norm_config.h"
#include "tuner/core/problem.h"

namespace ktune {

// OK, or FAILED_PRECONDITION saying why `config` cannot run `problem` on
// `device` (divisibility, vector width, register budget, thread limits).
absl::Status CanImplement(const NormProblem& problem, const NormConfig& config, const DeviceInfo& device);

struct SpaceOptions {
  // false: every knob combination of the grid that CanImplement accepts, with
  // none of the cost-model pruning (idle lanes, CTAs wider than M, SPLIT_SIZE
  // far from one wave, workspace traffic). Large: it exists to measure what
  // pruning costs, not for tuning.
  bool pruned = true;
};

// Every config in the (pruned) grid that CanImplement accepts, in a fixed
// order (the tie-break order). Never empty for a valid problem.
std::vector<NormConfig> NormSearchSpace(const NormProblem& problem, const DeviceInfo& device);
std::vector<NormConfig> NormSearchSpace(const NormProblem& problem, const DeviceInfo& device,
                                        const SpaceOptions& options);

// A good config without measuring: what a compiler gets on a cache miss.
// Always accepted by CanImplement.
NormConfig HeuristicNormConfig(const NormProblem& problem, const DeviceInfo& device);

// Backward recipes with a reduce kernel: the reduce_rows values worth trying
// with `config`'s fused kernel fixed: the derived value's neighbours, half
// and double, within [1, 32] (one step of a local search; each variant
// recompiles the fused kernel with it, which a shape's tune time must
// afford). Empty for forwards and for backwards without partials.
std::vector<int> ReduceRowsCandidates(const NormProblem& problem, const NormConfig& config);

// The template id serving the problem: "norm/rmsnorm_fwd", "norm/rmsnorm_bwd",
// "norm/layernorm_fwd", "norm/layernorm_bwd".
std::string NormTemplateId(const NormProblem& problem);

// The kernel templates' C++ name of a norm element type ("ktune::bf16", "float").
std::string TemplateTypeName(DType dtype);

// The recipe for (problem, config): template id and hash, NVRTC options, name
// expressions, grid/block/shared memory, parameter order. lowered_name and
// cubin are left empty (the compiler fills them). Forward: one kernel.
// Backward: kernels[0] the fused kernel, then, when there is a weight (or a
// LayerNorm bias), kernels[1] norm_bwd_reduce, which sums the fused kernel's
// fp32 partials (workspace_bytes of them; the caller allocates the workspace,
// "ws", with 16-byte alignment; it needs no initialization). A grid of one
// CTA over every row (split_size >= M, persistent, no cluster) or of one
// cluster over every row (cluster * split_size >= M) is one kernel that
// writes dw and db itself: no reduce kernel, no workspace. The interface
// (args and tensors) is written too (norm_interface.h).
// REQUIRES: CanImplement(problem, config, device).
absl::StatusOr<LaunchRecipe> NormLaunchRecipe(const NormProblem& problem, const NormConfig& config,
                                              const DeviceInfo& device);

}  // namespace ktune
