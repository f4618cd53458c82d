// Problems derived from model configs (client/model_shapes.h), checked on
// real configs kept in tests/data: Llama-3-8B (RMSNorm, GQA) and Qwen3-8B
// (explicit head_dim and per-head q/k RMSNorm).
#include "client/model_shapes.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

std::string DataPath(const char* name) {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / name).string();
}

const std::vector<int64_t> kTokens = {1, 16, 128, 2048, 8192};

std::vector<NormProblem> Norms(const std::vector<PrewarmProblem>& problems) {
  std::vector<NormProblem> out;
  for (const PrewarmProblem& p : problems) {
    if (p.problem.has_gemm()) continue;
    absl::StatusOr<NormProblem> n = NormProblemFromProto(p.problem.norm());
    REQUIRE(n.ok());
    out.push_back(*n);
  }
  return out;
}

std::set<std::tuple<int64_t, int64_t, int64_t>> GemmShapes(const std::vector<PrewarmProblem>& problems) {
  std::set<std::tuple<int64_t, int64_t, int64_t>> out;
  for (const PrewarmProblem& p : problems) {
    if (p.problem.has_gemm()) out.emplace(p.problem.gemm().m(), p.problem.gemm().n(), p.problem.gemm().k());
  }
  return out;
}

TEST_CASE("Llama-3-8B: one RMSNorm per token count, and the layer's GEMMs", "[client][model]") {
  auto config = LoadModelConfig(DataPath("llama-3-8b.config.json"));
  REQUIRE(config.ok());
  CHECK(config->hidden_size == 4096);
  CHECK(config->intermediate_size == 14336);
  CHECK(config->num_attention_heads == 32);
  CHECK(config->num_key_value_heads == 8);
  CHECK(config->head_dim == 128);
  CHECK(config->vocab_size == 128256);
  CHECK(config->norm == NormOp::kRMSNorm);
  CHECK(config->eps == 1e-5f);
  CHECK_FALSE(config->qk_norm);
  CHECK(config->dtype == DType::kBF16);

  SECTION("forward") {
    auto problems = DeriveModelProblems(*config, {kTokens, false, std::nullopt});
    REQUIRE(problems.ok());
    const std::vector<NormProblem> norms = Norms(*problems);
    REQUIRE(norms.size() == kTokens.size());  // input, post-attention and final norm share a shape
    for (size_t i = 0; i < norms.size(); ++i) {
      CHECK(norms[i].op == NormOp::kRMSNorm);
      CHECK(norms[i].pass == NormPass::kForward);
      CHECK(norms[i].m == kTokens[i]);
      CHECK(norms[i].n == 4096);
      CHECK(norms[i].eps == 1e-5f);
      CHECK(norms[i].has_weight);
      CHECK_FALSE(norms[i].has_bias);
      CHECK(norms[i].input_dtype == DType::kBF16);
    }
    const auto gemms = GemmShapes(*problems);
    CHECK(gemms.size() == 5 * kTokens.size());
    CHECK(gemms.count({2048, (32 + 2 * 8) * 128, 4096}) == 1);  // QKV
    CHECK(gemms.count({2048, 4096, 4096}) == 1);                // O
    CHECK(gemms.count({2048, 2 * 14336, 4096}) == 1);           // gate/up
    CHECK(gemms.count({2048, 4096, 14336}) == 1);               // down
    CHECK(gemms.count({2048, 128256, 4096}) == 1);              // lm_head
    // Norms first, so that what is served today is tuned first.
    CHECK(!problems->front().problem.has_gemm());
    CHECK(problems->back().problem.has_gemm());
  }
  SECTION("forward and backward") {
    auto problems = DeriveModelProblems(*config, {kTokens, true, DType::kFP16});
    REQUIRE(problems.ok());
    const std::vector<NormProblem> norms = Norms(*problems);
    REQUIRE(norms.size() == 2 * kTokens.size());
    CHECK(std::count_if(norms.begin(), norms.end(),
                        [](const NormProblem& n) { return n.pass == NormPass::kBackward; }) == 5);
    CHECK(norms[0].input_dtype == DType::kFP16);  // --dtype overrides torch_dtype
    const auto gemms = GemmShapes(*problems);
    CHECK(gemms.count({128, 4096, 14336}) == 1);  // down, forward
    CHECK(gemms.count({128, 14336, 4096}) == 1);  // down, dgrad
    // No weight gradient: its A is column-major, which no ktune GEMM reads.
    CHECK(gemms.count({4096, 14336, 128}) == 0);  // down, wgrad
    // So in bf16 every derived GEMM is one ktuned's own validator accepts
    // (fp16 GEMMs, above, are not served yet).
    auto bf16 = DeriveModelProblems(*config, {kTokens, true, DType::kBF16});
    REQUIRE(bf16.ok());
    size_t gemm_problems = 0;
    for (const PrewarmProblem& p : *bf16) {
      if (!p.problem.has_gemm()) continue;
      ++gemm_problems;
      CHECK(ValidateGemmProblem(p.problem.gemm()).ok());
    }
    CHECK(gemm_problems == 2 * 5 * kTokens.size());  // each linear's forward and dgrad
  }
}

