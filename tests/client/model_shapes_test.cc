// Problems derived from model configs (client/model_shapes.h), checked on
// real configs kept in tests/data: Llama-3-8B (RMSNorm, GQA) and Qwen3-8B
// (explicit head_dim and per-head q/k RMSNorm); and on inline ones for the
// norm variants: Gemma 2 and 3 ((1 + w)), fp8 with static activation scales
// (fp8-output norms) and GPT-2 (LayerNorm: neither residual nor fp8).
#include "client/model_shapes.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// One line per norm, in list order, naming the variant flags that are set:
// "rmsnorm.fwd 16x4096 res woff fp8". The variant tests compare whole lists
// of these, so a variant missing, extra, on the wrong norm or out of order
// fails.
std::string Label(const NormProblem& n) {
  return absl::StrCat(OpName(n), " ", n.m, "x", n.n, n.residual ? " res" : "", n.weight_offset ? " woff" : "",
                      n.output_dtype == DType::kFP8E4M3 ? " fp8" : "");
}

std::vector<std::string> Labels(const std::vector<NormProblem>& norms) {
  std::vector<std::string> out;
  for (const NormProblem& n : norms) out.push_back(Label(n));
  return out;
}

TEST_CASE("Llama-3-8B: per token count an RMSNorm and its fused residual add, and the layer's GEMMs",
          "[client][model]") {
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
  CHECK(config->fused_residual);
  CHECK_FALSE(config->weight_offset);
  CHECK_FALSE(config->fp8_static_activations);
  CHECK(config->dtype == DType::kBF16);

  SECTION("forward") {
    auto problems = DeriveModelProblems(*config, {kTokens, false, std::nullopt});
    REQUIRE(problems.ok());
    const std::vector<NormProblem> norms = Norms(*problems);
    // The input, post-attention and final norms share a shape; each is
    // called plain (the first layer's input norm) and fused with the
    // residual add (the rest), so each token count has both, plain first.
    std::vector<std::string> expected;
    for (int64_t t : kTokens) {
      expected.push_back(absl::StrCat("rmsnorm.fwd ", t, "x4096"));
      expected.push_back(absl::StrCat("rmsnorm.fwd ", t, "x4096 res"));
    }
    CHECK(Labels(norms) == expected);
    for (const NormProblem& n : norms) {
      CHECK(n.eps == 1e-5f);
      CHECK(n.has_weight);
      CHECK_FALSE(n.has_bias);
      CHECK(n.input_dtype == DType::kBF16);
      CHECK(n.output_dtype == DType::kBF16);
      CHECK(n.weight_dtype == DType::kBF16);
      CHECK(n.out_scale == 0.0f);
    }
    const auto gemms = GemmShapes(*problems);
    CHECK(gemms.size() == 5 * kTokens.size());
    CHECK(gemms.count({2048, (32 + 2 * 8) * 128, 4096}) == 1);  // QKV
    CHECK(gemms.count({2048, 4096, 4096}) == 1);                // O
    CHECK(gemms.count({2048, 2 * 14336, 4096}) == 1);           // gate/up
    CHECK(gemms.count({2048, 4096, 14336}) == 1);               // down
    CHECK(gemms.count({2048, 128256, 4096}) == 1);              // lm_head
    // Norms first, so that what is served today is tuned first.
    REQUIRE(problems->size() == norms.size() + gemms.size());
    for (size_t i = 0; i < problems->size(); ++i) CHECK((*problems)[i].problem.has_gemm() == (i >= norms.size()));
  }
  SECTION("forward and backward") {
    auto problems = DeriveModelProblems(*config, {kTokens, true, DType::kFP16});
    REQUIRE(problems.ok());
    const std::vector<NormProblem> norms = Norms(*problems);
    // Every forward norm, then every backward one; both passes have the
    // residual variant.
    std::vector<std::string> expected;
    for (const char* op : {"rmsnorm.fwd", "rmsnorm.bwd"}) {
      for (int64_t t : kTokens) {
        expected.push_back(absl::StrCat(op, " ", t, "x4096"));
        expected.push_back(absl::StrCat(op, " ", t, "x4096 res"));
      }
    }
    CHECK(Labels(norms) == expected);
    for (const NormProblem& n : norms) {
      CHECK(n.input_dtype == DType::kFP16);  // --dtype overrides torch_dtype
      CHECK(n.output_dtype == DType::kFP16);
    }
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
  CHECK(config->fused_residual);
  CHECK_FALSE(config->weight_offset);
  CHECK(config->head_dim == 128);
  CHECK(config->eps == 1e-6f);
  auto problems = DeriveModelProblems(*config, {kTokens, false, std::nullopt});
  REQUIRE(problems.ok());
  const std::vector<NormProblem> norms = Norms(*problems);
  for (const NormProblem& n : norms) {
    CHECK(n.op == NormOp::kRMSNorm);
    CHECK(n.eps == 1e-6f);
  }
  // Per token count: the hidden norm, plain and fused with the residual add;
  // then the q norm (32 heads) and the k norm (8 kv heads), which have no
  // residual add of their own.
  std::vector<std::string> expected;
  for (int64_t t : kTokens) {
    expected.push_back(absl::StrCat("rmsnorm.fwd ", t, "x4096"));
    expected.push_back(absl::StrCat("rmsnorm.fwd ", t, "x4096 res"));
    expected.push_back(absl::StrCat("rmsnorm.fwd ", t * 32, "x128"));
    // k norm at 8192 tokens is q norm at 2048 tokens: one problem, not two.
    if (t != 8192) expected.push_back(absl::StrCat("rmsnorm.fwd ", t * 8, "x128"));
  }
  CHECK(Labels(norms) == expected);
  CHECK(norms.size() == 4 * 5 - 1);
  CHECK(GemmShapes(*problems).count({16, (32 + 2 * 8) * 128, 4096}) == 1);
}

// google/gemma-2-9b's config.json (fields the derivation does not read left out).
constexpr char kGemma2Config[] = R"({
  "architectures": ["Gemma2ForCausalLM"],
  "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 3584,
  "intermediate_size": 14336,
  "model_type": "gemma2",
  "num_attention_heads": 16,
  "num_hidden_layers": 42,
  "num_key_value_heads": 8,
  "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06,
  "sliding_window": 4096,
  "torch_dtype": "float32",
  "vocab_size": 256000
})";

