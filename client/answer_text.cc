#include "client/answer_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ktune {

std::string AnswerHeader() {
  return absl::StrFormat("%-36s %-9s %-62s %9s %7s", "problem", "source", "config", "time_us", "TB/s|TF");
}

std::string AnswerRow(const v1::Problem& problem, const v1::GetConfigResponse& answer) {
  if (answer.source() == v1::TUNED) {
    return absl::StrFormat("%-36s %-9s %-62s %9.2f %7.3f", DescribeProblem(problem), "TUNED",
                           DescribeConfig(answer.config()), answer.measurement().time_us(),
                           answer.measurement().throughput());
  }
  return absl::StrFormat("%-36s %-9s %-62s %9s %7s", DescribeProblem(problem), v1::Source_Name(answer.source()),
                         DescribeConfig(answer.config()), "-", "-");
}

}  // namespace ktune
