// An op family (norm, GEMM, ...) as the rest of ktune sees it: everything the
// daemon, the cache and the CLI need to serve, store and check answers for
// one kind of v1::Problem, behind one interface, so that none of them branches
// on the op kind. Each family implements it beside its own code
// (tuner/norm/norm_op.h, tuner/gemm/gemm_op.h); the registry (BuiltinOps, in
// tuner/builtin_ops.h) lists the families this build has.
//
// The contract every implementation keeps (DESIGN.md, the answer contract):
// an answer is a function of (problem, store, device). TemplateRecipe is the
// one source of recipes: whatever is served, stored or imported is checked to
// be exactly its output for the problem and config (VerifyRecipe,
// cache/recipe_check.h, through the registry).
//
// Thread-safe: an Op and an OpRegistry hold no mutable state; every method
// may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/core/problem_kind.h"

namespace ktune {

class CandidateExecutor;
class Device;
class KernelCache;
class ProblemRunner;
class RunnerLibraries;

// What a problem is stored under, apart from device and software.
struct ProblemIdentity {
  std::string entry_op;     // "rmsnorm.fwd", ..., "gemm": EntryKey::op
  std::string problem_key;  // canonical text of the problem: EntryKey::problem_key
};

// Entries that differ only in one size (M) form a family; a nearest-shape
// answer is the stored entry of the family whose position is nearest by ratio.
struct ProblemFamily {
  std::string family_key;  // everything but the position, device and software included (FamilyKeyText)
  int64_t position = 0;    // M
};

// The family key's text: op, the problem's canonical key at position 0,
// device and software, joined by the unit separator. Stored in the database
// (entries.family_key): changing it needs a migration.
std::string FamilyKeyText(absl::string_view entry_op, absl::string_view problem_key_at_0, absl::string_view device_key,
                          absl::string_view software_key);

// How an op that searches its space (norms) picks what to measure; others
// ignore it. ktuned's --search flags.
struct OpSearch {
  bool descent = false;    // coordinate descent from the heuristic; else every candidate (grid)
  int max_candidates = 0;  // descent's budget; 0: unlimited
  double max_seconds = 0;  // descent's budget; 0: unlimited
};

// One tuning job, as the daemon asks for it.
struct OpTuneRequest {
  int repetitions = 0;                           // 0: the op's default measurement
  KernelCache* kernel_cache = nullptr;           // not owned; may be null
  const std::atomic<bool>* cancelled = nullptr;  // checked between candidates
  std::set<std::string> quarantined;             // CandidateIds not to run
  // A candidate faulted ("fault") or hung ("timeout").
  std::function<void(const std::string& candidate, const std::string& reason, const std::string& detail)> on_quarantine;
  // Progress and per-candidate events, as the Tune RPC streams them. May be
  // null.
  std::function<void(const v1::TuneEvent&)> progress;
  OpSearch search;
};

// What a finished tune gives the daemon: the winner as an entry's fields and
// the counters it exports.
struct OpTuneResult {
  v1::Problem problem;  // as its entry stores it (canonical where the op has a canonical form)
  v1::Config config;
  // The recipe measured (compiled: cubin and lowered names); none for a
  // library call, which is wholly its config.
  std::optional<LaunchRecipe> measured_recipe;
  v1::Measurement measurement;
  int candidates_measured = 0;
  double tune_seconds = 0, compile_seconds = 0, run_seconds = 0;
  int kernel_cache_hits = 0, compiled = 0;
  std::vector<std::string> candidate_statuses;  // one per candidate run, for ktune_candidates_total{status}
  std::string summary;                          // key=value text after key="..." on the tune_done log line
};

class Op {
 public:
  virtual ~Op() = default;

  // How messages name a problem of this family: "norm", "GEMM".
  virtual absl::string_view name() const = 0;
  // The problem kind this family serves: its wire case, key and text, as
  // clients that link no op see them (tuner/core/problem_kind.h).
  virtual const ProblemKind& kind() const = 0;
  v1::Problem::KindCase problem_kind() const { return kind().problem_case(); }
  // The EntryKey::op values its entries are stored under.
  virtual std::vector<std::string> entry_ops() const = 0;

  // The request edge: validates the problem (INVALID_ARGUMENT, or
  // UNIMPLEMENTED, naming the field of a problem that cannot be served) and
  // keys it. REQUIRES (every method below): the problem is of problem_kind().
  virtual absl::StatusOr<ProblemIdentity> Identify(const v1::Problem& problem) const = 0;
  // The key alone (equivalent spellings give one key), for entries: errors
  // only for what cannot be keyed; Identify is the full check. The kind's
  // Key: one spelling for clients and the daemon alike.
  absl::StatusOr<ProblemIdentity> Key(const v1::Problem& problem) const;
  // REQUIRES: Identify(problem).ok().
  virtual ProblemFamily Family(const v1::Problem& problem, const std::string& device_key,
                               const std::string& software_key) const = 0;
  // The software this build keys the entry op's problems under (its
  // templates' hashes, library versions, NVRTC, schema); an error when this
  // build does not have what it needs (a missing template).
  virtual absl::StatusOr<SoftwareFingerprint> Software(absl::string_view entry_op) const = 0;

