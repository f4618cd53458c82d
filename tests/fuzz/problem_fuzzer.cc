// libFuzzer target: a v1::Problem as a GetConfig or Tune request carries it,
// decoded from the wire and judged as ktuned's Resolve does (NormProblemFromProto,
// ValidateNormProblem / ValidateGemmProblem, the canonical key), then the
// heuristic answer a valid problem gets on a cache miss (config and launch
// recipe: the grid and workspace arithmetic) for the compile-only target.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/norm/norm_space.h"

namespace {

void Norm(const ktune::v1::NormProblem& wire, const ktune::DeviceInfo& device) {
  absl::StatusOr<ktune::NormProblem> problem = ktune::NormProblemFromProto(wire);
  if (!problem.ok() || !ktune::ValidateNormProblem(*problem).ok()) return;
  const std::string key = ktune::CanonicalKey(*problem);
  // The key is a function of the problem: its own wire form gives it back.
  absl::StatusOr<ktune::NormProblem> again = ktune::NormProblemFromProto(ktune::NormProblemToProto(*problem));
  if (!again.ok() || ktune::CanonicalKey(*again) != key) std::abort();
  const ktune::NormConfig config = ktune::HeuristicNormConfig(*problem, device);
  if (!ktune::CanImplement(*problem, config, device).ok()) std::abort();  // documented: always accepted
  (void)ktune::NormLaunchRecipe(*problem, config, device);
}

void Gemm(const ktune::v1::GemmProblem& problem, const ktune::DeviceInfo& device) {
  if (!ktune::ValidateGemmProblem(problem).ok()) return;
  (void)ktune::GemmCanonicalKey(problem);
  (void)ktune::GemmFlops(problem);
  // The untuned answer's sources, in the daemon's order.
  if (const std::optional<ktune::SkinnyConfig> skinny = ktune::SkinnyUntunedConfig(problem, device)) {
    (void)ktune::SkinnyLaunchRecipe(problem, *skinny, device);
    return;
  }
  const std::vector<ktune::WgmmaTileConfig> wgmma = ktune::WgmmaSearchSpace(problem, device);
  if (!wgmma.empty()) (void)ktune::WgmmaLaunchRecipe(problem, wgmma.front(), device);
  const std::vector<ktune::GemmTileConfig> mma = ktune::GemmSearchSpace(problem, device);
  if (!mma.empty()) (void)ktune::GemmLaunchRecipe(problem, mma.front(), device);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ktune::v1::Problem problem;
  if (!problem.ParseFromArray(data, static_cast<int>(size))) return 0;
  static const ktune::DeviceInfo device = ktune::CompileOnlyTarget();
  if (problem.has_norm()) Norm(problem.norm(), device);
  if (problem.has_gemm()) Gemm(problem.gemm(), device);
  return 0;
}