TEST_CASE("Gemma 2: every norm multiplies by (1 + w), plain and fused with the residual add, and no q/k norms",
          "[client][model]") {
  auto config = ParseModelConfig(kGemma2Config, "gemma-2-9b.json");
  REQUIRE(config.ok());
  CHECK(config->model_type == "gemma2");
  CHECK(config->norm == NormOp::kRMSNorm);
  CHECK(config->weight_offset);
  CHECK(config->fused_residual);
  CHECK_FALSE(config->qk_norm);
  CHECK(config->head_dim == 256);  // not hidden / heads (224)
  CHECK(config->dtype == DType::kFP32);
  auto problems = DeriveModelProblems(*config, {{1, 64}, true, std::nullopt});
  REQUIRE(problems.ok());
  const std::vector<NormProblem> norms = Norms(*problems);
  CHECK(Labels(norms) == std::vector<std::string>{"rmsnorm.fwd 1x3584 woff", "rmsnorm.fwd 1x3584 res woff",    //
                                                  "rmsnorm.fwd 64x3584 woff", "rmsnorm.fwd 64x3584 res woff",  //
                                                  "rmsnorm.bwd 1x3584 woff", "rmsnorm.bwd 1x3584 res woff",    //
                                                  "rmsnorm.bwd 64x3584 woff", "rmsnorm.bwd 64x3584 res woff"});
  for (const NormProblem& n : norms) {
    CHECK(n.has_weight);
    CHECK(n.eps == 1e-6f);
    CHECK(n.input_dtype == DType::kFP32);
    CHECK(ValidateNormProblem(n).ok());
  }
  // The weight offset is in the key: a Gemma norm is not a Llama norm.
  CHECK(absl::EndsWith((*problems)[0].key, " woff=1"));
  CHECK(absl::EndsWith((*problems)[1].key, " res=1 woff=1"));
  const auto gemms = GemmShapes(*problems);
  CHECK(gemms.count({64, (16 + 2 * 8) * 256, 3584}) == 1);  // QKV
  CHECK(gemms.count({64, 3584, 16 * 256}) == 1);            // O: q width 4096, not hidden
}

