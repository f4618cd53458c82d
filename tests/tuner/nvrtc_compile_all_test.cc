// NVRTC compiles every config the space offers, for every op, over a
// representative problem set (the bench shapes, odd N, every dtype, fp32
// weights, with and without weight/bias, and a sweep of row lengths), for
// sm_90, with no GPU: the half of the contract in norm_space.h that CI can
// check. Identical recipes (same name expressions) compile once. Also checks
// the register model: no candidate spills.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/tuner/norm_variant_problems.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/sha256.h"
#include "tuner/norm/norm_runner.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

NormProblem Rms(int64_t m, int64_t n, DType in, DType out, bool weight) {
  NormProblem p;
  p.op = NormOp::kRMSNorm;
  p.pass = NormPass::kForward;
  p.m = m;
  p.n = n;
  p.input_dtype = in;
  p.output_dtype = out;
  p.weight_dtype = in;
  p.has_weight = weight;
  return p;
}

std::vector<NormProblem> RepresentativeProblems() {
  std::vector<NormProblem> out;
  const DType bf16 = DType::kBF16;
  // The bench shapes.
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{
           {32768, 1024}, {32768, 4096}, {16384, 8192}, {8192, 16384}, {65536, 2048}, {4096, 4096}}) {
    out.push_back(Rms(m, n, bf16, bf16, true));
  }
  // Odd and extreme row lengths, tiny M.
  out.push_back(Rms(4096, 1, bf16, bf16, true));
  out.push_back(Rms(4096, 3000, bf16, bf16, true));
  out.push_back(Rms(4096, 262144, bf16, bf16, true));
  out.push_back(Rms(1, 3000, bf16, bf16, true));
  out.push_back(Rms(7, 3, bf16, bf16, true));
  // Other dtypes, without weight, and mixed output types.
  out.push_back(Rms(32768, 4096, DType::kFP16, DType::kFP16, true));
  out.push_back(Rms(32768, 4096, DType::kFP32, DType::kFP32, true));
  out.push_back(Rms(4096, 3000, DType::kFP32, DType::kFP32, false));
  out.push_back(Rms(4096, 262144, DType::kFP32, DType::kFP32, true));
  out.push_back(Rms(4096, 5120, DType::kFP16, DType::kFP16, false));
  out.push_back(Rms(4096, 1000, DType::kBF16, DType::kFP32, true));
  out.push_back(Rms(7, 3, DType::kFP16, DType::kBF16, true));
  return out;
}

NormProblem Op(NormOp op, NormPass pass, int64_t m, int64_t n, DType d, DType wt, bool weight, bool bias) {
  NormProblem p = Rms(m, n, d, d, weight);
  p.op = op;
  p.pass = pass;
  p.weight_dtype = wt;
  p.has_bias = bias;
  return p;
}

// The other three ops over the bench shapes, odd N and the dtype/weight
// variants. Kept to what 2 CI cores compile in about 3 minutes: the sweep
// over M is left to the space invariants test (M mostly changes the grid and
// SPLIT_SIZE, i.e. few new name expressions).
std::vector<NormProblem> OtherOpProblems() {
  std::vector<NormProblem> out;
  const DType bf16 = DType::kBF16;
  for (auto [op, pass] :
       {std::pair{NormOp::kRMSNorm, NormPass::kBackward}, std::pair{NormOp::kLayerNorm, NormPass::kForward},
        std::pair{NormOp::kLayerNorm, NormPass::kBackward}}) {
    const bool ln = op == NormOp::kLayerNorm;
    for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{32768, 1024},
                                                                {32768, 4096},
                                                                {16384, 8192},
                                                                {8192, 16384},
                                                                {65536, 2048},
                                                                {4096, 4096},
                                                                {4096, 5120},
                                                                {16384, 12288}}) {
      out.push_back(Op(op, pass, m, n, bf16, bf16, true, ln));
    }
    for (int64_t n : {1, 3, 1000, 3000, 14336, 262144}) {
      out.push_back(Op(op, pass, 1000, n, bf16, bf16, true, ln));
    }
    out.push_back(Op(op, pass, 1, 3000, bf16, bf16, true, ln));
    out.push_back(Op(op, pass, 4096, 4096, DType::kFP16, DType::kFP16, true, ln));
    out.push_back(Op(op, pass, 4096, 4096, DType::kFP32, DType::kFP32, true, ln));
    out.push_back(Op(op, pass, 4096, 4096, bf16, DType::kFP32, true, ln));
    out.push_back(Op(op, pass, 4096, 3000, bf16, bf16, false, false));
    out.push_back(Op(op, pass, 7, 3, DType::kFP16, DType::kFP32, true, false));
    if (pass == NormPass::kBackward) {  // decode steps: the single-CTA and single-cluster kernels
      out.push_back(Op(op, pass, 16, 4096, bf16, bf16, true, ln));
      out.push_back(Op(op, pass, 64, 8192, bf16, bf16, true, ln));
    }
  }
  return out;
}

