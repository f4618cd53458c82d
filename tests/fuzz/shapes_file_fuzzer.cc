// libFuzzer target: shapes files as `ktune prewarm FILE` reads them (YAML, or
// JSON read as YAML). Whatever the text, ParseShapes answers: problems with
// their keys, or an error.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "client/prewarm_list.h"
#include "client/shapes_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<ktune::PrewarmProblem>> problems = ktune::ParseShapes(text, "fuzz.yaml");
  if (!problems.ok()) {
    if (problems.status().message().empty()) std::abort();  // an error always says what is wrong
    return 0;
  }
  for (const ktune::PrewarmProblem& p : *problems) {
    if (p.key != ktune::ProblemKey(p.problem)) std::abort();
  }
  return 0;
}