TEST_CASE("Gemma 3: q/k RMSNorm per head, with (1 + w) like every Gemma norm", "[client][model]") {
  SECTION("a multimodal config: the text model under text_config") {
    // google/gemma-3-27b-it's config as released: its text_config leaves
    // vocab_size and rms_norm_eps to Gemma3TextConfig's defaults (262208,
    // 1e-6), which ParseModelConfig fills in as transformers does.
    const char* gemma3 = R"({
      "architectures": ["Gemma3ForConditionalGeneration"],
      "model_type": "gemma3",
      "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024
      },
      "torch_dtype": "bfloat16",
      "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}
    })";
    auto config = ParseModelConfig(gemma3, "gemma-3-27b-it.json");
    REQUIRE(config.ok());
    CHECK(config->model_type == "gemma3_text");
    CHECK(config->hidden_size == 5376);
    CHECK(config->qk_norm);
    CHECK(config->weight_offset);
    CHECK(config->dtype == DType::kBF16);  // from the top level
    CHECK(config->vocab_size == 262208);   // Gemma3TextConfig's default
    auto problems = DeriveModelProblems(*config, {{1, 16}, false, std::nullopt});
    REQUIRE(problems.ok());
    const std::vector<NormProblem> norms = Norms(*problems);
    CHECK(Labels(norms) == std::vector<std::string>{"rmsnorm.fwd 1x5376 woff", "rmsnorm.fwd 1x5376 res woff",    //
                                                    "rmsnorm.fwd 32x128 woff", "rmsnorm.fwd 16x128 woff",        // q, k
                                                    "rmsnorm.fwd 16x5376 woff", "rmsnorm.fwd 16x5376 res woff",  //
                                                    "rmsnorm.fwd 512x128 woff", "rmsnorm.fwd 256x128 woff"});
    for (const NormProblem& n : norms) CHECK(n.eps == 1e-6f);
  }
  SECTION("a multimodal config whose text_config leaves out the head counts") {
    // google/gemma-3-4b-it as released: 8 heads, 4 kv heads of 256, all defaults.
    const char* gemma3 = R"({
      "architectures": ["Gemma3ForConditionalGeneration"],
      "model_type": "gemma3",
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_hidden_layers": 34, "sliding_window": 1024},
      "torch_dtype": "bfloat16"
    })";
    auto config = ParseModelConfig(gemma3, "gemma-3-4b-it.json");
    REQUIRE(config.ok());
    CHECK(config->num_attention_heads == 8);
    CHECK(config->num_key_value_heads == 4);
    CHECK(config->head_dim == 256);
    CHECK(config->eps == 1e-6f);
    auto problems = DeriveModelProblems(*config, {{2}, false, std::nullopt});
    REQUIRE(problems.ok());
    CHECK(Labels(Norms(*problems)) == std::vector<std::string>{"rmsnorm.fwd 2x2560 woff", "rmsnorm.fwd 2x2560 res woff",
                                                               "rmsnorm.fwd 16x256 woff", "rmsnorm.fwd 8x256 woff"});
    CHECK(GemmShapes(*problems).count({2, (8 + 2 * 4) * 256, 2560}) == 1);  // QKV
    CHECK(GemmShapes(*problems).count({2, 262208, 2560}) == 1);             // lm_head
  }
  SECTION("a config's own value wins over the default, and a bad one is still refused") {
    auto config = ParseModelConfig(
        R"({"model_type": "gemma3_text", "hidden_size": 1152, "vocab_size": 1000, "rms_norm_eps": 1e-5})", "g.json");
    REQUIRE(config.ok());
    CHECK(config->vocab_size == 1000);
    CHECK(config->eps == 1e-5f);
    auto bad = ParseModelConfig(R"({"model_type": "gemma3_text", "hidden_size": 1152, "head_dim": -4})", "g.json");
    REQUIRE_FALSE(bad.ok());
    CHECK(std::string(bad.status().message()).find("head_dim") != std::string::npos);
  }
  SECTION("a text-only config: model_type gemma3_text") {
    // google/gemma-3-1b-it: one kv head.
    const char* gemma3_text = R"({
      "architectures": ["Gemma3ForCausalLM"],
      "head_dim": 256,
      "hidden_size": 1152,
      "intermediate_size": 6912,
      "model_type": "gemma3_text",
      "num_attention_heads": 4,
      "num_hidden_layers": 26,
      "num_key_value_heads": 1,
      "rms_norm_eps": 1e-06,
      "torch_dtype": "bfloat16",
      "vocab_size": 262144
    })";
    auto config = ParseModelConfig(gemma3_text, "gemma-3-1b-it.json");
    REQUIRE(config.ok());
    CHECK(config->qk_norm);
    CHECK(config->weight_offset);
    auto problems = DeriveModelProblems(*config, {{8}, true, std::nullopt});
    REQUIRE(problems.ok());
    CHECK(Labels(Norms(*problems)) ==
          std::vector<std::string>{"rmsnorm.fwd 8x1152 woff", "rmsnorm.fwd 8x1152 res woff",  //
                                   "rmsnorm.fwd 32x256 woff", "rmsnorm.fwd 8x256 woff",       //
                                   "rmsnorm.bwd 8x1152 woff", "rmsnorm.bwd 8x1152 res woff",  //
                                   "rmsnorm.bwd 32x256 woff", "rmsnorm.bwd 8x256 woff"});
  }
}

