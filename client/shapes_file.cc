#include "client/shapes_file.h"

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tuner/core/input_file.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"
#include "yaml-cpp/yaml.h"

namespace ktune {
namespace {

// In the order the errors list them.
const std::vector<std::string> kEntryFieldOrder = {"op",           "m",      "n",    "k",   "dtype",    "out_dtype",
                                                   "weight_dtype", "weight", "bias", "eps", "residual", "weight_offset",
                                                   "scale"};
const std::vector<std::string> kDefaultFieldOrder = {"dtype", "out_dtype", "weight_dtype",  "weight", "bias",
                                                     "eps",   "residual",  "weight_offset", "scale"};
const std::set<std::string> kEntryFields(kEntryFieldOrder.begin(), kEntryFieldOrder.end());
const std::set<std::string> kDefaultFields(kDefaultFieldOrder.begin(), kDefaultFieldOrder.end());
const std::set<std::string> kNormOnlyFields = {"weight_dtype", "weight",        "bias", "eps",
                                               "residual",     "weight_offset", "scale"};

std::string FieldList(const std::vector<std::string>& fields) { return absl::StrJoin(fields, ", "); }

// ValidateNormProblem names NormProblem fields; a file's author knows the
// file's names.
std::string FileFieldName(const std::string& problem_field) {
  static const std::map<std::string, std::string> kNames = {{"input_dtype", "dtype"},
                                                            {"output_dtype", "out_dtype"},
                                                            {"has_bias", "bias"},
                                                            {"has_weight", "weight"},
                                                            {"out_scale", "scale"}};
  auto it = kNames.find(problem_field);
  return it == kNames.end() ? problem_field : it->second;
}

// Parses one file. Every error is a complete message: "FILE:LINE: WHERE: WHAT".
class ShapesParser {
 public:
  explicit ShapesParser(std::string source) : source_(std::move(source)) {}

  absl::StatusOr<std::vector<PrewarmProblem>> Parse(absl::string_view text) {
    YAML::Node root;
    try {
      root.reset(YAML::Load(std::string(text)));
    } catch (const YAML::Exception& e) {
      // e.mark is 0-based; e.msg is the message without the position.
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":", e.mark.line + 1, ":", e.mark.column + 1, ": not valid YAML or JSON: ", e.msg));
    }
    // Nodes are rebound with reset(): yaml-cpp's operator= assigns through
    // the reference instead.
    YAML::Node list;
    if (root.IsSequence()) {
      list.reset(root);
    } else if (root.IsMap()) {
      for (const auto& kv : root) {
        if (!kv.first.IsScalar()) return Error(kv.first, "", "a top-level key must be a plain word");
        const std::string key = kv.first.as<std::string>();
        if (key != "problems" && key != "defaults") {
          return Error(kv.first, key, "unknown top-level key (expected problems and optional defaults)");
        }
      }
      const YAML::Node& const_root = root;  // const lookups never insert
      if (!const_root["problems"]) return Error(root, "problems", "missing (the list of problems to tune)");
      list.reset(const_root["problems"]);
      if (!list.IsSequence()) return Error(list, "problems", "must be a list");
      if (const_root["defaults"]) {
        defaults_.reset(const_root["defaults"]);
        if (!defaults_.IsMap()) return Error(defaults_, "defaults", "must be a mapping");
        for (const auto& kv : defaults_) {
          if (!kv.first.IsScalar()) return Error(kv.first, "defaults", "a field name must be a plain word");
          const std::string key = kv.first.as<std::string>();
          if (kDefaultFields.count(key) == 0) {
            return Error(kv.first, "defaults." + key,
                         absl::StrCat("not a default (allowed: ", FieldList(kDefaultFieldOrder), ")"));
          }
        }
      }
    } else if (root.IsNull()) {
      return Error(root, "", "empty (expected a list of problems, or a mapping with 'problems')");
    } else {
      return Error(root, "", "expected a list of problems, or a mapping with 'problems'");
    }
    if (list.size() == 0) return Error(list, "problems", "the list is empty");
    ProblemList problems;
    for (size_t i = 0; i < list.size(); ++i) {
      if (expanded_ >= kMaxShapesProblems) return TooMany(list[i]);
      if (absl::Status s = ParseEntry(list[i], absl::StrCat("problems[", i, "]"), &problems); !s.ok()) {
        return s;
      }
    }
    return problems.Take();
  }

