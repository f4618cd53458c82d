#include "client/model_shapes.h"

#include <algorithm>
#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "tuner/core/input_file.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

using Json = nlohmann::json;

// Reads config fields, trying the names different model families use for
// one quantity (Llama's hidden_size is GPT-2's n_embd).
class ConfigReader {
 public:
  ConfigReader(const Json& json, std::string source) : json_(json), source_(std::move(source)) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", field, ": ", what));
  }

  // The first of `names` present and not null; its name in *found.
  const Json* Find(std::initializer_list<const char*> names, std::string* found) const {
    for (const char* name : names) {
      auto it = json_.find(name);
      if (it != json_.end() && !it->is_null()) {
        *found = name;
        return &*it;
      }
    }
    return nullptr;
  }

  // 0 when absent; an error when present but not a positive integer of at
  // most kMaxConfigDim. The bound keeps every product the derivation forms
  // ((heads + 2 kv_heads) * head_dim, tokens * heads) far inside int64: an
  // intermediate_size of 2^62 once came out as a GEMM with n = -2^63.
  absl::StatusOr<int64_t> Dim(std::initializer_list<const char*> names) const {
    std::string name;
    const Json* v = Find(names, &name);
    if (v == nullptr) return 0;
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return Error(name, absl::StrCat("must be a positive integer, got ", v->dump()));
    }
    if (v->get<int64_t>() > kMaxConfigDim) {
      return Error(name, absl::StrCat("must be at most ", kMaxConfigDim, ", got ", v->dump()));
    }
    return v->get<int64_t>();
  }

  absl::StatusOr<int64_t> RequiredDim(std::initializer_list<const char*> names) const {
    absl::StatusOr<int64_t> v = Dim(names);
    if (v.ok() && *v == 0) return Error(*names.begin(), "missing");
    return v;
  }

  absl::StatusOr<std::optional<double>> Number(std::initializer_list<const char*> names) const {
    std::string name;
    const Json* v = Find(names, &name);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return Error(name, absl::StrCat("must be a number, got ", v->dump()));
    return std::optional<double>(v->get<double>());
  }

  std::string String(const char* name) const {
    auto it = json_.find(name);
    return it != json_.end() && it->is_string() ? it->get<std::string>() : "";
  }

  std::optional<bool> Bool(const char* name) const {
    auto it = json_.find(name);
    if (it == json_.end() || !it->is_boolean()) return std::nullopt;
    return it->get<bool>();
  }

 private:
  const Json& json_;
  const std::string source_;
};

absl::StatusOr<DType> TorchDType(const std::string& name, const ConfigReader& reader, const char* field) {
  if (name == "bfloat16") return DType::kBF16;
  if (name == "float16" || name == "half") return DType::kFP16;
  if (name == "float32" || name == "float") return DType::kFP32;
  return reader.Error(field, absl::StrCat("unsupported dtype '", name, "' (expected bfloat16, float16 or float32)"));
}

NormProblem Norm(NormOp op, NormPass pass, int64_t m, int64_t n, const ModelConfig& c, DType dtype) {
  NormProblem p;
  p.op = op;
  p.pass = pass;
  p.m = m;
  p.n = n;
  p.input_dtype = p.output_dtype = p.weight_dtype = dtype;
  p.has_weight = true;
  p.has_bias = op == NormOp::kLayerNorm && c.norm_bias;
  p.eps = c.eps;
  p.weight_offset = c.weight_offset;
  return p;
}

// The hidden norms of one pass at one token count: the plain norm and the
// variants the config says an engine calls (model_shapes.h).
std::vector<NormProblem> HiddenNorms(NormPass pass, int64_t tokens, const ModelConfig& c, DType dtype) {
  const NormProblem plain = Norm(c.norm, pass, tokens, c.hidden_size, c, dtype);
  std::vector<NormProblem> out = {plain};
  if (c.fused_residual) {
    NormProblem residual = plain;
    residual.residual = true;
    out.push_back(residual);
  }
  if (c.fp8_static_activations && pass == NormPass::kForward && c.norm == NormOp::kRMSNorm) {
    for (size_t i = 0, n = out.size(); i < n; ++i) {
      NormProblem fp8 = out[i];
      fp8.output_dtype = DType::kFP8E4M3;
      out.push_back(fp8);
    }
  }
  return out;
}

// D[m, n] = A[m, k] x B[k, n].
v1::Problem Gemm(int64_t m, int64_t n, int64_t k, v1::Layout a, v1::Layout b, DType dtype) {
  v1::Problem out;
  v1::GemmProblem* g = out.mutable_gemm();
  g->set_m(m);
  g->set_n(n);
  g->set_k(k);
  g->set_batch(1);
  g->set_a_dtype(DTypeToProto(dtype));
  g->set_b_dtype(DTypeToProto(dtype));
  g->set_d_dtype(DTypeToProto(dtype));
  g->set_a_layout(a);
  g->set_b_layout(b);
  return out;
}

