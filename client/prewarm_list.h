// The list of problems `ktune prewarm` tunes: wire problems with a stable
// text key each, deduplicated in first-seen order, and the deterministic
// sharding a batch job uses to take its share of the list.
//
// Keys are what dedup, sharding and reports go by: the cache key's problem
// part (ProblemKeyOf, tuner/core/problem_kind.h: CanonicalKey for norms, GemmCanonicalKey
// for GEMM), so "the same problem" here means the same cache entry on a
// daemon. A problem without such a key (see ProblemKey) is keyed by its own
// text instead, so it is still listed, deduplicated and sharded.
// Thread-safe: values and pure functions only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

struct PrewarmProblem {
  v1::Problem problem;
  std::string key;  // ProblemKey(problem)
};

// "rmsnorm.fwd m=4096 n=4096 in=bf16 ..." for norms (tuner/core/problem.h
// CanonicalKey), "gemm m=.. n=.. k=.. batch=.. ..." for GEMM
// (tuner/core/gemm_problem.h GemmCanonicalKey). Never fails: where ProblemKeyOf
// refuses the problem (a norm that does not decode, a GEMM that
// ValidateGemmProblem refuses, its dtypes or layouts included), the key is
// "invalid " followed by the problem's ShortDebugString.
std::string ProblemKey(const v1::Problem& problem);

// "3 norm, 2 gemm": how many problems of each kind of this build, every kind
// named (zeros too), in registration order (ProblemKinds).
std::string CountByKind(const std::vector<PrewarmProblem>& problems);

// Every problem checked by CheckProblemShape (tuner/core/describe.h: a norm
// problem as ktuned checks it; a GEMM only by the size rules, since which
// dtypes and layouts a daemon serves is its own answer), so a list that
// can only fail is refused before any daemon is called. INVALID_ARGUMENT
// names the first bad problem by its key (ProblemKey) and the validator's
// message.
absl::Status ValidatePrewarmProblems(const std::vector<PrewarmProblem>& problems);

// Problems in first-seen order without duplicates (by key).
class ProblemList {
 public:
  // False (and nothing added) when the key is already in the list.
  bool Add(v1::Problem problem);
  const std::vector<PrewarmProblem>& problems() const { return problems_; }
  std::vector<PrewarmProblem> Take() { return std::move(problems_); }

 private:
  std::vector<PrewarmProblem> problems_;
  // For the duplicate check: constant time per Add, so a list of N problems
  // is built in O(N) (a sorted vector made a 400,000-entry list take 25 s).
  absl::flat_hash_set<std::string> keys_;
};

// `--shard i/n`: this job takes the problems whose key hashes to i mod n.
struct Shard {
  int index = 0;
  int count = 1;
};

// Parses "i/n" with n >= 1 and 0 <= i < n; INVALID_ARGUMENT says which part
// is wrong.
absl::StatusOr<Shard> ParseShard(absl::string_view text);

// 64-bit FNV-1a of the key. Fixed forever: jobs of one batch may run
// different ktune builds, and every build must cut the list the same way.
uint64_t StableKeyHash(absl::string_view key);

bool InShard(const PrewarmProblem& problem, const Shard& shard);

// The problems of `shard`, in list order. Over i = 0..n-1 the shards
// partition the list.
std::vector<PrewarmProblem> SelectShard(const std::vector<PrewarmProblem>& problems, const Shard& shard);

}  // namespace ktune
