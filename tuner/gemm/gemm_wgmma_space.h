// The search space of the Hopper GEMM template (kernel_templates/gemm/
// gemm_wgmma.cuh: TMA, mbarriers, wgmma, a producer warpgroup and one or two
// consumer warpgroups, persistent CTAs): its configs, which of them can run a
// problem, the analytic model that prunes the grid, and the launch recipe.
//
// The template is compiled for sm_90a (wgmma and setmaxnreg exist only
// there), so the space is empty on any other architecture: which template
// families a device gets is decided here from the device's compute
// capability, and a Blackwell family would be another space beside this one.
//
// Contract with the template: every config CanImplementWgmma accepts compiles
// under NVRTC without spilling (tests/tuner/gemm_space_test.cc) and computes
// the right answer for the problems it was accepted for (tests/gpu/
// gemm_gpu_test.cc on the H200).
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/gemm/gemm_space.h"  // GemmSpaceOptions
#include "tuner/gpu/device.h"       // TmaTensor

namespace ktune {

// One instantiation of gemm_wgmma: block_m x block_n tiles of D, `consumers`
// warpgroups sharing each tile's rows (cooperative) or, with `pingpong`, two
// taking whole tiles in turns; K in steps of k_rows 128-byte slices (64 bf16
// or 128 e4m3 each) through a ring of `stages`;
// tiles rasterised in groups of group_m rows; with split_k > 1, each tile's K
// in split_k slices taken by different CTAs, summed in split order by the
// last to finish (so D does not depend on which that is);
// with `promote` (fp8), the accumulator added into a second fp32 one every
// kMaxFp8KPerAccumulator of K, so one split may span any K; with `swap_ab`
// (problems of a few rows), tiles of D^T: the weight's rows are the tile's
// rows, the problem's rows its columns.
struct WgmmaTileConfig {
  int block_m = 128;
  int block_n = 256;
  int consumers = 2;
  bool pingpong = false;
  int cluster_m = 1;  // 2: CTA pairs along M share B tiles by TMA multicast
  int stages = 4;
  int group_m = 8;
  int split_k = 1;       // slices of K per tile (K's steps must divide by it)
  int k_rows = 1;        // 128-byte slices of K per stage: the tile's K (1 or 2)
  bool promote = false;  // fp8: a second accumulator (see the template's PROMOTE_STEPS)
  // The kernel computes D^T = B x A^T (the template's SWAP_AB): block_m rows
  // of the weight B by block_n (8, 16 or 32) of the problem's few rows of A.
  bool swap_ab = false;
  // > 1: the tiles left over past the persistent grid's whole waves (fewer
  // than it has clusters) are split this many ways along K, their fp32
  // partials summed as split-K's, so the last wave keeps every SM busy
  // (the template's TAIL_SPLIT; unsplit cooperative tiles only).
  int tail_split = 1;