 private:
  absl::Status Error(const YAML::Node& node, const std::string& where, absl::string_view what) const {
    const YAML::Mark mark = node.Mark();
    std::string position = source_;
    if (mark.line >= 0) absl::StrAppend(&position, ":", mark.line + 1);
    return absl::InvalidArgumentError(where.empty() ? absl::StrCat(position, ": ", what)
                                                    : absl::StrCat(position, ": ", where, ": ", what));
  }

  // yaml-cpp expands an alias each time it is walked, so a small file of
  // aliases ("billion laughs") can stand for billions of problems: every m
  // value walked counts, duplicates and aliases included, and the walk stops
  // at the cap.
  absl::Status TooMany(const YAML::Node& node) const {
    return Error(node, "",
                 absl::StrCat("more than ", kMaxShapesProblems,
                              " problems (every m value counts, each time an alias repeats it): "
                              "split the list into several files"));
  }

  bool has_defaults() const { return defaults_.IsMap(); }

  // The entry's own value of `field`, else the default's; `where` is set to
  // the path of whichever was used, so errors point at the right line.
  std::optional<YAML::Node> Lookup(const YAML::Node& entry, const std::string& entry_path, const std::string& field,
                                   std::string* where) const {
    if (entry[field]) {
      *where = entry_path + "." + field;
      return entry[field];
    }
    if (has_defaults() && kDefaultFields.count(field) > 0 && defaults_[field]) {
      *where = "defaults." + field;
      return defaults_[field];
    }
    return std::nullopt;
  }

  template <typename T>
  absl::StatusOr<T> Scalar(const YAML::Node& node, const std::string& where, const char* expected) const {
    if (!node.IsScalar()) return Error(node, where, absl::StrCat("must be ", expected));
    try {
      return node.as<T>();
    } catch (const YAML::Exception&) {
      return Error(node, where, absl::StrCat("must be ", expected, ", got '", node.Scalar(), "'"));
    }
  }

  absl::StatusOr<int64_t> Dimension(const YAML::Node& node, const std::string& where) const {
    absl::StatusOr<int64_t> v = Scalar<int64_t>(node, where, "a positive integer");
    if (v.ok() && *v < 1) return Error(node, where, absl::StrCat("must be a positive integer, got ", *v));
    return v;
  }

  absl::StatusOr<DType> DTypeField(const YAML::Node& entry, const std::string& path, const std::string& field,
                                   DType fallback) const {
    std::string where;
    std::optional<YAML::Node> node = Lookup(entry, path, field, &where);
    if (!node) return fallback;
    absl::StatusOr<std::string> name = Scalar<std::string>(*node, where, "a dtype name");
    if (!name.ok()) return name.status();
    absl::StatusOr<DType> dtype = ParseDType(*name);
    if (!dtype.ok()) return Error(*node, where, dtype.status().message());
    return dtype;
  }

  // A field whose default is meant for some entries only (a default bias for
  // LayerNorm's): where `defaults_apply`, the entry's value or the default's;
  // elsewhere only the entry's own (so that the problem's check can refuse
  // it), else `fallback`.
  template <typename T>
  absl::StatusOr<T> ScopedField(const YAML::Node& entry, const std::string& path, const std::string& field,
                                bool defaults_apply, T fallback, const char* expected) const {
    std::string where = path + "." + field;
    std::optional<YAML::Node> node;
    if (defaults_apply) {
      node = Lookup(entry, path, field, &where);
    } else if (entry[field]) {
      node = entry[field];
    }
    if (!node) return fallback;
    return Scalar<T>(*node, where, expected);
  }

  absl::StatusOr<bool> BoolField(const YAML::Node& entry, const std::string& path, const std::string& field,
                                 bool fallback) const {
    return ScopedField<bool>(entry, path, field, /*defaults_apply=*/true, fallback, "true or false");
  }

