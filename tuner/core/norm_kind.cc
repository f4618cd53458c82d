#include "tuner/core/norm_kind.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

class NormKind final : public ProblemKind {
 public:
  absl::string_view name() const override { return "norm"; }
  v1::Problem::KindCase problem_case() const override { return v1::Problem::kNorm; }
  v1::Config::KindCase config_case() const override { return v1::Config::kNorm; }

  absl::StatusOr<ProblemKeyParts> Key(const v1::Problem& problem) const override {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    return ProblemKeyParts{OpName(*norm), CanonicalKey(*norm)};
  }

  std::string Describe(const v1::Problem& problem) const override {
    absl::StatusOr<NormProblem> p = NormProblemFromProto(problem.norm());
    if (!p.ok()) return "?";
    return absl::StrFormat("%s %dx%d %s%s%s%s%s%s%s", OpName(*p), p->m, p->n, DTypeName(p->input_dtype),
                           p->weight_dtype != p->input_dtype ? " w:fp32" : "", p->has_weight ? "" : " no-weight",
                           p->has_bias ? " bias" : "", p->residual ? " +residual" : "", p->weight_offset ? " 1+w" : "",
                           p->output_dtype == DType::kFP8E4M3 ? " out:fp8e4m3" : "");
  }

  std::string DescribeConfig(const v1::Config& config) const override {
    const v1::NormConfig& c = config.norm();
    std::string text =
        absl::StrFormat("xb=%d rb=%d warps=%d vec=%d depth=%d %s", c.x_block(), c.r_block(), c.num_warps(), c.vec(),
                        c.pipeline_depth(), c.persistent() ? "persistent" : "looped");
    if (c.split_size() > 0) absl::StrAppend(&text, " split=", c.split_size());
    if (c.cluster() > 1) absl::StrAppend(&text, " cluster=", c.cluster());
    return text;
  }

  absl::Status CheckShape(const v1::Problem& problem) const override {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    return norm.ok() ? ValidateNormProblem(*norm) : norm.status();
  }
};

}  // namespace

const ProblemKind& NormProblemKind() {
  static const NormKind kind;
  return kind;
}

}  // namespace ktune