// A linear layer y[T, out] = x[T, in] W[out, in]^T, forward and optionally
// its input gradient (dgrad). Its weight gradient dW[out, in] = dy^T x reads
// both operands along the tokens, so A would be dy^T, column-major: no ktune
// GEMM template reads A so (ValidateGemmProblem refuses it), and a prewarm
// list holds only problems ktuned can serve.
void AddLinear(int64_t tokens, int64_t out_features, int64_t in_features, bool backward, DType dtype,
               ProblemList* list) {
  // Forward: W stored [out, in] row-major is B = W^T in column-major.
  list->Add(Gemm(tokens, out_features, in_features, v1::ROW_MAJOR, v1::COL_MAJOR, dtype));
  if (!backward) return;
  // dgrad: dx[T, in] = dy[T, out] W[out, in].
  list->Add(Gemm(tokens, in_features, out_features, v1::ROW_MAJOR, v1::ROW_MAJOR, dtype));
}

// transformers fills a field a config.json leaves out from its config
// class's default, and released Gemma 3 configs rely on it: the text_config
// of google/gemma-3-27b-it has no vocab_size or rms_norm_eps, gemma-3-4b-it's
// no head counts either. These are Gemma3TextConfig's defaults for the fields
// read here.
const Json& Gemma3TextDefaults() {
  static const Json* const kDefaults = new Json{
      {"vocab_size", 262208},     {"hidden_size", 2304}, {"intermediate_size", 9216}, {"num_attention_heads", 8},
      {"num_key_value_heads", 4}, {"head_dim", 256},     {"rms_norm_eps", 1e-6}};
  return *kDefaults;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (!root.is_object()) return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object"));
  const Json* body = &root;
  if (!root.contains("hidden_size") && !root.contains("n_embd") && root.contains("text_config") &&
      root["text_config"].is_object()) {
    body = &root["text_config"];
  }
  Json gemma3_text;  // Gemma 3's text model: the config's fields over the class defaults
  if (ConfigReader(*body, source).String("model_type") == "gemma3_text" ||
      (body != &root && ConfigReader(root, source).String("model_type") == "gemma3")) {
    gemma3_text = Gemma3TextDefaults();
    for (auto it = body->begin(); it != body->end(); ++it) {
      if (!it->is_null()) gemma3_text[it.key()] = *it;
    }
    body = &gemma3_text;
  }
  ConfigReader r(*body, source);
  ModelConfig c;
  c.model_type = r.String("model_type");
  if (c.model_type.empty()) c.model_type = ConfigReader(root, source).String("model_type");

  absl::StatusOr<int64_t> v = r.RequiredDim({"hidden_size", "n_embd", "d_model"});
  if (!v.ok()) return v.status();
  c.hidden_size = *v;
  if (!(v = r.RequiredDim({"num_attention_heads", "n_head", "num_heads"})).ok()) return v.status();
  c.num_attention_heads = *v;
  if (!(v = r.Dim({"num_key_value_heads", "num_kv_heads"})).ok()) return v.status();
  c.num_key_value_heads = *v == 0 ? c.num_attention_heads : *v;
  if (!(v = r.Dim({"head_dim"})).ok()) return v.status();
  c.head_dim = *v;
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return r.Error("head_dim", absl::StrCat("missing, and hidden_size ", c.hidden_size,
                                              " is not a multiple of num_attention_heads ", c.num_attention_heads));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return r.Error("num_key_value_heads", absl::StrCat("must divide num_attention_heads (", c.num_attention_heads,
                                                       "), got ", c.num_key_value_heads));
  }
  if (!(v = r.Dim({"intermediate_size", "n_inner", "ffn_dim"})).ok()) return v.status();
  c.intermediate_size = *v == 0 ? 4 * c.hidden_size : *v;  // GPT-2 leaves n_inner null: 4 x hidden
  if (!(v = r.RequiredDim({"vocab_size"})).ok()) return v.status();
  c.vocab_size = *v;

  // The norm: an explicit type wins, else the eps field's name says which.
  absl::StatusOr<std::optional<double>> rms_eps = r.Number({"rms_norm_eps", "rms_norm_epsilon"});
  if (!rms_eps.ok()) return rms_eps.status();
  absl::StatusOr<std::optional<double>> ln_eps =
      r.Number({"layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon", "norm_epsilon"});
  if (!ln_eps.ok()) return ln_eps.status();
  const std::string norm_type = absl::AsciiStrToLower(r.String("norm_type"));
  if (absl::StrContains(norm_type, "rms")) {
    c.norm = NormOp::kRMSNorm;
  } else if (absl::StrContains(norm_type, "layer")) {
    c.norm = NormOp::kLayerNorm;
  } else if (rms_eps->has_value()) {
    c.norm = NormOp::kRMSNorm;
  } else if (ln_eps->has_value()) {
    c.norm = NormOp::kLayerNorm;
  } else {
    return r.Error("rms_norm_eps", "missing, and no layer_norm_eps either: cannot tell the norm type");
  }
  // With norm_type given, the other eps field may be the only one present.
  std::optional<double> eps = c.norm == NormOp::kRMSNorm ? *rms_eps : *ln_eps;
  if (!eps.has_value()) eps = rms_eps->has_value() ? *rms_eps : *ln_eps;
  if (eps.has_value()) c.eps = static_cast<float>(*eps);
  // LayerNorm carries a bias unless the config turns biases off ("bias": false).
  c.norm_bias = c.norm == NormOp::kLayerNorm && r.Bool("bias").value_or(true);
  // Gemma 3 normalizes q and k per head as Qwen3 does (Gemma 1 and 2 do not).
  const bool gemma = absl::StartsWith(c.model_type, "gemma");
  c.qk_norm = r.Bool("qk_norm").value_or(false) || r.Bool("use_qk_norm").value_or(false) || c.model_type == "qwen3" ||
              c.model_type == "qwen3_moe" || absl::StartsWith(c.model_type, "gemma3");
  c.weight_offset = gemma;
  // Every RMSNorm decoder here is pre-norm with a residual stream, which
  // engines carry through the fused add; ktune's fused add is RMSNorm's only.
  c.fused_residual = c.norm == NormOp::kRMSNorm;
  const Json* quant = nullptr;
  for (const Json* j : std::initializer_list<const Json*>{body, &root}) {
    auto it = j->find("quantization_config");
    if (it != j->end() && it->is_object()) quant = &*it;
  }
  if (quant != nullptr) {
    const ConfigReader q(*quant, source);
    c.fp8_static_activations = q.String("quant_method") == "fp8" && q.String("activation_scheme") == "static";
  }

  // Newer transformers write "dtype", older "torch_dtype"; multimodal configs
  // keep it at the top level.
  const ConfigReader top(root, source);
  for (const ConfigReader* reader : {static_cast<const ConfigReader*>(&r), &top}) {
    for (const char* field : {"torch_dtype", "dtype"}) {
      const std::string name = reader->String(field);
      if (name.empty()) continue;
      absl::StatusOr<DType> dtype = TorchDType(name, *reader, field);
      if (!dtype.ok()) return dtype.status();
      c.dtype = *dtype;
      return c;
    }
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadInputFile(path, kModelConfigFile);
  if (!text.ok()) return text.status();
  return ParseModelConfig(*text, path);
}

