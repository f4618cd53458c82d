// Entries as this build would store them on the compile-only target: its
// device, this build's software fingerprint for the problem and the recipe
// this build's template writes for (problem, config). Such entries are served
// by this build, so they get the full recipe check (cache/recipe_check.h).
#pragma once

#include <catch2/catch.hpp>
#include <optional>
#include <vector>

#include "cache/recipe_check.h"
#include "ktune/v1/ktune.pb.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gemm/gemm_wire.h"
#include "tuner/norm/norm_space.h"

namespace ktune::testutil {

inline v1::Problem NormProblemOf(NormOp op, NormPass pass, int64_t m, int64_t n, DType dtype = DType::kBF16,
                                 bool bias = false) {
  NormProblem p;
  p.op = op;
  p.pass = pass;
  p.m = m;
  p.n = n;
  p.input_dtype = p.output_dtype = p.weight_dtype = dtype;
  p.has_bias = bias;
  v1::Problem out;
  *out.mutable_norm() = NormProblemToProto(p);
  return out;
}

inline v1::Problem GemmProblemOf(const v1::GemmProblem& g) {
  v1::Problem out;
  *out.mutable_gemm() = g;
  return out;
}

// The heuristic's config for a norm problem on the compile-only target.
inline v1::Config HeuristicConfig(const v1::Problem& problem) {
  absl::StatusOr<NormProblem> p = NormProblemFromProto(problem.norm());
  REQUIRE(p.ok());
  v1::Config c;
  *c.mutable_norm() = NormConfigToProto(HeuristicNormConfig(*p, CompileOnlyTarget()));
  return c;
}

// The first config of each GEMM template that serves `g` on the target.
inline v1::Config MmaConfig(const v1::GemmProblem& g) {
  const std::vector<GemmTileConfig> space = GemmSearchSpace(g, CompileOnlyTarget());
  REQUIRE_FALSE(space.empty());
  v1::Config c;
  *c.mutable_gemm()->mutable_mma_sync() = GemmTileConfigToProto(space.front());
  return c;
}
inline v1::Config WgmmaConfig(const v1::GemmProblem& g) {
  const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(g, CompileOnlyTarget());
  REQUIRE_FALSE(space.empty());
  v1::Config c;
  *c.mutable_gemm()->mutable_wgmma() = WgmmaTileConfigToProto(space.front());
  return c;
}
inline v1::Config SkinnyConfigFor(const v1::GemmProblem& g) {
  const std::optional<SkinnyConfig> skinny = SkinnyUntunedConfig(g, CompileOnlyTarget());
  REQUIRE(skinny.has_value());
  v1::Config c;
  *c.mutable_gemm()->mutable_skinny() = SkinnyConfigToProto(*skinny);
  return c;
}
inline v1::Config CublasLtConfig(uint64_t workspace_bytes = 1 << 20) {
  v1::Config c;
  v1::CublasLtAlgorithm* a = c.mutable_gemm()->mutable_cublaslt();
  a->set_algo(std::string(64, '\x5a'));
  a->set_version(130100);
  a->set_workspace_bytes(workspace_bytes);
  return c;
}

// An entry as a daemon on `device` with this build would store it.
inline v1::Entry CurrentEntryOn(const DeviceInfo& device, const v1::Problem& problem, const v1::Config& config) {
  v1::Entry e;
  *e.mutable_problem() = problem;
  *e.mutable_device() = DeviceToProto(device);
  absl::StatusOr<SoftwareFingerprint> software = BuiltinOps().Software(problem);
  REQUIRE(software.ok());
  *e.mutable_software() = SoftwareToProto(*software);
  *e.mutable_config() = config;
  absl::StatusOr<LaunchRecipe> recipe = BuiltinOps().TemplateRecipe(problem, config, device);
  INFO(recipe.status().ToString());
  REQUIRE(recipe.ok());
  *e.mutable_recipe() = StoredRecipe(RecipeToProto(*recipe, /*include_cubin=*/false));
  v1::Measurement* m = e.mutable_measurement();
  m->set_time_us(12.5);
  m->set_spread(0.01);
  m->set_repetitions(30);
  m->set_throughput(1.5);
  m->set_throughput_unit("TB/s");
  e.set_tuned_at_unix(1795000000);
  e.set_candidates_measured(10);
  e.set_ktune_version("test");
  return e;
}

inline v1::Entry CurrentEntry(const v1::Problem& problem, const v1::Config& config) {
  return CurrentEntryOn(CompileOnlyTarget(), problem, config);
}

// `entry` with the recipe as an answer serves it: the template's, interface
// included (what the store and bundles must strip).
inline v1::Entry WithServedRecipe(const v1::Entry& entry) {
  absl::StatusOr<LaunchRecipe> served =
      BuiltinOps().TemplateRecipe(entry.problem(), entry.config(), CompileOnlyTarget());
  REQUIRE(served.ok());
  v1::Entry out = entry;
  *out.mutable_recipe() = RecipeToProto(*served, /*include_cubin=*/false);
  REQUIRE_FALSE(out.recipe().tensors().empty());
  return out;
}

// One current entry of each kind of recipe: a one-kernel norm, a backward
// norm with its reduce kernel and workspace, each GEMM template and cuBLASLt.
inline std::vector<v1::Entry> CurrentEntriesOfEveryKind() {
  const v1::Problem fwd = NormProblemOf(NormOp::kRMSNorm, NormPass::kForward, 4096, 4096);
  const v1::Problem bwd = NormProblemOf(NormOp::kLayerNorm, NormPass::kBackward, 5000, 2048, DType::kBF16, true);
  const v1::GemmProblem skinny = LinearGemm(1, 4096, 4096);
  const v1::GemmProblem big = LinearGemm(2048, 4096, 4096);
  return {CurrentEntry(fwd, HeuristicConfig(fwd)),
          CurrentEntry(bwd, HeuristicConfig(bwd)),
          CurrentEntry(GemmProblemOf(skinny), SkinnyConfigFor(skinny)),
          CurrentEntry(GemmProblemOf(big), WgmmaConfig(big)),
          CurrentEntry(GemmProblemOf(LinearGemm(512, 512, 512)), MmaConfig(LinearGemm(512, 512, 512))),
          CurrentEntry(GemmProblemOf(LinearGemm(4096, 4096, 4096)), CublasLtConfig())};
}

}  // namespace ktune::testutil
