// Bundle merging: what happens to each incoming entry when a bundle meets a
// store (a daemon's import) or another bundle (`ktune bundle merge`).
//
// Two questions, answered by pure functions so the daemon and the offline
// merge cannot disagree:
//   1. Compatibility, judged against the target's GPU and software:
//      exact        same device and software fingerprint: stored as is;
//      compatible   same GPU kind and architecture (name, compute capability,
//                   SM count) under another driver (or memory size): stored
//                   under the target's device fingerprint, marked
//                   needs_revalidation;
//      incompatible another GPU kind or architecture, or another software
//                   fingerprint: rejected, with the reason;
//      not_judged   the target has no GPU (a compile-only daemon, an offline
//                   merge): stored as bundled, as a bundle store would.
//   2. The merge policy, when the key is already taken: keep-faster (lower
//      measured median wins; a tie keeps the stored entry, so re-importing is
//      stable), prefer-incoming, prefer-existing. An identical entry is
//      "unchanged" under every policy.
// The result is a plan (the entries to write, and a report with one decision
// per incoming entry); the caller writes the plan in one transaction, or not
// at all for a dry run.
// Thread-safe: pure functions; the callbacks are called on the caller's thread.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/entry.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

enum class Compatibility { kExact, kCompatible, kIncompatible, kNotJudged };

// "exact", "compatible", "incompatible", "not_judged" (MergeDecision.compatibility).
std::string_view CompatibilityName(Compatibility compatibility);

struct CompatibilityVerdict {
  Compatibility compatibility = Compatibility::kNotJudged;
  std::string reason;  // what matched or differed, in words
};

// Judges `entry` against a target GPU and the software fingerprint the target
// would store the entry's op under.
CompatibilityVerdict JudgeCompatibility(const v1::Entry& entry, const v1::DeviceFingerprint& device,
                                        const v1::SoftwareFingerprint& software);

// What an import or merge writes into, as far as compatibility goes.
struct MergeTarget {
  // The target's GPU kinds (a daemon serves every GPU of its node); none when
  // it has no GPU (compile-only daemon, offline merge): entries are then
  // stored as bundled and marked not_judged. An entry is judged against each
  // and takes the best verdict: exact, else the first compatible kind (whose
  // fingerprint it is stored under), else incompatible with every kind.
  std::vector<v1::DeviceFingerprint> devices;
  // The software fingerprint the target stores `entry`'s op under. Required
  // when `devices` is not empty; an error rejects the entry (e.g. an op this target
  // does not serve) with the error's message as the reason.
  std::function<absl::StatusOr<v1::SoftwareFingerprint>(const v1::Entry&)> software_for;
  // Prefixed to the reason of a not_judged decision, e.g. "compile-only
  // daemon: no GPU to judge against".
  std::string not_judged_note = "no GPU to judge against";
};

// The stored entry under exactly `key`, if any.
using ExistingLookup = std::function<std::optional<v1::Entry>(const EntryKey&)>;

struct MergePlan {
  // Entries to write (added or replaced), in incoming order; one per key.
  std::vector<v1::Entry> writes;
  // Counts and one decision per incoming entry, in incoming order. dry_run is
  // left false: the caller says whether it wrote the plan.
  v1::ImportBundleResponse report;
};

// Plans merging `incoming` into the entries `existing` finds. An incoming
// entry also meets the earlier incoming entries of its key (two bundled
// drivers of one GPU kind land on one key here). MERGE_POLICY_UNSPECIFIED
// means KEEP_FASTER.
// REQUIRES: every entry passes ValidateEntry (DecodeBundle checked them);
// INVALID_ARGUMENT otherwise, or for a policy out of range.
// Entries are checked and keyed by their ops in `ops`.
absl::StatusOr<MergePlan> PlanMerge(const OpRegistry& ops, const std::vector<v1::Entry>& incoming,
                                    v1::MergePolicy policy, const MergeTarget& target, const ExistingLookup& existing);

// One input of an offline merge: a name for the report and its entries.
struct NamedEntries {
  std::string name;  // e.g. the file name
  std::vector<v1::Entry> entries;
};

struct MergedBundles {
  std::vector<v1::Entry> entries;   // ordered by key
  v1::ImportBundleResponse report;  // every input's decisions, reasons prefixed "NAME: "
};

// Merges the inputs in order by `policy`, with no target GPU (not_judged):
// the first input's entries are all added, later ones meet what came before.
absl::StatusOr<MergedBundles> MergeOffline(const OpRegistry& ops, const std::vector<NamedEntries>& inputs,
                                           v1::MergePolicy policy);

// "keep-faster", "prefer-incoming", "prefer-existing" <-> MergePolicy.
absl::StatusOr<v1::MergePolicy> ParseMergePolicy(std::string_view name);
std::string_view MergePolicyName(v1::MergePolicy policy);

}  // namespace ktune
