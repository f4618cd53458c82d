#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tuner/core/gemm_kind.h"
#include "tuner/core/norm_kind.h"
#include "tuner/core/problem_kind.h"

namespace ktune {

const std::vector<const ProblemKind*>& ProblemKinds() {
  // The one line to edit for a new kind (with its Op in tuner/builtin_ops.cc).
  static const std::vector<const ProblemKind*> kinds = {&NormProblemKind(), &GemmProblemKind()};
  return kinds;
}

const ProblemKind* KindOf(const v1::Problem& problem) {
  for (const ProblemKind* kind : ProblemKinds()) {
    if (kind->problem_case() == problem.kind_case()) return kind;
  }
  return nullptr;
}

const ProblemKind* KindOf(const v1::Config& config) {
  for (const ProblemKind* kind : ProblemKinds()) {
    if (kind->config_case() == config.kind_case()) return kind;
  }
  return nullptr;
}

absl::Status MissingProblemError(const std::vector<const ProblemKind*>& kinds) {
  std::vector<absl::string_view> names;
  for (const ProblemKind* kind : kinds) names.push_back(kind->name());
  return absl::InvalidArgumentError(absl::StrCat("problem: missing (set one of: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<const ProblemKind*> RequireKindOf(const v1::Problem& problem) {
  if (problem.kind_case() == v1::Problem::KIND_NOT_SET) return MissingProblemError();
  const ProblemKind* kind = KindOf(problem);
  if (kind == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("problem: kind ", static_cast<int>(problem.kind_case()), " is not known to this build"));
  }
  return kind;
}

absl::StatusOr<ProblemKeyParts> ProblemKeyOf(const v1::Problem& problem) {
  absl::StatusOr<const ProblemKind*> kind = RequireKindOf(problem);
  if (!kind.ok()) return kind.status();
  return (*kind)->Key(problem);
}

}  // namespace ktune
