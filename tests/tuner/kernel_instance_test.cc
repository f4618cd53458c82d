#include "tuner/compile/kernel_instance.h"

#include <catch2/catch.hpp>

namespace ktune {
namespace {

using Kind = TemplateParameter::Kind;

TEST_CASE("kernel template declarations parse: kinds, names, attributes, comments and defaults", "[tuner]") {
  const char* source = R"(
// template <int NOT_THIS> __global__ void commented_out();
template <typename T, int N>
struct NotAKernel {};
template <typename T> __device__ void not_global(T) {}
/* a block comment: template <bool X> */
template <typename TIn, bool HAS_W /* weight? */, int WARPS = 4,
          int CTAS>  // the occupancy
__global__ void __launch_bounds__(WARPS * 32, (min_blocks<WARPS, HAS_W>)) __cluster_dims__(2, 1, 1)
    my_kernel(const TIn* x, int n) {}
)";
  auto parsed = ParseKernelTemplates(source);
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 1);
  CHECK((*parsed)[0].first == "my_kernel");
  const std::vector<TemplateParameter>& p = (*parsed)[0].second;
  REQUIRE(p.size() == 4);
  CHECK((p[0].kind == Kind::kType && p[0].name == "TIn"));
  CHECK((p[1].kind == Kind::kBool && p[1].name == "HAS_W"));
  CHECK((p[2].kind == Kind::kInt && p[2].name == "WARPS"));
  CHECK((p[3].kind == Kind::kInt && p[3].name == "CTAS"));

  auto bad = ParseKernelTemplates("template <float F> __global__ void k() {}");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("kernel k: template parameter 'float F': unknown kind 'float'") !=
        std::string::npos);
}

TEST_CASE("every embedded kernel template's parameters are read from its declaration", "[tuner]") {
  for (const char* kernel :
       {"rmsnorm_fwd", "rmsnorm_bwd", "rmsnorm_bwd_cluster", "layernorm_fwd", "layernorm_bwd", "layernorm_bwd_cluster",
        "norm_bwd_reduce", "norm_check", "gemm_mma", "gemm_wgmma", "gemm_skinny", "gemm_reference"}) {
    INFO(kernel);
    auto p = KernelTemplateParameters(kernel);
    REQUIRE(p.ok());
    CHECK(p->size() >= 5);
  }
  auto rms = KernelTemplateParameters("rmsnorm_fwd");
  REQUIRE(rms.ok());
  std::vector<std::string> names;
  for (const TemplateParameter& p : *rms) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"TIn", "TOut", "TW", "HAS_WEIGHT", "RESIDUAL", "WEIGHT_OFFSET", "NUM_WARPS",
                                          "XBLOCK", "VEC", "CHUNKS", "PERSISTENT", "PIPELINE", "X_KEEP_L2",
                                          "FULL_TILES", "CTAS_PER_SM"});
  CHECK(KernelTemplateParameters("no_such_kernel").status().code() == absl::StatusCode::kNotFound);
}

KernelInstance RmsNormFwd() {
  KernelInstance t("rmsnorm_fwd");
  t.Type("TIn", "ktune::bf16").Type("TOut", "ktune::bf16").Type("TW", "float").Bool("HAS_WEIGHT", true);
  t.Bool("RESIDUAL", false).Bool("WEIGHT_OFFSET", false);
  t.Bool("PERSISTENT", true).Int("PIPELINE", 1).Bool("X_KEEP_L2", false).Bool("FULL_TILES", true);
  t.Int("CTAS_PER_SM", 3);
  return t;
}

TEST_CASE("a kernel instance places arguments by name, whatever order the host gives them in", "[tuner]") {
  KernelInstance in_order = RmsNormFwd();
  in_order.Int("NUM_WARPS", 8).Int("XBLOCK", 2).Int("VEC", 4).Int("CHUNKS", 1);
  KernelInstance shuffled = RmsNormFwd();
  shuffled.Int("CHUNKS", 1).Int("VEC", 4).Int("NUM_WARPS", 8).Int("XBLOCK", 2);
  REQUIRE(in_order.NameExpression().ok());
  CHECK(*in_order.NameExpression() ==
        "ktune::rmsnorm_fwd<ktune::bf16, ktune::bf16, float, true, false, false, 8, 2, 4, 1, true, 1, false, true, 3>");
  CHECK(shuffled.NameExpression().value() == in_order.NameExpression().value());
  // Two integers swapped by value are a different kernel, named so.
  KernelInstance swapped = RmsNormFwd();
  swapped.Int("NUM_WARPS", 8).Int("XBLOCK", 4).Int("VEC", 2).Int("CHUNKS", 1);
  CHECK(swapped.NameExpression().value() != in_order.NameExpression().value());
}

TEST_CASE("a kernel instance refuses an unknown, mistyped, repeated or missing argument, naming it", "[tuner]") {
  auto error = [](KernelInstance t) { return std::string(t.NameExpression().status().message()); };
  CHECK(error(std::move(RmsNormFwd().Int("NUM_WARPS", 8).Int("XBLOCK", 2).Int("VEC", 4))) ==
        "rmsnorm_fwd: template parameter CHUNKS was not given");
  CHECK(error(std::move(RmsNormFwd().Int("WARPS", 8))) == "rmsnorm_fwd has no template parameter WARPS");
  CHECK(error(std::move(RmsNormFwd().Bool("VEC", true))) ==
        "rmsnorm_fwd: template parameter VEC is not of the kind given");
  CHECK(error(std::move(RmsNormFwd().Int("PIPELINE", 2))) == "rmsnorm_fwd: template parameter PIPELINE given twice");
  CHECK(KernelInstance("nope").NameExpression().status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ktune
