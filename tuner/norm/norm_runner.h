// Runs norm kernels (all four ops) on a Device: allocates inputs (random,
// never zeros) and poisoned outputs, verifies a candidate against the float64
// host reference, and times it with the protocol of tuner/run/measure.h.
// The (M, N) output is compared on the device (kernel_templates/norm/
// norm_check.cuh, from the host's float64 per-row terms), the small outputs
// (statistics, dw, db) on the host; the first Verify of each runner also
// walks the whole output on the host and requires the same verdict.
// Backward problems get x, dy, w and the statistics a forward would have saved
// (the float64 mean/rstd rounded to f32); dx, dw and db are checked, dw/db with
// a tolerance that grows with M (fp32 sums) yet fails a dropped row block.
// Multi-kernel recipes (fused backward + reduce) run in order, and are timed
// back to back inside one event pair.
//
// One NormRunner per (problem, device): it owns the device buffers, sized for
// the rotation the measurement needs, and reuses them for every candidate.
// Thread-compatible.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/problem.h"
#include "tuner/gpu/device.h"
#include "tuner/run/measure.h"
#include "tuner/run/problem_runner.h"

namespace ktune {

class NormRunner final : public ProblemRunner {
 public:
  // REQUIRES: ValidateNormProblem(problem).ok(). Allocates device memory.
  static absl::StatusOr<std::unique_ptr<NormRunner>> Create(const NormProblem& problem, Device* device,
                                                            uint64_t seed = 1);
  ~NormRunner() override;

  // Loads recipe's cubin, poisons outputs (and the backward workspace, sized
  // by recipe.workspace_bytes), launches every kernel once on input set 0 and
  // checks every output element against the float64 reference. A wrong answer
  // is a value (ok == false); a launch failure or fault is an error status,
  // and so (INTERNAL) is the device check disagreeing with the host's.
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override;

  // Verify with every element compared on the host (the whole output copied
  // back): the device check's own reference, slow at large M * N.
  absl::StatusOr<VerifyResult> VerifyOnHost(const LaunchRecipe& recipe);

  // Times the recipe (inputs rotated past L2). REQUIRES: Verify passed.
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override;

  // No library serves norms: always empty.
  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override;

 private:
  struct Impl;
  explicit NormRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The float64 host reference of RMSNorm forward on host-side float inputs
// (already rounded to the input dtype): y[i, j] = x[i, j] * rstd[i] * w[j].
void RmsNormForwardReference(const std::vector<double>& x, const std::vector<double>* w, int64_t m, int64_t n,
                             double eps, std::vector<double>* y, std::vector<double>* rstd);

// The float64 host reference of LayerNorm forward: y[i, j] = (x[i, j] - mean[i])
// * rstd[i] * w[j] + b[j] (w, b may be null: 1 and 0).
void LayerNormForwardReference(const std::vector<double>& x, const std::vector<double>* w, const std::vector<double>* b,
                               int64_t m, int64_t n, double eps, std::vector<double>* y, std::vector<double>* mean,
                               std::vector<double>* rstd);

// The float64 host reference of the norm backward from the saved statistics
// (RMSNorm: layernorm false, mean ignored): xhat = (x - mean) * rstd, g = dy * w,
// dx = rstd * (g - mean_j(g) [LayerNorm only] - xhat * mean_j(g * xhat)),
// dw[j] = sum_i dy * xhat, db[j] = sum_i dy. w may be null (1).
void NormBackwardReference(bool layernorm, const std::vector<double>& x, const std::vector<double>& dy,
                           const std::vector<double>* w, const std::vector<double>& mean,
                           const std::vector<double>& rstd, int64_t m, int64_t n, std::vector<double>* dx,
                           std::vector<double>* dw, std::vector<double>* db);

// The variants' parts of the reference (ktune.proto's NormProblem); with them
// the references above cover every variant: the forward residual normalizes
// h = ResidualAddReference(x, residual), which is also what the residual must
// hold afterwards, bit for bit; the weight offset passes 1 + w as w (dw is
// unchanged); the backward residual adds dresidual to dx.
//
// x + residual as the kernels compute it: added in f32, rounded to `dtype`.
double ResidualAddReference(DType dtype, double x, double residual);
// What an fp8 e4m3 output element must be near: y / scale, saturated to
// +-448 (the largest finite e4m3), before its rounding to e4m3.
double Fp8OutputReference(double y, double scale);

// The device check's recipe for `problem` (uncompiled): norm_check from
// kernel_templates/norm/norm_check.cuh, instantiated for the problem's types
// and op, a grid-stride grid of 256-thread blocks sized for `device`.
absl::StatusOr<LaunchRecipe> NormCheckRecipe(const NormProblem& problem, const DeviceInfo& device);

// Tolerances for comparing an output of `dtype` against a float64 reference.
struct Tolerance {
  double atol;
  double rtol;
};
Tolerance ToleranceFor(DType output_dtype);

// A NormRunner for a norm problem as the wire carries it (decoded and
// validated first: INVALID_ARGUMENT naming the field), as a ProblemRunner.
absl::StatusOr<std::unique_ptr<ProblemRunner>> NormProblemRunner(const v1::NormProblem& problem, Device* device,
                                                                 uint64_t seed);

}  // namespace ktune
