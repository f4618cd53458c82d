#include "client/prewarm_list.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tuner/core/describe.h"
#include "tuner/core/problem_kind.h"

namespace ktune {

std::string ProblemKey(const v1::Problem& problem) {
  // The cache's own key, so that two spellings of one entry (batch 0 and 1,
  // an unset and a bf16 output) are one problem here too.
  absl::StatusOr<ProblemKeyParts> key = ProblemKeyOf(problem);
  return key.ok() ? key->key : absl::StrCat("invalid ", problem.ShortDebugString());
}

std::string CountByKind(const std::vector<PrewarmProblem>& problems) {
  std::string text;
  for (const ProblemKind* kind : ProblemKinds()) {
    const auto n = std::count_if(problems.begin(), problems.end(), [kind](const PrewarmProblem& p) {
      return p.problem.kind_case() == kind->problem_case();
    });
    absl::StrAppend(&text, text.empty() ? "" : ", ", n, " ", kind->name());
  }
  return text;
}

absl::Status ValidatePrewarmProblems(const std::vector<PrewarmProblem>& problems) {
  for (const PrewarmProblem& p : problems) {
    const absl::Status s = CheckProblemShape(p.problem);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(p.key, ": ", s.message()));
  }
  return absl::OkStatus();
}

bool ProblemList::Add(v1::Problem problem) {
  std::string key = ProblemKey(problem);
  if (!keys_.insert(key).second) return false;
  problems_.push_back(PrewarmProblem{std::move(problem), std::move(key)});
  return true;
}

absl::StatusOr<Shard> ParseShard(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  Shard shard;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &shard.index) || !absl::SimpleAtoi(parts[1], &shard.count)) {
    return absl::InvalidArgumentError(absl::StrCat("--shard: expected i/n (e.g. 0/4), got '", text, "'"));
  }
  if (shard.count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--shard: n must be >= 1, got ", shard.count));
  }
  if (shard.index < 0 || shard.index >= shard.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard: i must be in [0, ", shard.count - 1, "], got ", shard.index));
  }
  return shard;
}

uint64_t StableKeyHash(absl::string_view key) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool InShard(const PrewarmProblem& problem, const Shard& shard) {
  return StableKeyHash(problem.key) % static_cast<uint64_t>(shard.count) == static_cast<uint64_t>(shard.index);
}

std::vector<PrewarmProblem> SelectShard(const std::vector<PrewarmProblem>& problems, const Shard& shard) {
  std::vector<PrewarmProblem> out;
  for (const PrewarmProblem& p : problems) {
    if (InShard(p, shard)) out.push_back(p);
  }
  return out;
}

}  // namespace ktune