// Every RMSNorm forward problem of tests/tuner/space_invariants_test.cc too.
std::vector<NormProblem> SweepProblems() {
  std::vector<NormProblem> out;
  for (int64_t m : {1, 7, 4096, 65536}) {
    for (int64_t n : {1, 3, 1000, 1024, 3000, 4096, 5120, 8192, 16384, 262144}) {
      for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32}) {
        for (bool w : {true, false}) {
          NormProblem p = Rms(m, n, d, d, w);
          if (ValidateNormProblem(p).ok()) out.push_back(p);
        }
      }
    }
  }
  return out;
}

void CompileEverything(const std::vector<NormProblem>& problems) {
  const DeviceInfo device = CompileOnlyTarget();
  std::map<std::string, std::string> owner;  // name expression -> first problem/config
  std::vector<LaunchRecipe> recipes;
  for (const NormProblem& p : problems) {
    for (const NormConfig& c : NormSearchSpace(p, device)) {
      absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, device);
      INFO(CanonicalKey(p) << " " << ToString(c));
      REQUIRE(r.ok());
      std::string name;  // the recipe's identity: every kernel it instantiates
      for (const KernelLaunch& k : r->kernels) name += k.name_expression + ";";
      if (!owner.emplace(name, CanonicalKey(p) + " " + ToString(c)).second) continue;
      r->nvrtc_options.push_back("--ptxas-options=--verbose");  // register report in the log
      recipes.push_back(*std::move(r));
    }
  }
  REQUIRE(recipes.size() > 100);

  const auto start = std::chrono::steady_clock::now();
  const std::vector<CompileResult> results = CompileAll(&recipes);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("compiled %zu distinct kernels in %.1f s\n", recipes.size(), seconds);

  const std::regex spill(R"((\d+) bytes spill stores)");
  int failed = 0;
  int spilled = 0;
  for (size_t i = 0; i < recipes.size(); ++i) {
    const LaunchRecipe& r = recipes[i];
    std::string name;
    for (const KernelLaunch& k : r.kernels) name += k.name_expression + ";";
    INFO(name << " (from " << owner[name] << ")\n" << results[i].log);
    if (!results[i].ok) ++failed;
    CHECK(results[i].ok);
    if (!results[i].ok) continue;
    CHECK_FALSE(r.cubin.empty());
    for (const KernelLaunch& k : r.kernels) CHECK_FALSE(k.lowered_name.empty());
    // One report per kernel; every one must say 0 bytes.
    const std::string& log = results[i].log;
    int reports = 0;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it) {
      ++reports;
      if ((*it)[1] != "0") {
        ++spilled;
        FAIL_CHECK("spills under the register model");
      }
    }
    CHECK(reports >= static_cast<int>(r.kernels.size()));
  }
  CHECK(failed == 0);
  CHECK(spilled == 0);
}

TEST_CASE("NVRTC compiles every config of the space for sm_90", "[tuner][nvrtc][slow]") {
  std::vector<NormProblem> problems = RepresentativeProblems();
  for (const NormProblem& p : SweepProblems()) problems.push_back(p);
  for (const NormProblem& p : OtherOpProblems()) problems.push_back(p);
  CompileEverything(problems);
}

