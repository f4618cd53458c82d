// Runs GEMM candidates on a Device: compiled recipes of our templates
// (mma.sync, wgmma and skinny; a recipe's single kernel gets its arguments
// bound by parameter name, TMA descriptors encoded once per parameter and
// rotation set) and cuBLASLt's algorithms, on the same inputs, checked
// against the same reference, timed by the same protocol (tuner/run/measure.h).
//
// A and B are uniform in [-1, 1) from a seeded generator, bf16 or fp8 e4m3
// (with per-tensor scales 0.5 and 0.25, so a candidate ignoring one fails);
// C (when the problem has one, in D's type) and the bias (bf16, N values) are
// uniform in [-1, 1) too. Every rotation set holds the same contents. Before
// each check set 0's D is poisoned (NaN). The reference is
// kernel_templates/gemm/gemm_reference.cuh, compiled through NVRTC and run in
// fp32 on the device once, at Create, for set 0. Calls use alpha = 1 and
// beta = 1 (C is added as is: a residual add). A recipe with a workspace
// (split-K) gets one zeroed when it is loaded, as its contract asks.
//
// One GemmRunner per (problem, device); it owns the device buffers.
// Thread-compatible.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/gpu/device.h"
#include "tuner/run/measure.h"
#include "tuner/run/problem_runner.h"

namespace ktune {

// One candidate of one source: a compiled recipe of one of our templates
// (with its config: mma.sync `tile`, Hopper `wgmma` or `skinny`), or a cuBLASLt recipe
// (CublasLtRecipe; `cublaslt_rank` 0 is cuBLASLt's own default choice).
struct GemmCandidate {
  std::optional<GemmTileConfig> tile;
  std::optional<WgmmaTileConfig> wgmma;
  std::optional<SkinnyConfig> skinny;
  LaunchRecipe recipe;  // compiled (cubin, lowered name), or a cuBLASLt call
  int cublaslt_rank = -1;

  bool is_cublaslt() const { return recipe.is_cublaslt_call(); }
  bool is_template() const { return tile.has_value() || wgmma.has_value() || skinny.has_value(); }
  // "mma_sync bm128 bn128 bk32 w2x2 s4 g8", "wgmma bm128 bn256 c2 s4 g8", "skinny w8 u4"
  // or "cublaslt #0".
  std::string Name() const;
};

// Element tolerance of a GEMM output against the fp32 reference:
// |d - ref| <= rtol * (|ref| + rms(ref)). bf16 D: 1e-2 (its rounding is
// 2^-9 relative); fp32 D: 1e-3 (only summation order differs).
double GemmRelativeTolerance(v1::DType d_dtype);

// D (`got`, [batch, M, N] as floats) against the reference: ok when every
// element is within rtol * (|ref| + ref_rms); max_error is the largest
// |got - ref| / tolerance (infinite for a NaN: an unwritten element of the
// poisoned D); detail names the first failing element [batch, row, col].
// Large outputs are compared on several threads (a 8192 x 14336 D is 117M
// elements per candidate).
// REQUIRES: got.size() == ref.size() == batch * m * n.
VerifyResult CompareGemmOutput(const std::vector<float>& got, const std::vector<float>& ref, double ref_rms,
                               double rtol, int64_t m, int64_t n);

class GemmRunner final : public ProblemRunner {
 public:
  // REQUIRES: ValidateGemmProblem(problem) OK. `cublaslt` may be
  // null (no cuBLASLt candidates); it must outlive the runner. Allocates the
  // inputs (rotation sets), D, the bias, the fp8 scales and, with `cublaslt`,
  // a cuBLASLt workspace of kCublasLtWorkspaceBytes; then computes the
  // reference (INTERNAL if its kernel does not compile). Device errors as
  // the Device returns them.
  static absl::StatusOr<std::unique_ptr<GemmRunner>> Create(const v1::GemmProblem& problem, Device* device,
                                                            CublasLt* cublaslt, uint64_t seed = 1);
  ~GemmRunner() override;

  // Runs the recipe (its one kernel, or a cuBLASLt call) once on set 0 and
  // checks every element of D. A wrong answer is a value (ok == false); a
  // recipe of more than one kernel or with a parameter the runner cannot
  // bind is INVALID_ARGUMENT; a launch error or fault is a status.
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override;

  // Times the recipe, inputs rotated past the L2. REQUIRES: Verify passed.
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override;

  // Up to `max` algorithms of cuBLASLt's heuristic (with its one-setting
  // variants, CublasLt::Candidates) as recipes for this device's arch, best
  // first; empty without cuBLASLt or where it does not serve the problem
  // (CublasLtCanServe).
  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override;

 private:
  struct Impl;
  explicit GemmRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A GemmRunner for `problem` (validated first: INVALID_ARGUMENT naming the
// field), as a ProblemRunner; `cublaslt` may be null (templates only).
absl::StatusOr<std::unique_ptr<ProblemRunner>> GemmProblemRunner(const v1::GemmProblem& problem, Device* device,
                                                                 CublasLt* cublaslt, uint64_t seed);

}  // namespace ktune
