// Every candidate of every kernel template's search space reaches its
// template with the same arguments as the checked-in golden list
// (tests/data/template_instances.golden): a change to how the host spells an
// instantiation (a reordered or swapped argument compiles a different valid
// kernel) fails here, without a GPU. The list is over a fixed set of
// problems on the compile-only target (sm_90), unpruned spaces included.
//
// After a deliberate change to a space or a template's parameters,
// regenerate it and review the diff:
//   KTUNE_WRITE_GOLDEN=1 build/tests/ktune_tests "[golden]"
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/tuner/gemm_problem_builder.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/problem.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

const std::string kGolden = std::string(KTUNE_SOURCE_DIR) + "/tests/data/template_instances.golden";

std::string Instances(const absl::StatusOr<LaunchRecipe>& recipe) {
  if (!recipe.ok()) return absl::StrCat("error: ", recipe.status().message());
  std::vector<std::string> names;
  for (const KernelLaunch& k : recipe->kernels) names.push_back(k.name_expression);
  return absl::StrJoin(names, " ; ");
}

std::vector<NormProblem> GoldenNormProblems() {
  std::vector<NormProblem> out;
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) {
      auto add = [&](int64_t m, int64_t n, DType in, DType wt, bool weight, bool bias) {
        NormProblem p;
        p.op = op;
        p.pass = pass;
        p.m = m;
        p.n = n;
        p.input_dtype = p.output_dtype = in;
        p.weight_dtype = wt;
        p.has_weight = weight;
        p.has_bias = op == NormOp::kLayerNorm && bias;
        out.push_back(p);
      };
      add(8192, 4096, DType::kBF16, DType::kBF16, true, true);
      add(1, 4096, DType::kBF16, DType::kBF16, true, false);
      add(4096, 5120, DType::kFP16, DType::kFP32, true, true);
      add(32768, 1024, DType::kFP32, DType::kFP32, false, false);
      add(16, 65536, DType::kBF16, DType::kBF16, true, true);
    }
  }
  return out;
}

std::vector<v1::GemmProblem> GoldenGemmProblems() {
  std::vector<v1::GemmProblem> out;
  auto add = [&](int64_t m, int64_t n, int64_t k, v1::DType ab, v1::DType d, v1::Layout b, v1::Epilogue epi, bool c) {
    out.push_back(MakeGemm({m, n, k, ab, d, b, epi, c ? d : v1::DTYPE_UNSPECIFIED}));
  };
  add(8192, 8192, 8192, v1::BF16, v1::BF16, v1::COL_MAJOR, v1::EPILOGUE_NONE, false);
  add(2048, 4096, 14336, v1::BF16, v1::BF16, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_GELU, false);
  add(128, 4096, 4096, v1::BF16, v1::FP32, v1::COL_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, true);
  add(16, 4096, 4096, v1::BF16, v1::BF16, v1::COL_MAJOR, v1::EPILOGUE_BIAS, false);
  add(1, 14336, 4096, v1::BF16, v1::BF16, v1::COL_MAJOR, v1::EPILOGUE_NONE, false);
  add(8192, 4096, 14336, v1::FP8_E4M3, v1::BF16, v1::COL_MAJOR, v1::EPILOGUE_NONE, false);
  add(1, 4096, 4096, v1::FP8_E4M3, v1::BF16, v1::COL_MAJOR, v1::EPILOGUE_BIAS_SILU, false);
  return out;
}

