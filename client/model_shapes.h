// The problems of a transformer, derived from its Hugging Face-style
// config.json, for `ktune prewarm --from-model`.
//
// Per token count T (rows of the activations):
//   norms  the per-layer input and post-attention norms and the final norm
//          share one shape: [T, hidden_size], one problem per op and pass.
//          rms_norm_eps -> RMSNorm; layer_norm_eps / layer_norm_epsilon (or
//          norm_type "layernorm") -> LayerNorm with a bias. eps is the config's.
//          Qwen3-style q/k norms (model_type qwen3/qwen3_moe, or "qk_norm":
//          true) add RMSNorm over each head: [T * heads, head_dim] and
//          [T * kv_heads, head_dim].
//          The variants an inference engine calls (ktune.proto's
//          NormProblem): an RMSNorm decoder's hidden norm is also listed
//          fused with the residual add (vLLM's fused_add_rms_norm: every
//          layer's input norm but the first's, the post-attention norm and
//          the final norm); Gemma's norms (model_type gemma*) multiply by
//          (1 + w), the weight offset, q/k norms included; a model
//          quantized to fp8 with static activation scales
//          (quantization_config quant_method "fp8", activation_scheme
//          "static") adds the forward hidden norms with fp8 e4m3 output, as
//          vLLM's rms_norm_static_fp8_quant feeds its fp8 GEMMs (the GEMMs
//          stay in the model dtype here).
//   GEMMs  QKV [T, (heads + 2 kv_heads) * head_dim, hidden], O, fused
//          gate/up [T, 2 * intermediate, hidden], down, lm_head
//          [T, vocab, hidden]; backward adds each one's dgrad (not
//          wgrad: its A is column-major, which ktuned does not serve).
//          Mixture-of-experts expert GEMMs are grouped GEMMs and not listed.
// Weights are in the model dtype (torch_dtype / dtype), as Hugging Face
// models keep them. Problems are deduplicated; forward ones come first.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/prewarm_list.h"
#include "tuner/core/problem.h"

namespace ktune {

// The largest size field a config may have (hidden_size, vocab_size, ...);
// real models are below 2^18.
inline constexpr int64_t kMaxConfigDim = int64_t{1} << 24;

// What the derivation needs from config.json, after aliases are resolved.
struct ModelConfig {
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // = num_attention_heads when absent
  int64_t head_dim = 0;             // = hidden_size / num_attention_heads when absent
  int64_t vocab_size = 0;
  NormOp norm = NormOp::kRMSNorm;
  bool norm_bias = false;  // LayerNorm only
  float eps = kDefaultNormEps;
  bool qk_norm = false;
  bool weight_offset = false;           // Gemma: the norms multiply by (1 + w)
  bool fused_residual = false;          // RMSNorm decoders: engines fuse the residual add into the norm
  bool fp8_static_activations = false;  // fp8 quantized with static activation scales
  DType dtype = DType::kBF16;
};

// Parses config.json text; `source` names the file in errors, which name the
// field ("config.json: hidden_size: missing"). A "text_config" object (multi-
// modal models) is used when the top level has no hidden_size.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json, const std::string& source);
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// "1,16,128" -> {1, 16, 128}: positive, at most kMaxNormM, duplicates dropped.
absl::StatusOr<std::vector<int64_t>> ParseTokenList(absl::string_view text);

struct ModelShapeOptions {
  std::vector<int64_t> tokens;
  bool backward = false;
  std::optional<DType> dtype;  // overrides the config's
};

// INVALID_ARGUMENT when a derived norm is out of the daemon's bounds (too
// many tokens for the width), naming the token count.
absl::StatusOr<std::vector<PrewarmProblem>> DeriveModelProblems(const ModelConfig& config,
                                                                const ModelShapeOptions& options);

}  // namespace ktune