TEST_CASE("Qwen3-8B: per-head q/k RMSNorm over tokens x heads rows", "[client][model]") {
  auto config = LoadModelConfig(DataPath("qwen3-8b.config.json"));
  REQUIRE(config.ok());
  CHECK(config->qk_norm);
  CHECK(config->head_dim == 128);
  CHECK(config->eps == 1e-6f);
  auto problems = DeriveModelProblems(*config, {kTokens, false, std::nullopt});
  REQUIRE(problems.ok());
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const NormProblem& n : Norms(*problems)) {
    CHECK(n.op == NormOp::kRMSNorm);
    CHECK(n.eps == 1e-6f);
    shapes.emplace(n.m, n.n);
  }
  for (int64_t t : kTokens) {
    CHECK(shapes.count({t, 4096}) == 1);      // hidden norms
    CHECK(shapes.count({t * 32, 128}) == 1);  // q norm: 32 heads
    CHECK(shapes.count({t * 8, 128}) == 1);   // k norm: 8 kv heads
  }
  // k norm at 8192 tokens is q norm at 2048 tokens: one problem, not two.
  CHECK(Norms(*problems).size() == 5 + 5 + 5 - 1);
  CHECK(GemmShapes(*problems).count({16, (32 + 2 * 8) * 128, 4096}) == 1);
}

TEST_CASE("LayerNorm models get a LayerNorm with a bias", "[client][model]") {
  // GPT-2's config: its own field names, n_inner null (4 x hidden).
  const char* gpt2 = R"({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
                         "n_inner": null, "layer_norm_epsilon": 1e-05, "vocab_size": 50257})";
  auto config = ParseModelConfig(gpt2, "gpt2.json");
  REQUIRE(config.ok());
  CHECK(config->norm == NormOp::kLayerNorm);
  CHECK(config->norm_bias);
  CHECK(config->intermediate_size == 3072);
  auto problems = DeriveModelProblems(*config, {{4}, true, std::nullopt});
  REQUIRE(problems.ok());
  const std::vector<NormProblem> norms = Norms(*problems);
  REQUIRE(norms.size() == 2);
  CHECK(norms[0].op == NormOp::kLayerNorm);
  CHECK(norms[0].has_bias);
  CHECK(norms[1].pass == NormPass::kBackward);
}

TEST_CASE("bad model configs and token lists are named errors", "[client][model]") {
  auto missing = ParseModelConfig(R"({"num_attention_heads": 8, "vocab_size": 10, "rms_norm_eps": 1e-6})", "c.json");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "c.json: hidden_size: missing");

  auto bad = ParseModelConfig(R"({"hidden_size": "4096"})", "c.json");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "c.json: hidden_size: must be a positive integer, got \"4096\"");

  auto no_norm = ParseModelConfig(R"({"hidden_size": 64, "num_attention_heads": 8, "vocab_size": 10})", "c.json");
  REQUIRE_FALSE(no_norm.ok());
  CHECK(no_norm.status().message().find("cannot tell the norm type") != std::string::npos);

  auto not_json = ParseModelConfig("{hidden_size: 1", "c.json");
  REQUIRE_FALSE(not_json.ok());
  CHECK(not_json.status().message().rfind("c.json: not valid JSON", 0) == 0);

  CHECK(LoadModelConfig("/nonexistent/config.json").status().message() ==
        "/nonexistent/config.json: cannot read the model config: no such file");

  auto tokens = ParseTokenList("1, 16,16,128");
  REQUIRE(tokens.ok());
  CHECK(*tokens == std::vector<int64_t>{1, 16, 128});
  for (const char* t : {"", "1,,2", "x", "0", "-4", "1.5", "99999999999"}) {
    INFO(t);
    auto parsed = ParseTokenList(t);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().message().rfind("--tokens: ", 0) == 0);
  }

  // Within --tokens' bounds, but M x hidden exceeds what the daemon takes.
  auto llama = LoadModelConfig(DataPath("llama-3-8b.config.json"));
  REQUIRE(llama.ok());
  auto too_big = DeriveModelProblems(*llama, {{1, 1 << 20}, false, std::nullopt});
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.status().message().rfind("--tokens 1048576: rmsnorm.fwd [1048576, 4096] is out of bounds", 0) == 0);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("config sizes are bounded, so no derived dimension can overflow", "[client][model]") {
  // 2 * 2^62 once wrapped to a gate/up GEMM with n = -2^63 that passed --dry-run.
  auto huge = ParseModelConfig(
      R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "rms_norm_eps": 1e-6,
          "intermediate_size": 4611686018427387904})",
      "c.json");
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.status().message() == "c.json: intermediate_size: must be at most 16777216, got 4611686018427387904");
  // Unsigned JSON beyond int64 is not a positive integer either.
  auto wrapped = ParseModelConfig(R"({"hidden_size": 18446744073709551615})", "c.json");
  REQUIRE_FALSE(wrapped.ok());
  CHECK(wrapped.status().message().find("hidden_size: must be a positive integer") != std::string::npos);

  // At the bound, every derived problem is still checked against ktuned's
  // own limits before anything is tuned.
  auto at_bound = ParseModelConfig(
      R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 16777216, "rms_norm_eps": 1e-6})", "c.json");
  REQUIRE(at_bound.ok());
  ModelShapeOptions options;
  options.tokens = {16};
  auto problems = DeriveModelProblems(*at_bound, options);
  REQUIRE(problems.ok());
  const absl::Status checked = ValidatePrewarmProblems(*problems);
  CHECK(checked.code() == absl::StatusCode::kInvalidArgument);
  // Named by the problem's key, then the validator's words.
  CHECK(absl::StrContains(checked.message(), "gemm"));
  CHECK(absl::StrContains(checked.message(), "16777216"));
  CHECK(absl::EndsWith(checked.message(), ": problem.gemm.n: must be in [1, 1048576], got 16777216"));
}

}  // namespace
}  // namespace ktune