  absl::StatusOr<double> NumberField(const YAML::Node& entry, const std::string& path, const std::string& field,
                                     double fallback) const {
    return ScopedField<double>(entry, path, field, /*defaults_apply=*/true, fallback, "a number");
  }

  absl::Status ParseEntry(const YAML::Node& entry, const std::string& path, ProblemList* out) {
    if (!entry.IsMap()) return Error(entry, path, "must be a mapping like {op: rmsnorm.fwd, m: 1024, n: 4096}");
    for (const auto& kv : entry) {
      // as<std::string> throws on a list or mapping used as a key.
      if (!kv.first.IsScalar()) return Error(kv.first, path, "a field name must be a plain word");
      const std::string key = kv.first.as<std::string>();
      if (kEntryFields.count(key) == 0) {
        return Error(kv.first, path + "." + key,
                     absl::StrCat("unknown field (expected ", FieldList(kEntryFieldOrder), ")"));
      }
    }
    // op
    if (!entry["op"]) return Error(entry, path + ".op", "missing");
    absl::StatusOr<std::string> op = Scalar<std::string>(entry["op"], path + ".op", "an op name");
    if (!op.ok()) return op.status();
    const bool gemm = *op == "gemm";
    NormProblem norm;
    if (!gemm) {
      if (absl::Status s = ParseNormOpName(*op, &norm.op, &norm.pass); !s.ok()) {
        return Error(entry["op"], path + ".op", s.message());
      }
    }
    // m: one value or a list
    const YAML::Node m_node = entry["m"];
    if (!m_node) return Error(entry, path + ".m", "missing");
    std::vector<std::pair<int64_t, std::string>> ms;  // value, where
    if (m_node.IsSequence()) {
      if (m_node.size() == 0) return Error(m_node, path + ".m", "the list is empty");
      for (size_t j = 0; j < m_node.size(); ++j) {
        if (++expanded_ > kMaxShapesProblems) return TooMany(m_node[j]);
        const std::string where = absl::StrCat(path, ".m[", j, "]");
        absl::StatusOr<int64_t> m = Dimension(m_node[j], where);
        if (!m.ok()) return m.status();
        ms.emplace_back(*m, where);
      }
    } else {
      ++expanded_;
      absl::StatusOr<int64_t> m = Dimension(m_node, path + ".m");
      if (!m.ok()) return m.status();
      ms.emplace_back(*m, path + ".m");
    }
    // n, k
    if (!entry["n"]) return Error(entry, path + ".n", "missing");
    absl::StatusOr<int64_t> n = Dimension(entry["n"], path + ".n");
    if (!n.ok()) return n.status();
    int64_t k = 0;
    if (gemm) {
      if (!entry["k"]) return Error(entry, path + ".k", "missing (gemm needs k)");
      absl::StatusOr<int64_t> parsed = Dimension(entry["k"], path + ".k");
      if (!parsed.ok()) return parsed.status();
      k = *parsed;
    } else if (entry["k"]) {
      return Error(entry["k"], path + ".k", "only gemm takes k");
    }
    // dtypes and norm flags
    absl::StatusOr<DType> dtype = DTypeField(entry, path, "dtype", DType::kBF16);
    if (!dtype.ok()) return dtype.status();
    absl::StatusOr<DType> out_dtype = DTypeField(entry, path, "out_dtype", *dtype);
    if (!out_dtype.ok()) return out_dtype.status();

    if (gemm) {
      for (const std::string& field : kNormOnlyFields) {
        if (entry[field]) return Error(entry[field], path + "." + field, "only norms take this field");
      }
      for (const auto& [m, where] : ms) {
        v1::Problem problem;
        v1::GemmProblem* g = problem.mutable_gemm();
        g->set_m(m);
        g->set_n(*n);
        g->set_k(k);
        g->set_batch(1);
        g->set_a_dtype(DTypeToProto(*dtype));
        g->set_b_dtype(DTypeToProto(*dtype));
        g->set_d_dtype(DTypeToProto(*out_dtype));
        g->set_a_layout(v1::ROW_MAJOR);
        g->set_b_layout(v1::COL_MAJOR);
        out->Add(std::move(problem));
      }
      return absl::OkStatus();
    }

    absl::StatusOr<DType> weight_dtype = DTypeField(entry, path, "weight_dtype", *dtype);
    if (!weight_dtype.ok()) return weight_dtype.status();
    absl::StatusOr<bool> weight = BoolField(entry, path, "weight", true);
    if (!weight.ok()) return weight.status();
    // A default bias is meant for the LayerNorm entries; RMSNorm has none,
    // and only an RMSNorm entry's own `bias: true` is an error.
    absl::StatusOr<bool> bias =
        ScopedField<bool>(entry, path, "bias", norm.op == NormOp::kLayerNorm, false, "true or false");
    if (!bias.ok()) return bias.status();
    // A default residual add is meant for the RMSNorm entries, as a default
    // bias is for LayerNorm's.
    absl::StatusOr<bool> residual =
        ScopedField<bool>(entry, path, "residual", norm.op == NormOp::kRMSNorm, false, "true or false");
    if (!residual.ok()) return residual.status();
    absl::StatusOr<bool> weight_offset = BoolField(entry, path, "weight_offset", false);
    if (!weight_offset.ok()) return weight_offset.status();
    absl::StatusOr<double> eps = NumberField(entry, path, "eps", kDefaultNormEps);
    if (!eps.ok()) return eps.status();
    // A default scale is meant for the fp8-output entries.
    absl::StatusOr<double> scale =
        ScopedField<double>(entry, path, "scale", *out_dtype == DType::kFP8E4M3, 0.0, "a number");
    if (!scale.ok()) return scale.status();
    // 0 means "unset" (1) to the problem: a scale that rounds to a float 0
    // must not silently become 1.
    if (*scale != 0.0 && static_cast<float>(*scale) == 0.0f) {
      return Error(entry["scale"] ? entry["scale"] : entry, path + ".scale",
                   absl::StrCat(*scale, " is below the smallest float32 scale"));
    }
    norm.n = *n;
    norm.input_dtype = *dtype;
    norm.output_dtype = *out_dtype;
    norm.weight_dtype = *weight_dtype;
    norm.has_weight = *weight;
    norm.has_bias = *bias;
    norm.eps = static_cast<float>(*eps);
    norm.residual = *residual;
    norm.weight_offset = *weight_offset;
    norm.out_scale = static_cast<float>(*scale);
    for (const auto& [m, m_where] : ms) {
      norm.m = m;
      if (absl::Status s = ValidateNormProblem(norm); !s.ok()) {
        return ValidationError(entry, path, m_where, s);
      }
      v1::Problem problem;
      *problem.mutable_norm() = NormProblemToProto(norm);
      out->Add(std::move(problem));
    }
    return absl::OkStatus();
  }

