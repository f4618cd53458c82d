#include "tuner/run/candidate.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ktune {

std::string CandidateStatusName(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::kOk:
      return "ok";
    case CandidateStatus::kCompileError:
      return "compile_error";
    case CandidateStatus::kWrongAnswer:
      return "wrong_answer";
    case CandidateStatus::kLaunchError:
      return "launch_error";
    case CandidateStatus::kFault:
      return "fault";
    case CandidateStatus::kTimeout:
      return "timeout";
    case CandidateStatus::kQuarantined:
      return "quarantined";
    case CandidateStatus::kNotMeasured:
      return "not_measured";
  }
  return "unknown";
}

std::string CandidateId(const LaunchRecipe& recipe) {
  if (recipe.is_cublaslt_call()) {  // no kernels: the algorithm is the identity
    return absl::StrCat("cublaslt:", absl::BytesToHexString(recipe.cublaslt_algo));
  }
  std::vector<std::string> names;
  for (const KernelLaunch& k : recipe.kernels) names.push_back(k.name_expression);
  return absl::StrJoin(names, ";");
}

CandidateStatus StatusOfRunFailure(const absl::Status& s) {
  if (absl::IsAborted(s)) return CandidateStatus::kFault;
  if (absl::IsDeadlineExceeded(s)) return CandidateStatus::kTimeout;
  return CandidateStatus::kLaunchError;
}

const char* QuarantineReason(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::kFault:
      return "fault";
    case CandidateStatus::kTimeout:
      return "timeout";
    default:
      return nullptr;
  }
}

CandidateStatus ClassifyRunFailure(const absl::Status& s, const LaunchRecipe& recipe, const QuarantineFn& on_quarantine,
                                   const std::string& detail) {
  const CandidateStatus status = StatusOfRunFailure(s);
  if (const char* reason = QuarantineReason(status); reason != nullptr && on_quarantine) {
    on_quarantine(CandidateId(recipe), reason, detail);
  }
  return status;
}

}  // namespace ktune
