// Writes the binary seeds of tests/fuzz/corpus (bundles and wire problems)
// from the test helpers, so they can be re-made when the formats change:
//   build-fuzz/tests/fuzz/ktune_fuzz_seeds tests/fuzz/corpus
// The text seeds (shapes files, model configs) are checked in as written.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cache/bundle.h"
#include "tests/cache/test_entries.h"
#include "tests/tuner/gemm_problem_builder.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_space.h"

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) std::fprintf(stderr, "cannot write %s\n", path.c_str());
}

// An entry as this build would store it for the compile-only target: the
// real template hash and the recipe NormLaunchRecipe writes.
ktune::v1::Entry LocalEntry(const ktune::NormProblem& p) {
  ktune::v1::Entry e = ktune::testutil::MakeTestEntry(p.m, p.n);
  *e.mutable_problem()->mutable_norm() = ktune::NormProblemToProto(p);
  *e.mutable_device() = ktune::DeviceToProto(ktune::CompileOnlyTarget());
  const ktune::NormConfig config = ktune::HeuristicNormConfig(p, ktune::CompileOnlyTarget());
  *e.mutable_config()->mutable_norm() = ktune::NormConfigToProto(config);
  absl::StatusOr<const ktune::KernelSource*> source = ktune::FindKernelSource(ktune::NormTemplateId(p));
  if (source.ok()) {
    *e.mutable_software() = ktune::SoftwareToProto({(*source)->hash, ktune::NvrtcVersion(), ktune::kSchemaVersion});
  }
  if (absl::StatusOr<ktune::LaunchRecipe> recipe = ktune::NormLaunchRecipe(p, config, ktune::CompileOnlyTarget());
      recipe.ok()) {
    *e.mutable_recipe() = ktune::RecipeToProto(*recipe, false);
  }
  return e;
}

// A GEMM with B as [N, K] (nn.Linear's), bf16 or fp8 A and B, bf16 D.
ktune::v1::GemmProblem Gemm(int64_t m, int64_t n, int64_t k, ktune::v1::DType ab = ktune::v1::BF16) {
  return ktune::MakeGemm({m, n, k, ab});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ktune_fuzz_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  ktune::NormProblem bwd;
  bwd.op = ktune::NormOp::kLayerNorm;
  bwd.pass = ktune::NormPass::kBackward;
  bwd.m = 5000;
  bwd.n = 2048;
  bwd.has_bias = true;
  const std::vector<ktune::v1::Entry> helpers = {ktune::testutil::MakeTestEntry(),
                                                 ktune::testutil::MakeTestEntry(8192, 4096),
                                                 ktune::testutil::MakeTestGemmEntry()};
  ktune::NormProblem fwd;
  fwd.m = 4096;
  fwd.n = 4096;
  const std::vector<ktune::v1::Entry> local = {LocalEntry(fwd), LocalEntry(bwd)};
  for (const auto& [name, entries] : {std::pair{"helpers", helpers}, std::pair{"local", local}}) {
    const std::string file = ktune::EncodeBundle(entries, "ktune_fuzz_seeds", 1764400000);
    Write(dir + "/bundle/" + name + ".file", "F" + file);
    Write(dir + "/bundle/" + name + ".payload", "P" + file.substr(ktune::kBundleHeaderBytes));
  }

  ktune::v1::Problem norm;
  *norm.mutable_norm() = ktune::NormProblemToProto(fwd);
  Write(dir + "/problem/rmsnorm_fwd.pb", norm.SerializeAsString());
  *norm.mutable_norm() = ktune::NormProblemToProto(bwd);
  Write(dir + "/problem/layernorm_bwd.pb", norm.SerializeAsString());
  ktune::v1::Problem gemm;
  *gemm.mutable_gemm() = Gemm(4096, 4096, 4096);
  Write(dir + "/problem/gemm.pb", gemm.SerializeAsString());
  *gemm.mutable_gemm() = Gemm(1, 14336, 4096);
  Write(dir + "/problem/gemm_skinny.pb", gemm.SerializeAsString());
  *gemm.mutable_gemm() = Gemm(2048, 4096, 8192, ktune::v1::FP8_E4M3);
  Write(dir + "/problem/gemm_fp8.pb", gemm.SerializeAsString());
  return 0;
}
