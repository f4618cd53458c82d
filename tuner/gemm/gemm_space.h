// The search space of the mma.sync GEMM template (kernel_templates/gemm/
// gemm_mma.cuh): its tile configs, which of them can run a problem
// (CanImplementGemm), the analytic model that prunes the grid before anything
// is compiled, and the launch recipe of one (problem, config) pair.
//
// Contract with the template: every config CanImplementGemm accepts compiles
// under NVRTC without spilling and computes the right answer for every problem
// it was accepted for (tests/tuner/gemm_space_test.cc compiles them all; the
// H200 run of the template at fixed configs,
// bench/results/2026-11-29-gemm-mma-sync-fixed-configs.md, checked the answers of the
// unsplit configs; the GPU tests check split-K's, first run at c8b9478:
// bench/results/2026-11-30-norms-gemm-158b556.md).
// Thread-safe: pure functions.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

// One instantiation of gemm_mma: a block_m x block_n tile of D per CTA,
// warps_m x warps_n warps, K in steps of block_k through `stages` cp.async
// stages, CTAs rasterised in groups of group_m tile rows; with split_k > 1,
// K's steps shared by split_k CTAs per tile, whose fp32 partials the last to
// finish sums (through the recipe's workspace).
struct GemmTileConfig {
  int block_m = 128;
  int block_n = 128;
  int block_k = 32;
  int warps_m = 2;
  int warps_n = 2;
  int stages = 4;
  int group_m = 8;
  int split_k = 1;

  int threads() const { return warps_m * warps_n * 32; }
  bool operator==(const GemmTileConfig& o) const {
    return block_m == o.block_m && block_n == o.block_n && block_k == o.block_k && warps_m == o.warps_m &&
           warps_n == o.warps_n && stages == o.stages && group_m == o.group_m && split_k == o.split_k;
  }
};

// "bm128 bn128 bk32 w2x2 s4 g8", and " k4" with split_k = 4.
std::string ToString(const GemmTileConfig& config);

// Dynamic shared memory of one CTA: the stage ring of A and B tiles.
int64_t GemmSharedMemoryBytes(const GemmTileConfig& config);

// OK, or FAILED_PRECONDITION saying why `config` cannot run `problem` on
// `device`: the problem outside what the template serves (FP8, K % 8 != 0,
// a [K, N] B with N % 8 != 0, batch > 65535) or the config outside the
// template's limits (warp tiles, copy divisibility, shared memory, registers,
// a split_k that is not a power of two <= 16 or leaves a split without K).
// REQUIRES: ValidateGemmProblem(problem) is OK.
absl::Status CanImplementGemm(const v1::GemmProblem& problem, const GemmTileConfig& config, const DeviceInfo& device);

// The model's estimate of the kernel's time in microseconds (only its ranking
// matters): the larger of a compute time (waves of tiles at an efficiency that
// grows with the warp tile, the warps per SM and the K depth in flight;
// padding of M, N and K counted as work; split-K's partials written and read
// back through L2) and a memory time (A, B and D at 4 TB/s, slower while
// fewer CTAs than SMs run).
double GemmModelTimeUs(const v1::GemmProblem& problem, const GemmTileConfig& config, const DeviceInfo& device);

struct GemmSpaceOptions {
  bool pruned = true;            // false: every config CanImplementGemm accepts
  int max_candidates = 16;       // pruned: at most this many, best model time first
  double max_model_ratio = 1.5;  // pruned: and within this factor of the best
};

// Every GEMM template space prunes alike: `ranked` holds (model time, config)
// in grid order; returns the configs by model time (ties keep grid order, so
// a space is deterministic), pruned to options.max_candidates within
// options.max_model_ratio of the best.
template <typename Config>
std::vector<Config> PruneByModel(std::vector<std::pair<double, Config>> ranked, const GemmSpaceOptions& options) {
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> space;
  for (const auto& [time, c] : ranked) {
    if (options.pruned) {
      if (static_cast<int>(space.size()) >= options.max_candidates) break;
      if (time > ranked.front().first * options.max_model_ratio) break;
    }
    space.push_back(c);
  }
  return space;
}

// A recipe of an embedded GEMM template for `arch` ("sm_90", "sm_90a"):
// template id and hash, arch and NVRTC options; no kernels yet.
absl::StatusOr<LaunchRecipe> GemmTemplateRecipe(const std::string& template_id, const std::string& arch);

// The grid's configs that CanImplementGemm accepts; pruned, the best by
// GemmModelTimeUs. In a fixed order (model time, then grid order). Empty when
// the template cannot serve the problem at all. Pruned, split-K configs are
// offered only where the tiles alone leave SMs idle, and only after the
// unsplit ones (at most half as many again), so an unmeasured model term
// cannot crowd out the configs it does not touch.
std::vector<GemmTileConfig> GemmSearchSpace(const v1::GemmProblem& problem, const DeviceInfo& device,
                                            const GemmSpaceOptions& options = GemmSpaceOptions());

// The recipe for (problem, config): template "gemm/gemm_mma", name expression,
// grid (tiles, split_k, batch), block, dynamic shared memory, and the
// parameters in order: a, b, c, d, bias, M, N, K, alpha, beta, ws. A residual
// add is C with beta = 1; c and bias are null when the problem has none. With
// split_k > 1 the recipe's workspace_bytes is > 0 and workspace_zeroed is set
// (the counters); ws is null otherwise.
// REQUIRES: CanImplementGemm(problem, config, device) is OK.
absl::StatusOr<LaunchRecipe> GemmLaunchRecipe(const v1::GemmProblem& problem, const GemmTileConfig& config,
                                              const DeviceInfo& device);

}  // namespace ktune