// One line per (problem, space, config): what the host instantiates.
std::vector<std::string> CurrentLines() {
  const DeviceInfo device = CompileOnlyTarget();
  std::vector<std::string> lines;
  for (const NormProblem& p : GoldenNormProblems()) {
    lines.push_back(absl::StrCat("= ", CanonicalKey(p)));
    std::set<std::string> seen;
    auto emit = [&](const char* space, const NormConfig& c) {
      std::string line = absl::StrCat(space, "\t", ToString(c), " rr=", c.reduce_rows, " cl=", c.cluster, "\t",
                                      Instances(NormLaunchRecipe(p, c, device)));
      if (seen.insert(line).second) lines.push_back(std::move(line));
    };
    SpaceOptions unpruned;
    unpruned.pruned = false;
    for (const NormConfig& c : NormSearchSpace(p, device, unpruned)) emit("norm", c);
    NormConfig heuristic = HeuristicNormConfig(p, device);
    emit("norm-heuristic", heuristic);
    for (int rows : ReduceRowsCandidates(p, heuristic)) {
      heuristic.reduce_rows = rows;
      emit("norm-reduce-rows", heuristic);
    }
  }
  // The whole grid for the first bf16 and the first fp8 problem; the other
  // problems' spaces pruned, as tuning uses them, with room to spare.
  GemmSpaceOptions whole;
  whole.pruned = false;
  GemmSpaceOptions pruned;
  pruned.max_candidates = 48;
  std::set<v1::DType> whole_done;
  for (const v1::GemmProblem& p : GoldenGemmProblems()) {
    const GemmSpaceOptions& options = whole_done.insert(p.a_dtype()).second ? whole : pruned;
    lines.push_back(absl::StrCat("= ", GemmCanonicalKey(p), options.pruned ? "" : " (whole grid)"));
    for (const GemmTileConfig& c : GemmSearchSpace(p, device, options)) {
      lines.push_back(absl::StrCat("mma\t", ToString(c), "\t", Instances(GemmLaunchRecipe(p, c, device))));
    }
    for (const WgmmaTileConfig& c : WgmmaSearchSpace(p, device, options)) {
      lines.push_back(absl::StrCat("wgmma\t", ToString(c), "\t", Instances(WgmmaLaunchRecipe(p, c, device))));
    }
    for (const SkinnyConfig& c : SkinnySearchSpace(p, device)) {
      lines.push_back(absl::StrCat("skinny\t", ToString(c), "\t", Instances(SkinnyLaunchRecipe(p, c, device))));
    }
  }
  return lines;
}

std::vector<std::string> GoldenLines() {
  std::ifstream in(kGolden);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

TEST_CASE("every candidate of every space instantiates its template as the golden list says", "[tuner][golden]") {
  const std::vector<std::string> current = CurrentLines();
  if (std::getenv("KTUNE_WRITE_GOLDEN") != nullptr) {
    std::ofstream out(kGolden);
    out << "# '= problem', then a line per config: space\tconfig\tname expressions "
           "(tests/tuner/template_instances_test.cc)\n";
    for (const std::string& line : current) out << line << "\n";
    WARN("wrote " << current.size() << " lines to " << kGolden);
  }
  const std::vector<std::string> golden = GoldenLines();
  REQUIRE(golden.size() > 1000);  // the list is there and covers the spaces
  for (const char* space : {"norm\t", "mma\t", "wgmma\t", "skinny\t", "norm-reduce-rows\t"}) {
    INFO(space);
    CHECK(std::count_if(golden.begin(), golden.end(), [&](const std::string& l) { return l.rfind(space, 0) == 0; }) >
          0);
  }
  CHECK(current.size() == golden.size());
  int shown = 0;
  for (size_t i = 0; i < std::min(current.size(), golden.size()); ++i) {
    if (current[i] == golden[i]) continue;
    if (++shown <= 5) FAIL_CHECK("line " << i + 2 << "\n  golden:  " << golden[i] << "\n  current: " << current[i]);
  }
  CHECK(shown == 0);
}

TEST_CASE("the golden list tells two configs apart whose knobs are swapped", "[tuner][golden]") {
  // Swapping two of a config's integers yields a valid but different kernel;
  // the list must see the difference, or it could not catch a host that
  // passes them in the wrong order.
  const DeviceInfo device = CompileOnlyTarget();
  int compared = 0;
  for (const NormProblem& p : GoldenNormProblems()) {
    for (const NormConfig& c : NormSearchSpace(p, device)) {
      NormConfig swapped = c;
      std::swap(swapped.x_block, swapped.pipeline_depth);
      if (swapped == c) continue;
      absl::StatusOr<LaunchRecipe> a = NormLaunchRecipe(p, c, device), b = NormLaunchRecipe(p, swapped, device);
      if (!a.ok() || !b.ok() || !CanImplement(p, swapped, device).ok()) continue;
      ++compared;
      CHECK(Instances(a) != Instances(b));
    }
  }
  CHECK(compared > 0);
}

}  // namespace
}  // namespace ktune
