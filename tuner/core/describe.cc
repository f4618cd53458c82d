#include "tuner/core/describe.h"

#include "tuner/core/problem_kind.h"

namespace ktune {

std::string DescribeProblem(const v1::Problem& problem) {
  const ProblemKind* kind = KindOf(problem);
  return kind != nullptr ? kind->Describe(problem) : "?";
}

std::string DescribeConfig(const v1::Config& config) {
  const ProblemKind* kind = KindOf(config);
  return kind != nullptr ? kind->DescribeConfig(config) : "-";
}

absl::Status CheckProblemShape(const v1::Problem& problem) {
  absl::StatusOr<const ProblemKind*> kind = RequireKindOf(problem);
  return kind.ok() ? (*kind)->CheckShape(problem) : kind.status();
}

}  // namespace ktune