  // A stored entry's config (and the recipe's source) in range for its
  // problem, judged on the device it was tuned on when this build knows that
  // architecture (`tuned_on`). INVALID_ARGUMENT "PREFIXconfig...: ...".
  // REQUIRES: the entry's problem passed Identify.
  virtual absl::Status CheckConfig(absl::string_view prefix, const v1::Entry& entry,
                                   const std::optional<DeviceInfo>& tuned_on) const = 0;
  // The recipe this build writes for (problem, config) on `device`, without
  // code. The one source of recipes (see VerifyRecipe). INVALID_ARGUMENT for
  // a config not of this family or that does not parse; the template's own
  // error (e.g. FAILED_PRECONDITION with CanImplement's reason) when it refuses.
  virtual absl::StatusOr<LaunchRecipe> TemplateRecipe(const v1::Problem& problem, const v1::Config& config,
                                                      const DeviceInfo& device) const = 0;

  // The untuned answer's config (source HEURISTIC); FAILED_PRECONDITION when
  // the family gives no untuned answer for the problem.
  virtual absl::StatusOr<v1::Config> HeuristicConfig(const v1::Problem& problem, const DeviceInfo& device) const = 0;
  // The config a nearest entry (same family, another M) gives `problem`
  // (source NEAREST); NOT_FOUND when it cannot serve it. The caller still
  // writes its recipe (TemplateRecipe), which may refuse it.
  virtual absl::StatusOr<v1::Config> NearestConfig(const v1::Problem& problem, const v1::Entry& nearest,
                                                   const DeviceInfo& device) const = 0;

  // Tunes on `executor`. CANCELLED, or the executor's error, or NOT_FOUND /
  // INTERNAL when no candidate ran correctly.
  virtual absl::StatusOr<OpTuneResult> Tune(const v1::Problem& problem, CandidateExecutor* executor,
                                            const OpTuneRequest& request) const = 0;

  // What runs this family's candidates for `problem` on `device` (not owned;
  // tuner/run/problem_runner.h): allocates its buffers and computes the
  // reference, inputs drawn from `seed`. `libraries` (not owned, not null)
  // must outlive the runner. INVALID_ARGUMENT for a problem that does not
  // validate; device errors as the runner returns them. Only executors and
  // the worker call these (through tuner/problem_runners.h).
  virtual absl::StatusOr<std::unique_ptr<ProblemRunner>> NewRunner(const v1::Problem& problem, Device* device,
                                                                   uint64_t seed, RunnerLibraries* libraries) const = 0;
  // The runner of tests without a GPU (tuner/run/fake_runner.h), with this
  // family's work and library candidates for `problem`.
  virtual absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeRunner(const v1::Problem& problem,
                                                                       const DeviceInfo& device) const = 0;
};

// The families of a build, each found by problem kind or entry op.
class OpRegistry {
 public:
  // REQUIRES: no two ops of one problem kind or entry op.
  explicit OpRegistry(std::vector<std::unique_ptr<Op>> ops);

  // INVALID_ARGUMENT "problem: missing (set one of: norm, gemm)"
  // (MissingProblemError) for a problem with no kind; UNIMPLEMENTED for a
  // kind no op here serves.
  absl::StatusOr<const Op*> ForProblem(const v1::Problem& problem) const;
  const Op* ForEntryOp(absl::string_view entry_op) const;  // null if none
  // Every op's entry ops, in registration order.
  std::vector<std::string> entry_ops() const;
  const std::vector<std::unique_ptr<Op>>& ops() const { return ops_; }

  // ForProblem, then the op's own.
  absl::StatusOr<ProblemIdentity> Identify(const v1::Problem& problem) const;
  absl::StatusOr<ProblemIdentity> Key(const v1::Problem& problem) const;
  absl::StatusOr<SoftwareFingerprint> Software(const v1::Problem& problem) const;
  absl::StatusOr<LaunchRecipe> TemplateRecipe(const v1::Problem& problem, const v1::Config& config,
                                              const DeviceInfo& device) const;

 private:
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<const Op*> by_kind_;  // indexed by v1::Problem::KindCase: a request's op is one load
};

// Field errors in entries, worded alike by cache/ and every op:
// INVALID_ARGUMENT "PREFIXFIELD: WHY".
absl::Status EntryFieldError(absl::string_view prefix, absl::string_view field, absl::string_view why);
// A tuner check's error about `field_root` under `prefix`: the tuner's own
// messages already start with the field path ("problem.n: ...") and only get
// the prefix; others get "FIELD_ROOT: " too. Always INVALID_ARGUMENT (for a
// stored or imported entry, anything wrong is an invalid argument).
absl::Status EntryTunerError(absl::string_view prefix, absl::string_view field_root, const absl::Status& status);

}  // namespace ktune