absl::StatusOr<std::vector<int64_t>> ParseTokenList(absl::string_view text) {
  std::vector<int64_t> tokens;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int64_t t = 0;
    if (!absl::SimpleAtoi(part, &t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokens: '", part, "' is not an integer (expected e.g. 1,16,128,2048)"));
    }
    if (t < 1 || t > kMaxNormM) {
      return absl::InvalidArgumentError(absl::StrCat("--tokens: ", t, " is out of range [1, ", kMaxNormM, "]"));
    }
    if (std::find(tokens.begin(), tokens.end(), t) == tokens.end()) tokens.push_back(t);
  }
  return tokens;
}

absl::StatusOr<std::vector<PrewarmProblem>> DeriveModelProblems(const ModelConfig& c,
                                                                const ModelShapeOptions& options) {
  if (options.tokens.empty()) return absl::InvalidArgumentError("--tokens: no token counts");
  const DType dtype = options.dtype.value_or(c.dtype);
  std::vector<NormPass> passes = {NormPass::kForward};
  if (options.backward) passes.push_back(NormPass::kBackward);

  ProblemList list;
  for (NormPass pass : passes) {
    for (int64_t t : options.tokens) {
      std::vector<NormProblem> norms = HiddenNorms(pass, t, c, dtype);
      if (c.qk_norm) {
        norms.push_back(Norm(NormOp::kRMSNorm, pass, t * c.num_attention_heads, c.head_dim, c, dtype));
        norms.push_back(Norm(NormOp::kRMSNorm, pass, t * c.num_key_value_heads, c.head_dim, c, dtype));
      }
      for (const NormProblem& norm : norms) {
        if (absl::Status s = ValidateNormProblem(norm); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat("--tokens ", t, ": ", OpName(norm), " [", norm.m, ", ", norm.n,
                                                         "] is out of bounds: ", s.message()));
        }
        v1::Problem p;
        *p.mutable_norm() = NormProblemToProto(norm);
        list.Add(std::move(p));
      }
    }
  }
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  const int64_t qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
  for (int64_t t : options.tokens) {
    AddLinear(t, qkv_width, c.hidden_size, options.backward, dtype, &list);                // QKV
    AddLinear(t, c.hidden_size, q_width, options.backward, dtype, &list);                  // O
    AddLinear(t, 2 * c.intermediate_size, c.hidden_size, options.backward, dtype, &list);  // gate/up
    AddLinear(t, c.hidden_size, c.intermediate_size, options.backward, dtype, &list);      // down
    AddLinear(t, c.vocab_size, c.hidden_size, options.backward, dtype, &list);             // lm_head
  }
  return list.Take();
}

}  // namespace ktune
