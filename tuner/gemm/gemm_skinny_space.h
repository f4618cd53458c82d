// The search space of the skinny GEMM template (kernel_templates/gemm/
// gemm_skinny.cuh): problems with at most 16 rows of A, where a GEMM is a
// stream of B through the tensor cores and the question is only how many
// warps share an SM's 16 rows of B, how many loads each keeps in flight and
// whether it loads the next round while multiplying this one. Nine configs,
// all compiled; no model is needed to prune them.
// Thread-safe: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

// One instantiation: `warps` warps split K for one CTA's 16 columns of D,
// each with `unroll` 64-byte chunks of K (32 bf16, 64 e4m3) loaded before
// they are multiplied; `pipelined`: the next such round is loaded while this
// one multiplies (two rounds in registers, at most 128 of them per thread).
struct SkinnyConfig {
  int warps = 8;
  int unroll = 4;
  bool pipelined = false;

  bool operator==(const SkinnyConfig& o) const {
    return warps == o.warps && unroll == o.unroll && pipelined == o.pipelined;
  }
};

// "w8 u4", "w8 u1 pipelined".
std::string ToString(const SkinnyConfig& config);

// OK, or FAILED_PRECONDITION saying why not: M > 16, B not given as [N, K],
// K's rows not whole 16-byte loads (K % 8 bf16, K % 16 e4m3), batch > 65535,
// sm_80 or newer needed (sm_89 for e4m3), an e4m3 warp's share of K over
// 4096 (Hopper's fp8 accumulation, as the wgmma space), the config outside
// 1-32 warps and 1-8 chunks, or pipelined fp8 at M > 8.
absl::Status CanImplementSkinny(const v1::GemmProblem& problem, const SkinnyConfig& config, const DeviceInfo& device);

// Every config of the grid (warps 4, 8, 16 x unroll 2, 4; then pipelined
// w8 u1, w8 u2, w4 u2) that can run the problem, in that order; empty when
// the template cannot serve it.
std::vector<SkinnyConfig> SkinnySearchSpace(const v1::GemmProblem& problem, const DeviceInfo& device);

// The config to answer with before a tune (the daemon's HEURISTIC source):
// w8 u1 pipelined where the space offers it, the fastest skinny config at 7
// of the 12 such bench shapes on the H200
// (bench/results/2026-11-30-gemm-skinny-pipelined-fb2fcd5.md; w4 u2 pipelined at 4);
// else w8 u4, the fastest at 2 of the 4 fp8 M = 16 shapes; else the space's
// first. nullopt when the template cannot serve the problem.
std::optional<SkinnyConfig> SkinnyUntunedConfig(const v1::GemmProblem& problem, const DeviceInfo& device);

// Template "gemm/gemm_skinny" for the device's arch, grid (ceil(N / 16), 1,
// batch), warps * 32 threads, parameters a, b, c, d, bias, M, N, K, alpha,
// beta (as the mma.sync template's), a_scale, b_scale (e4m3's per-tensor
// scales; null for bf16).
// REQUIRES: CanImplementSkinny(problem, config, device) is OK.
absl::StatusOr<LaunchRecipe> SkinnyLaunchRecipe(const v1::GemmProblem& problem, const SkinnyConfig& config,
                                                const DeviceInfo& device);

}  // namespace ktune