// The variants (ktune.proto's NormProblem) at the bench shapes, odd and short
// rows (N = 1, 3, 3000; N = 128, the per-head q/k norm), a looped row
// (262144) and every input dtype: the residual add (RMSNorm, both passes),
// the weight offset (both ops, both passes), the fp8 output alone and with
// the residual add.
std::vector<NormProblem> VariantProblems() {
  std::vector<NormProblem> out;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{65536, 2048}, {4096, 4096}, {8192, 128}, {1000, 3000},
                                                           {7, 3},        {3, 1},       {4, 262144}};
  for (auto [m, n] : shapes) {
    for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32}) {
      const bool bench = d == DType::kBF16 || m < 1000;  // 16- and 32-bit types at the small shapes only
      if (!bench) continue;
      for (const NormProblem& p : NormVariantsOf(m, n, d)) out.push_back(p);
    }
  }
  for (const NormProblem& p : out) REQUIRE(ValidateNormProblem(p).ok());
  return out;
}

TEST_CASE("NVRTC compiles every config of the variants' spaces for sm_90", "[tuner][nvrtc][slow][variants]") {
  CompileEverything(VariantProblems());
}

TEST_CASE("The device check of norm outputs compiles for every op and type", "[tuner][nvrtc][slow]") {
  const DeviceInfo device = CompileOnlyTarget();
  const std::vector<DType> types = {DType::kBF16, DType::kFP16, DType::kFP32};
  std::map<std::string, LaunchRecipe> unique;  // by name expression
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) {
      for (DType in : types) {
        for (DType out : types) {
          for (DType wt : {in, DType::kFP32}) {
            for (auto [weight, bias] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
              for (int variant = 0; variant < 4; ++variant) {  // plain, offset, residual, fp8 output
                NormProblem p = Op(op, pass, 3, 5, in, wt, weight, bias);
                p.output_dtype = out;
                p.weight_offset = variant == 1;
                p.residual = variant == 2;
                if (variant == 3) p.output_dtype = DType::kFP8E4M3;
                if (variant == 3 && out != in) continue;
                if (!ValidateNormProblem(p).ok()) continue;
                absl::StatusOr<LaunchRecipe> r = NormCheckRecipe(p, device);
                REQUIRE(r.ok());
                REQUIRE(r->kernels.size() == 1);
                const std::string& name = r->kernels[0].name_expression;
                // The bias enters only the forward's output (LayerNorm's); the
                // residual only the backward's (the forward's is checked as h).
                const bool has_b = pass == NormPass::kForward && op == NormOp::kLayerNorm && bias;
                const bool res = pass == NormPass::kBackward && p.residual;
                INFO(CanonicalKey(p) << " -> " << name);
                const std::string last = absl::StrCat(
                    has_b ? ", true" : ", false", p.weight_offset ? ", true" : ", false", res ? ", true>" : ", false>");
                CHECK(name.compare(name.size() - last.size(), last.size(), last) == 0);
                unique.emplace(name, *std::move(r));
              }
            }
          }
        }
      }
    }
  }
  std::vector<LaunchRecipe> recipes;
  for (auto& [name, r] : unique) recipes.push_back(r);
  CHECK(recipes.size() >= 60);
  const std::vector<CompileResult> results = CompileAll(&recipes);
  for (size_t i = 0; i < recipes.size(); ++i) {
    INFO(recipes[i].kernels[0].name_expression << "\n" << results[i].log);
    CHECK(results[i].ok);
    CHECK(recipes[i].kernels[0].lowered_name.rfind("_ZN5ktune10norm_check", 0) == 0);
  }
}