// Qwen3-8B's shape (q/k norms included) with a quantization_config; `scheme`
// is its activation_scheme.
std::string Fp8Config(const std::string& scheme) {
  return absl::StrCat(R"({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
      "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16",
      "quantization_config": {"quant_method": "fp8", "activation_scheme": ")",
                      scheme, R"(", "ignored_layers": ["lm_head"]}})");
}

TEST_CASE("fp8 with static activation scales adds fp8 e4m3-output forward hidden norms, plain and residual",
          "[client][model]") {
  auto config = ParseModelConfig(Fp8Config("static"), "fp8.json");
  REQUIRE(config.ok());
  CHECK(config->fp8_static_activations);
  auto problems = DeriveModelProblems(*config, {{16}, true, std::nullopt});
  REQUIRE(problems.ok());
  const std::vector<NormProblem> norms = Norms(*problems);
  // After the model-dtype hidden norms come their fp8-output copies; not the
  // q/k norms (their output feeds attention, not an fp8 GEMM) and not the
  // backward pass (fp8 output is the forward's only).
  CHECK(Labels(norms) == std::vector<std::string>{"rmsnorm.fwd 16x4096", "rmsnorm.fwd 16x4096 res",          //
                                                  "rmsnorm.fwd 16x4096 fp8", "rmsnorm.fwd 16x4096 res fp8",  //
                                                  "rmsnorm.fwd 512x128", "rmsnorm.fwd 128x128",              //
                                                  "rmsnorm.bwd 16x4096", "rmsnorm.bwd 16x4096 res",          //
                                                  "rmsnorm.bwd 512x128", "rmsnorm.bwd 128x128"});
  for (const NormProblem& n : norms) {
    // Only the output is fp8; the scale is the tuner's default (1), since a
    // config's static scales are per layer and not part of the key.
    CHECK(n.input_dtype == DType::kBF16);
    CHECK(n.weight_dtype == DType::kBF16);
    CHECK(n.out_scale == 0.0f);
    CHECK(ValidateNormProblem(n).ok());
  }
  // Distinct problems for the cache: the fp8 copy is not deduplicated away.
  CHECK((*problems)[2].key.find(" out=fp8e4m3 ") != std::string::npos);
  CHECK(absl::EndsWith((*problems)[3].key, " res=1"));
  // The GEMMs stay in the model dtype.
  for (const PrewarmProblem& p : *problems) {
    if (p.problem.has_gemm()) CHECK(p.problem.gemm().a_dtype() == v1::BF16);
  }
}

TEST_CASE("fp8 with dynamic activation scales adds no fp8-output norms", "[client][model]") {
  // Qwen3-8B-FP8's quantization_config: per-token scales computed at run
  // time, which the static-scale fp8 norm does not produce.
  auto config = ParseModelConfig(Fp8Config("dynamic"), "fp8.json");
  REQUIRE(config.ok());
  CHECK_FALSE(config->fp8_static_activations);
  auto problems = DeriveModelProblems(*config, {{16}, true, std::nullopt});
  REQUIRE(problems.ok());
  CHECK(Labels(Norms(*problems)) == std::vector<std::string>{"rmsnorm.fwd 16x4096", "rmsnorm.fwd 16x4096 res",  //
                                                             "rmsnorm.fwd 512x128", "rmsnorm.fwd 128x128",      //
                                                             "rmsnorm.bwd 16x4096", "rmsnorm.bwd 16x4096 res",  //
                                                             "rmsnorm.bwd 512x128", "rmsnorm.bwd 128x128"});
}

TEST_CASE("a LayerNorm model gets neither the residual nor the fp8-output variant", "[client][model]") {
  // ktune's fused residual add and fp8 output are RMSNorm's only: a
  // LayerNorm model listing them would only be refused by ktuned.
  const char* gpt2_fp8 = R"({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
                             "layer_norm_epsilon": 1e-05, "vocab_size": 50257,
                             "quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}})";
  auto config = ParseModelConfig(gpt2_fp8, "gpt2.json");
  REQUIRE(config.ok());
  CHECK(config->norm == NormOp::kLayerNorm);
  CHECK_FALSE(config->fused_residual);
  CHECK_FALSE(config->weight_offset);
  auto problems = DeriveModelProblems(*config, {{4, 32}, true, std::nullopt});
  REQUIRE(problems.ok());
  const std::vector<NormProblem> norms = Norms(*problems);
  CHECK(Labels(norms) == std::vector<std::string>{"layernorm.fwd 4x768", "layernorm.fwd 32x768", "layernorm.bwd 4x768",
                                                  "layernorm.bwd 32x768"});
  for (const NormProblem& n : norms) {
    CHECK(n.has_bias);
    CHECK(n.output_dtype == DType::kBF16);
  }
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
