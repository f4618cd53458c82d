// What any client knows of one kind of v1::Problem without linking its op:
// its name, its cache key, one line of text for a problem and for a config,
// and the shape check a client can make before asking a daemon. The CLI, the
// client library and prewarm lists use these and never branch on the kind;
// the op itself (tuner/op.h) is the daemon's and the cache's view.
//
// Each kind implements ProblemKind beside its problem type in tuner/core/
// (norm_kind.cc, gemm_kind.cc); ProblemKinds() lists them
// (tuner/core/problem_kinds.cc: the light half of the registry, which
// tuner/builtin_ops.cc completes with the ops; tests/tuner/op_registry_test.cc
// checks the two lists name the same kinds).
// Thread-safe: kinds hold no state; every function is pure.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// The problem part of a cache key, the one spelling every caller uses (the
// daemon's lookups, stored and bundled entries, prewarm's dedup and shards).
struct ProblemKeyParts {
  std::string op;   // the entry op: "rmsnorm.fwd", "gemm"
  std::string key;  // "rmsnorm.fwd m=4096 n=4096 ...", "gemm m=1 n=4096 ..."
};

class ProblemKind {
 public:
  virtual ~ProblemKind() = default;

  // "norm", "gemm": how lists and counts name the kind.
  virtual absl::string_view name() const = 0;
  virtual v1::Problem::KindCase problem_case() const = 0;
  virtual v1::Config::KindCase config_case() const = 0;

  // REQUIRES (every method below): the problem or config is of this kind.
  // The cache key: equivalent spellings (an unset output dtype, batch 0, eps
  // 0) give one key. INVALID_ARGUMENT naming the field for a problem that
  // cannot be keyed.
  virtual absl::StatusOr<ProblemKeyParts> Key(const v1::Problem& problem) const = 0;
  // One short line: "rmsnorm.fwd 4096x4096 bf16", "gemm 1x4096x4096 bf16
  // B[N,K]"; "?" for a problem that does not decode.
  virtual std::string Describe(const v1::Problem& problem) const = 0;
  // One short line of a config's knobs: "xb=1 rb=4096 warps=4 ...".
  virtual std::string DescribeConfig(const v1::Config& config) const = 0;
  // What a client can check before asking a daemon (sizes and dtypes); the
  // daemon checks the rest. INVALID_ARGUMENT naming the field.
  virtual absl::Status CheckShape(const v1::Problem& problem) const = 0;
};

// Every kind of this build, in registration order.
const std::vector<const ProblemKind*>& ProblemKinds();

// The kind of `problem` or `config`; null for one of no kind this build knows.
const ProblemKind* KindOf(const v1::Problem& problem);
const ProblemKind* KindOf(const v1::Config& config);

// INVALID_ARGUMENT "problem: missing (set one of: norm, gemm)": the error
// for a problem with no kind set, listing `kinds` (by default, this build's).
absl::Status MissingProblemError(const std::vector<const ProblemKind*>& kinds = ProblemKinds());

// KindOf(problem), or MissingProblemError for a problem with no kind set
// and UNIMPLEMENTED for one of a kind this build does not know.
absl::StatusOr<const ProblemKind*> RequireKindOf(const v1::Problem& problem);

// RequireKindOf(problem), then its Key.
absl::StatusOr<ProblemKeyParts> ProblemKeyOf(const v1::Problem& problem);

}  // namespace ktune
