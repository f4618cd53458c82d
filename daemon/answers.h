// What GetConfig answers, for every op alike (tuner/op.h): a request's problem
// resolved once to its op and cache key (Resolve), a stored entry's answer
// (EntryAnswer, kept by the EntryCache with its bytes, so a hit costs a
// lookup and no op call), and on a miss the nearest entry's config or the
// op's heuristic one, with this build's recipe and, when asked for, its code.
// Compiled code is memoised by what determines it (CompileKey); geometry
// never is, so an answer is a function of (problem, store, device) alone.
//
// Answers are per GPU kind (daemon/device_kinds.h): a request resolves to one
// kind of the daemon, whose device keys its entry and writes its recipes.
//
// The one recipe check (cache/recipe_check.h) guards every recipe served:
// stored ones are compared with the op's TemplateRecipe before they are kept,
// a tune's answer is verified before its code is attached, heuristic and
// nearest answers are TemplateRecipe's own output.
//
// Thread-safe: the tables are fixed at construction; the EntryCache and the
// code memo have their own locks.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/entry.h"
#include "cache/store.h"
#include "daemon/device_kinds.h"
#include "daemon/entry_cache.h"
#include "daemon/service_metrics.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"
#include "tuner/op.h"

namespace ktune {

// Everything a request's problem resolves to before any work is done.
struct Resolved {
  v1::Problem proto;       // the problem as asked
  const Op* op = nullptr;  // its family, from the registry
  // The GPU kind it is answered for (the request's DeviceSelector); owned by
  // the Answers that resolved it.
  const DeviceKind* kind = nullptr;
  SoftwareFingerprint software;
  EntryKey key;
};

// A stored recipe as the check sees it: entries stored before lowered names
// were left out of them still carry the names their tune compiled. Those are
// never served (the daemon compiles the recipe itself), so they are dropped
// rather than compared.
v1::LaunchRecipe WithoutLoweredNames(v1::LaunchRecipe recipe);

class Answers {
 public:
  // None of the pointers is owned; `kernel_cache` may be null. `kinds` are
  // the devices answers are for (GroupByKind: the node's GPU kinds, or the
  // compile-only target alone). REQUIRES: `kinds` is not empty.
  Answers(const OpRegistry& ops, Store* store, KernelCache* kernel_cache, std::vector<DeviceKind> kinds,
          ServiceMetrics* metrics);

  // Validates the problem through its op, picks the kind `device` names
  // (SelectKind) and builds its key from tables made at construction (op ->
  // software fingerprint, the kind's device key). INVALID_ARGUMENT /
  // UNIMPLEMENTED for problems this daemon cannot serve, SelectKind's error
  // for a device it does not have.
  absl::StatusOr<Resolved> Resolve(const v1::Problem& problem,
                                   const v1::DeviceSelector& device = v1::DeviceSelector()) const;

  // The answer a stored entry gives (source TUNED, no code): the recipe this
  // build writes for its problem and config on the entry's GPU kind, after
  // checking that the stored recipe is that recipe (CompareRecipe);
  // INVALID_ARGUMENT naming the field when it is not, or when the entry's
  // device is no kind of this daemon (the entry is then not served). A
  // function of the entry alone while the daemon runs, so EntryCache keeps it.
  absl::StatusOr<v1::GetConfigResponse> EntryAnswer(const v1::Entry& entry) const;
  // Serves `served`'s answer into `response`, with its code when asked for.
  absl::Status AnswerFromEntry(const ServedEntry& served, bool include_cubin, v1::GetConfigResponse* response);
  // A miss answered at once: with `nearest_on_miss`, the config of the stored
  // entry of the same family nearest in M when its op can serve it
  // (kNearest), else the op's heuristic config (kHeuristic); each compiled.
  // The op's error when it has no answer for the problem.
  absl::StatusOr<GetConfigAnswer> AnswerUntuned(const Resolved& r, bool nearest_on_miss, bool include_cubin,
                                                v1::GetConfigResponse* response);
  // A tune's answer with its code: the recipe verified to be this build's
  // for `device` (VerifyRecipe; INTERNAL if not), then compiled.
  absl::Status AttachVerifiedCode(const v1::Problem& problem, const DeviceInfo& device,
                                  v1::GetConfigResponse* response);

  // Fills recipe->cubin and its kernels' lowered names: memoised, else from
  // the kernel cache, else compiled. Only code is memoised, keyed by what
  // determines it (CompileKey); the recipe's geometry is left as it is.
  absl::Status AttachCode(LaunchRecipe* recipe);
  // Remembers a compiled recipe's code (a tune's winner).
  void RememberCode(const LaunchRecipe& recipe);

  EntryCache* entries() { return &entries_; }
  const OpRegistry& ops() const { return ops_; }
  // Fixed at construction, the first GPU's kind first.
  const std::vector<DeviceKind>& kinds() const { return kinds_; }
  // The kind whose device key is `device_key`, or null: not a kind of this daemon.
  const DeviceKind* KindOfKey(const std::string& device_key) const;
  // The software key of each entry op this build serves: an entry of one of
  // this daemon's kinds under another one is stale (kept, listed, never served).
  const std::map<std::string, std::string>& current_software() const { return current_software_; }
  EntryFilter::Stale StaleFilter() const;
  // INVALID_ARGUMENT unless `op` is "" or an entry op this daemon serves.
  absl::Status CheckOpFilter(const std::string& op) const;

 private:
  // The recipe this build writes for (problem, config) on r's kind,
  // compiled (lowered names; the cubin is kept in it too).
  absl::StatusOr<LaunchRecipe> ServedRecipe(const Resolved& r, const v1::Config& config);
  // Fills `response` with `config`, its compiled recipe and this device and
  // software: an answer not read from the store.
  absl::Status AnswerConfig(const Resolved& r, v1::Config config, v1::Source source, bool include_cubin,
                            v1::GetConfigResponse* response);

  const OpRegistry& ops_;
  KernelCache* const kernel_cache_;
  ServiceMetrics* const metrics_;
  const std::vector<DeviceKind> kinds_;  // Resolved::kind points into it
  // By entry op: its software, or the op's error (a template missing here).
  const std::map<std::string, absl::StatusOr<SoftwareFingerprint>> op_software_;
  const std::map<std::string, std::string> current_software_;  // the keys of those that are ok
  EntryCache entries_;

  // What compiling one program gives: the cubin and, per name expression in
  // the recipe's order, its lowered name.
  struct CompiledCode {
    std::string cubin;
    std::vector<std::string> lowered_names;
  };
  absl::Mutex compiled_mu_;
  // template id + hash + arch + options + name expressions -> its code.
  absl::flat_hash_map<std::string, CompiledCode> compiled_ ABSL_GUARDED_BY(compiled_mu_);
};

}  // namespace ktune
