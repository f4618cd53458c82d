// The GEMM tuner's parts that need no GPU: how the winner is picked among
// the re-measured finalists, and that the reference every candidate is
// checked against compiles for every kind of problem.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tuner/gemm_tuner.h"
#include "tuner/kernel_source.h"
#include "tuner/nvrtc_compiler.h"

namespace ktune {
namespace {

Timing At(double us, double spread = 0.005) {
  Timing t;
  t.median_us = us;
  t.spread = spread;
  t.repetitions = 100;
  return t;
}

TEST_CASE("the GEMM winner is the fastest unless a preferred candidate ties it", "[tuner][gemm]") {
  // preference: cuBLASLt's default is 0, its other algorithms 1.., templates 1000..
  CHECK(PickGemmWinner({At(100), At(90), At(95)}, {0, 1000, 1001}) == 1);
  // Within 1% (the minimum window) of the fastest: cuBLASLt's default keeps it.
  CHECK(PickGemmWinner({At(100.5), At(100)}, {0, 1000}) == 0);
  // Just outside the window: the faster template wins.
  CHECK(PickGemmWinner({At(101.5), At(100)}, {0, 1000}) == 1);
  // A noisy fastest widens the window up to 3%, never more.
  CHECK(PickGemmWinner({At(102.5), At(100, 0.2)}, {0, 1000}) == 0);
  CHECK(PickGemmWinner({At(103.5), At(100, 0.2)}, {0, 1000}) == 1);
  // Among tied templates, the earlier in space order.
  CHECK(PickGemmWinner({At(100.2), At(100), At(100.1)}, {1002, 1001, 1000}) == 2);
}

TEST_CASE("the GEMM reference compiles for every input type, layout, epilogue, C and D type", "[tuner][gemm][nvrtc]") {
  absl::StatusOr<const KernelSource*> source = FindKernelSource("gemm/gemm_reference");
  REQUIRE(source.ok());
  std::vector<LaunchRecipe> recipes;
  for (auto [ab, d] : {std::pair{"ktune::bf16", "ktune::bf16"}, std::pair{"ktune::bf16", "float"},
                       std::pair{"ktune::e4m3", "ktune::bf16"}}) {
    for (const char* b_nk : {"true", "false"}) {
      for (int epi = 0; epi <= 3; ++epi) {
        for (const char* has_c : {"true", "false"}) {
          LaunchRecipe r;
          r.template_id = "gemm/gemm_reference";
          r.template_hash = (*source)->hash;
          r.arch = "sm_90";
          r.nvrtc_options = {"--gpu-architecture=sm_90", "-std=c++17"};
          KernelLaunch k;
          k.name_expression = absl::StrFormat("ktune::gemm_reference<%s, %s, %s, %d, %s>", ab, d, b_nk, epi, has_c);
          r.kernels.push_back(k);
          recipes.push_back(r);
        }
      }
    }
  }
  const std::vector<CompileResult> results = CompileAll(&recipes);
  for (size_t i = 0; i < recipes.size(); ++i) {
    INFO(recipes[i].kernels[0].name_expression << "\n" << results[i].log);
    CHECK(results[i].ok);
    CHECK_FALSE(recipes[i].kernels[0].lowered_name.empty());
  }
}

}  // namespace
}  // namespace ktune