TEST_CASE("The device check's grid covers any problem with at most 8 blocks an SM", "[tuner]") {
  const DeviceInfo device = CompileOnlyTarget();
  for (auto [m, n] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 255}, {1, 257}, {3, 1000}, {65536, 2048}, {4096, 262144}}) {
    const NormProblem p = Rms(m, n, DType::kBF16, DType::kBF16, true);
    absl::StatusOr<LaunchRecipe> r = NormCheckRecipe(p, device);
    REQUIRE(r.ok());
    const KernelLaunch& k = r->kernels[0];
    INFO(m << " x " << n);
    CHECK(k.block[0] == 256);  // norm_check's contract
    CHECK(k.grid[0] >= 1);
    CHECK(int64_t{k.grid[0]} <= std::max<int64_t>((m * n + 255) / 256, 1));
    CHECK(int64_t{k.grid[0]} <= 8 * device.sm_count);
    CHECK(k.params.size() == 13);
  }
  NormProblem bad = Rms(0, 8, DType::kBF16, DType::kBF16, true);
  CHECK(NormCheckRecipe(bad, device).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Compile reports errors as values with the NVRTC log", "[tuner][nvrtc]") {
  const DeviceInfo device = CompileOnlyTarget();
  const NormProblem p = Rms(4096, 4096, DType::kBF16, DType::kBF16, true);
  absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, HeuristicNormConfig(p, device), device);
  REQUIRE(r.ok());

  SECTION("a good recipe compiles and gets its lowered name") {
    const CompileResult c = Compile(&*r);
    INFO(c.log);
    REQUIRE(c.ok);
    CHECK(r->kernels[0].lowered_name.rfind("_ZN5ktune11rmsnorm_fwd", 0) == 0);
    CHECK(r->cubin.size() > 1000);
    CHECK(c.compile_seconds > 0);
  }
  SECTION("a bad instantiation fails with the static_assert in the log") {
    r->kernels[0].name_expression =
        "ktune::rmsnorm_fwd<ktune::bf16, ktune::bf16, ktune::bf16, true, false, false, 4, 1, 16, 1, true, 1, "
        "false, false, 1>";  // 32-byte bf16 vectors
    const CompileResult c = Compile(&*r);
    CHECK_FALSE(c.ok);
    CHECK(c.log.find("nvrtcCompileProgram") != std::string::npos);
    CHECK(c.log.find("16 bytes") != std::string::npos);
    CHECK(r->cubin.empty());
  }
  SECTION("an unknown template is an error value") {
    r->template_id = "norm/no_such_kernel";
    const CompileResult c = Compile(&*r);
    CHECK_FALSE(c.ok);
    CHECK(c.log.find("no_such_kernel") != std::string::npos);
  }
  SECTION("a recipe made from other template text is refused") {
    r->template_hash = std::string(64, '0');
    const CompileResult c = Compile(&*r);
    CHECK_FALSE(c.ok);
    CHECK(c.log.find("template hash") != std::string::npos);
  }
}

TEST_CASE("CompileAll keeps results in order and reports progress", "[tuner][nvrtc]") {
  const DeviceInfo device = CompileOnlyTarget();
  std::vector<LaunchRecipe> recipes;
  for (int64_t n : {1024, 3000, 5}) {
    const NormProblem p = Rms(64, n, DType::kBF16, DType::kBF16, true);
    absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, HeuristicNormConfig(p, device), device);
    REQUIRE(r.ok());
    recipes.push_back(*r);
  }
  recipes[1].kernels[0].name_expression = "ktune::rmsnorm_fwd<int>";  // fails
  std::vector<int> done;
  const std::vector<CompileResult> results = CompileAll(&recipes, 2, [&](int finished) { done.push_back(finished); });
  REQUIRE(results.size() == 3);
  CHECK(results[0].ok);
  CHECK_FALSE(results[1].ok);
  CHECK(results[2].ok);
  CHECK(done == std::vector<int>{1, 2, 3});
}

TEST_CASE("Kernel sources are embedded and hashed with their includes", "[tuner][nvrtc]") {
  CHECK(Sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  absl::StatusOr<const KernelSource*> s = FindKernelSource("norm/rmsnorm_fwd");
  REQUIRE(s.ok());
  CHECK((*s)->path == "norm/rmsnorm_fwd.cuh");
  CHECK((*s)->hash.size() == 64);
  CHECK((*s)->hash != Sha256Hex((*s)->text));  // covers the includes too
  CHECK((*s)->text.find("rmsnorm_fwd") != std::string::npos);
  CHECK((*s)->header_names.size() == (*s)->header_texts.size());
  bool has_types = false;
  for (const std::string& h : (*s)->header_names) has_types |= h == "common/types.cuh";
  CHECK(has_types);
  // Templates include no host or CUDA headers: only each other.
  for (const std::string& text : (*s)->header_texts) {
    CHECK(text.find("#include <") == std::string::npos);
  }
  CHECK(FindKernelSource("norm/nope").status().code() == absl::StatusCode::kNotFound);
  CHECK(NvrtcVersion() >= 12000);
}

}  // namespace
}  // namespace ktune