  // Re-words ValidateNormProblem's "problem.FIELD: what" as "problems[i].FIELD: what".
  absl::Status ValidationError(const YAML::Node& entry, const std::string& path, const std::string& m_where,
                               const absl::Status& s) const {
    std::string message(s.message());
    constexpr absl::string_view kPrefix = "problem.";
    if (absl::StartsWith(message, kPrefix)) {
      const size_t colon = message.find(':');
      const std::string field = FileFieldName(message.substr(kPrefix.size(), colon - kPrefix.size()));
      const std::string where = field == "m" ? m_where : path + "." + field;
      YAML::Node node = entry[field] ? entry[field] : entry;
      return Error(node, where, message.substr(colon + 2));
    }
    // "problem: m * n = ..." is about the entry as a whole.
    if (absl::StartsWith(message, "problem: ")) message = message.substr(9);
    return Error(entry, m_where == path + ".m" ? path : m_where, message);
  }

  const std::string source_;
  YAML::Node defaults_;
  int64_t expanded_ = 0;  // m values walked so far
};

}  // namespace

absl::StatusOr<std::vector<PrewarmProblem>> ParseShapes(absl::string_view text, const std::string& source) {
  return ShapesParser(source).Parse(text);
}

absl::StatusOr<std::vector<PrewarmProblem>> LoadShapesFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadInputFile(path, kShapesFile);
  if (!text.ok()) return text.status();
  return ParseShapes(*text, path);
}

}  // namespace ktune