  int rows_per_consumer() const { return pingpong ? block_m : block_m / consumers; }
  int threads() const { return 128 * (consumers + 1); }
  bool operator==(const WgmmaTileConfig& o) const {
    return block_m == o.block_m && block_n == o.block_n && consumers == o.consumers && pingpong == o.pingpong &&
           cluster_m == o.cluster_m && stages == o.stages && group_m == o.group_m && split_k == o.split_k &&
           k_rows == o.k_rows && promote == o.promote && swap_ab == o.swap_ab && tail_split == o.tail_split;
  }
};

// "bm128 bn256 c2 s4 g8"; ping-pong: "bm128 bn128 pp s4 g8"; a 2x1 cluster
// adds " x2" after the consumers, two slices of K per stage " kr2" after the
// stages' group, promotion " pr" after that, split-K " k4" after that, a
// tail split " t3" after that, " swap" last ("bm64 bn16 c1 s16 g8 k2 swap").
std::string ToString(const WgmmaTileConfig& config);

// Dynamic shared memory of one CTA: the stage ring, the alignment slack for
// the 128-byte swizzle, the mbarriers and split-K flags, the epilogue's
// staging rows.
int64_t WgmmaSharedMemoryBytes(const WgmmaTileConfig& config);

// OK, or FAILED_PRECONDITION saying why: the device is not sm_90 (the
// template needs sm_90a), the problem is outside what the template serves
// (bf16 or fp8 e4m3 A and B, B given as [N, K], or as [K, N] for bf16 with N
// a whole number of 16-byte TMA strides; K a whole number of them, batch
// <= 65535), or the config
// outside its limits (tile shapes, accumulators, shared memory, k_rows 1 or
// 2, split_k a power of two <= 16 dividing K's steps: ceil(K / (64 k_rows))
// for bf16, ceil(K / (128 k_rows)) for fp8; an fp8 split spanning more than
// kMaxFp8KPerAccumulator of K without `promote`; `promote` with bf16, with
// split-K, or with more than 96 accumulators per thread; a 192-column tile
// without `promote`; split-K with one consumer and more than 64 accumulators
// per thread; with B as [K, N], a CTA's share of the tile's columns not a
// multiple of 64; block_n 8, 16 or 32 without `swap_ab`, or `swap_ab` with
// another block_n, B as [K, N], a cluster or ping-pong; tail_split outside
// 1 to 16, with split-K, ping-pong or swapped tiles, or more than K's steps).
// REQUIRES: ValidateGemmProblem(problem) is OK.
absl::Status CanImplementWgmma(const v1::GemmProblem& problem, const WgmmaTileConfig& config, const DeviceInfo& device);

// The model's estimate in microseconds (only its ranking matters): persistent
// CTAs, one per SM, each taking ceil(tiles * split_k / SMs) units (wave
// quantisation; split-K adds the partials' round trip through L2; a tail
// split's last wave counts as ceil(tail * tail_split / clusters) /
// tail_split of one, plus its partials' trip),
// at a rate that grows with the tile (operand bytes per MAC) and the ring's
// depth; padding counted as work; bounded below by A, B and D at HBM speed,
// and by each CTA's operands streamed through its ring, (stages - 1) stages
// per load latency (what decides small tiles at small M).
double WgmmaModelTimeUs(const v1::GemmProblem& problem, const WgmmaTileConfig& config, const DeviceInfo& device);

// The accepted configs; pruned, the best by the model (at most
// options.max_candidates, within options.max_model_ratio of the best), in a
// fixed order; where split-K is tried (fewer tiles than SMs), the best
// split-K configs (at most half as many) follow the unsplit ones. Two knobs
// the model cannot rank are measured instead, on its best two unsplit
// configs (every config, unpruned): the raster group (4 and 16 beside 8,
// where the problem has more tile rows than 4), and the tile's K (two
// slices of K per stage with half the stages: the same shared memory and K
// in flight). The model's best four unsplit cooperative configs (every one,
// unpruned) are offered with a tail split too, where tiles are left over past
// the grid's whole waves and the split (2 to 8 ways, the model's pick) models
// at least 0.5% faster. For problems of at most 32 rows the swapped tiles
// (swap_ab) follow, pruned among themselves (at most 1.5 x
// options.max_candidates).
// Empty when the template cannot serve the problem or device.
std::vector<WgmmaTileConfig> WgmmaSearchSpace(const v1::GemmProblem& problem, const DeviceInfo& device,
                                              const GemmSpaceOptions& options = GemmSpaceOptions());

// The recipe: template "gemm/gemm_wgmma" for sm_90a, a persistent grid of
// (cluster_m * min(work units, max(1, SMs / (cluster_m * batch))), 1, batch)
// (work units: tile units, times split_k; a tail split's adds its splits),
// 128 * (consumers + 1) threads, and the parameters in order:
// tma_a:64x<block_m>, tma_b:64x<block_n / cluster_m> (B as [K, N]:
// tma_b:64x64, 64 columns by 64 rows of K) (TMA descriptors the caller
// encodes, see the template's header; 128 for 64 with fp8), c, d, bias, M,
// N, K, alpha, beta, ws; with swap_ab the operands trade places:
// tma_b:64x<block_m>, tma_a:64x<block_n>, c, d, bias, N, M, K, ... With
// split_k > 1, or a tail split where tiles are left over, the recipe asks for
// a workspace (partials and counters, see the template) that must start
// zeroed (workspace_zeroed); otherwise ws is null.
// REQUIRES: CanImplementWgmma(problem, config, device) is OK.
absl::StatusOr<LaunchRecipe> WgmmaLaunchRecipe(const v1::GemmProblem& problem, const WgmmaTileConfig& config,
                                               const DeviceInfo& device);

// A TMA descriptor parameter of a recipe, "tma_a:64x128": the operand ('a' or
// 'b') and the box (inner 64 elements, 128 for fp8: one 128-byte row, of K,
// or of N for B as [K, N]; outer 128 rows). NOT_FOUND if `param` is not a
// TMA parameter, INVALID_ARGUMENT if it is malformed.
struct TmaParam {
  char operand = 'a';
  int box_inner = 64;
  int box_outer = 0;
};
absl::StatusOr<TmaParam> ParseTmaParam(const std::string& param);

// The tensor a TMA parameter names for `problem`: A ([batch, M, K] at a) or B
// ([batch, N, K] at b, K contiguous; or [batch, K, N], N contiguous), in the
// parameter's box, whose inner extent must be one 128-byte row of the
// problem's operands (INVALID_ARGUMENT otherwise).
// What the runner encodes for a candidate, and any caller for a stored recipe.
absl::StatusOr<TmaTensor> GemmTmaTensor(const v1::GemmProblem& problem, const std::string& param, DevicePtr a,
                                        DevicePtr b);

}  // namespace ktune
