#include "cache/bundle_merge.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/message_differencer.h"

namespace ktune {
namespace {

std::string DeviceText(const v1::DeviceFingerprint& d) {
  return absl::StrFormat("%s (sm_%d%d, %d SMs)", d.name(), d.cc_major(), d.cc_minor(), d.sm_count());
}

// The software fingerprint's differences in words, or "" when equal.
std::string SoftwareDifference(const v1::SoftwareFingerprint& here, const v1::SoftwareFingerprint& bundled) {
  std::vector<std::string> parts;
  if (here.template_hash() != bundled.template_hash()) {
    parts.push_back(absl::StrCat("template hash ", bundled.template_hash().substr(0, 12), " in bundle, ",
                                 here.template_hash().substr(0, 12), " here"));
  }
  if (here.nvrtc_version() != bundled.nvrtc_version()) {
    parts.push_back(absl::StrCat("NVRTC ", bundled.nvrtc_version(), " in bundle, ", here.nvrtc_version(), " here"));
  }
  if (here.schema_version() != bundled.schema_version()) {
    parts.push_back(absl::StrCat("schema ", bundled.schema_version(), " in bundle, ", here.schema_version(), " here"));
  }
  std::string out;
  for (const std::string& p : parts) absl::StrAppend(&out, out.empty() ? "" : "; ", p);
  return out;
}

bool SameEntry(const v1::Entry& a, const v1::Entry& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

void Count(const std::string& action, v1::ImportBundleResponse* report) {
  if (action == "added") report->set_added(report->added() + 1);
  if (action == "replaced") report->set_replaced(report->replaced() + 1);
  if (action == "unchanged") report->set_unchanged(report->unchanged() + 1);
  if (action == "kept") report->set_kept(report->kept() + 1);
  if (action == "rejected") report->set_rejected(report->rejected() + 1);
}

// The policy's verdict on a taken key: {action, reason}.
std::pair<std::string, std::string> Resolve(const v1::Entry& stored, const v1::Entry& incoming,
                                            v1::MergePolicy policy) {
  if (SameEntry(stored, incoming)) return {"unchanged", "identical entry already stored"};
  const double old_us = stored.measurement().time_us(), new_us = incoming.measurement().time_us();
  switch (policy) {
    case v1::PREFER_INCOMING:
      return {"replaced", absl::StrFormat("prefer-incoming (%.2f us replaces %.2f us)", new_us, old_us)};
    case v1::PREFER_EXISTING:
      return {"kept", absl::StrFormat("prefer-existing (stored %.2f us, bundled %.2f us)", old_us, new_us)};
    default:
      // A large GEMM timed after its own heat reads slower than interleaved
      // with others (tuner/gemm/gemm_tuner.h): the two times say nothing of which
      // kernel is faster, so the store stands.
      if (stored.measurement().sustained() != incoming.measurement().sustained()) {
        auto protocol = [](const v1::Entry& e) { return e.measurement().sustained() ? "sustained" : "interleaved"; };
        return {"kept", absl::StrFormat("keep-faster: stored %.2f us (%s) and bundled %.2f us (%s) are of two "
                                        "protocols, not compared",
                                        old_us, protocol(stored), new_us, protocol(incoming))};
      }
      // A tie keeps the stored entry: importing the same measurement twice,
      // or in another order, must not flip the store.
      if (new_us < old_us) {
        return {"replaced", absl::StrFormat("keep-faster: bundled %.2f us < stored %.2f us", new_us, old_us)};
      }
      return {"kept", absl::StrFormat("keep-faster: stored %.2f us <= bundled %.2f us", old_us, new_us)};
  }
}

}  // namespace

std::string_view CompatibilityName(Compatibility compatibility) {
  switch (compatibility) {
    case Compatibility::kExact:
      return "exact";
    case Compatibility::kCompatible:
      return "compatible";
    case Compatibility::kIncompatible:
      return "incompatible";
    case Compatibility::kNotJudged:
      break;
  }
  return "not_judged";
}

CompatibilityVerdict JudgeCompatibility(const v1::Entry& entry, const v1::DeviceFingerprint& device,
                                        const v1::SoftwareFingerprint& software) {
  const v1::DeviceFingerprint& from = entry.device();
  if (from.name() != device.name()) {
    return {Compatibility::kIncompatible,
            absl::StrCat("another GPU kind: tuned on ", DeviceText(from), ", this is ", DeviceText(device))};
  }
  if (from.cc_major() != device.cc_major() || from.cc_minor() != device.cc_minor() ||
      from.sm_count() != device.sm_count()) {
    return {Compatibility::kIncompatible,
            absl::StrCat("another architecture: tuned on ", DeviceText(from), ", this is ", DeviceText(device))};
  }
  if (std::string diff = SoftwareDifference(software, entry.software()); !diff.empty()) {
    return {Compatibility::kIncompatible, absl::StrCat("another software fingerprint: ", diff)};
  }
  std::vector<std::string> diffs;
  if (from.driver_version() != device.driver_version()) {
    diffs.push_back(absl::StrCat("driver ", from.driver_version(), " in bundle, ", device.driver_version(), " here"));
  }
  if (from.memory_bytes() != device.memory_bytes()) {
    diffs.push_back(absl::StrCat("memory ", from.memory_bytes(), " B in bundle, ", device.memory_bytes(), " B here"));
  }
  if (diffs.empty()) return {Compatibility::kExact, "same device and software fingerprint"};
  std::string reason = "same GPU kind and architecture, ";
  for (size_t i = 0; i < diffs.size(); ++i) absl::StrAppend(&reason, i ? "; " : "", diffs[i]);
  absl::StrAppend(&reason, ": stored under this device, needs revalidation");
  return {Compatibility::kCompatible, reason};
}

namespace {

struct JudgedKind {
  CompatibilityVerdict verdict;
  const v1::DeviceFingerprint* device = nullptr;  // the kind judged exact or compatible
};

// The best verdict over a target's GPU kinds: an entry of one of them is
// exact for it whatever the others say.
JudgedKind JudgeAgainstKinds(const v1::Entry& entry, const std::vector<v1::DeviceFingerprint>& kinds,
                             const v1::SoftwareFingerprint& software) {
  JudgedKind best;
  for (const v1::DeviceFingerprint& kind : kinds) {
    CompatibilityVerdict v = JudgeCompatibility(entry, kind, software);
    if (v.compatibility == Compatibility::kExact) return {std::move(v), &kind};
    if (v.compatibility == Compatibility::kCompatible && best.device == nullptr) {
      best = {std::move(v), &kind};
    } else if (best.device == nullptr && best.verdict.reason.empty()) {
      best.verdict = std::move(v);  // the first kind's reason, when none fits
    }
  }
  if (best.device == nullptr && kinds.size() > 1) {
    best.verdict.reason = absl::StrCat("none of this daemon's ", kinds.size(),
                                       " GPU kinds fits; against the first: ", best.verdict.reason);
  }
  return best;
}

}  // namespace

absl::StatusOr<MergePlan> PlanMerge(const OpRegistry& ops, const std::vector<v1::Entry>& incoming,
                                    v1::MergePolicy policy, const MergeTarget& target, const ExistingLookup& existing) {
  if (!v1::MergePolicy_IsValid(policy)) {
    return absl::InvalidArgumentError(absl::StrCat("policy: unknown merge policy ", policy));
  }
  if (!target.devices.empty() && !target.software_for) {
    return absl::InvalidArgumentError("merge target: a device needs software_for");
  }
  MergePlan plan;
  // Writes planned so far, by flat key -> index in plan.writes, so a later
  // incoming entry of the same key meets the earlier one, not the store.
  absl::flat_hash_map<std::string, size_t> planned;
  for (size_t i = 0; i < incoming.size(); ++i) {
    v1::Entry entry = incoming[i];
    if (absl::Status s = ValidateEntry(ops, entry, absl::StrCat("entry ", i, ": ")); !s.ok()) return s;
    v1::MergeDecision* decision = plan.report.add_decisions();
    decision->set_device_name(entry.device().name());

    CompatibilityVerdict verdict{Compatibility::kNotJudged, target.not_judged_note};
    if (!target.devices.empty()) {
      absl::StatusOr<v1::SoftwareFingerprint> software = target.software_for(entry);
      if (!software.ok()) {
        verdict = {Compatibility::kIncompatible, std::string(software.status().message())};
      } else {
        const JudgedKind judged = JudgeAgainstKinds(entry, target.devices, *software);
        verdict = judged.verdict;
        if (verdict.compatibility == Compatibility::kCompatible) {
          *entry.mutable_device() = *judged.device;
          entry.set_needs_revalidation(true);
        }
      }
    }
    absl::StatusOr<EntryKey> key = KeyOf(ops, entry);
    if (!key.ok()) return key.status();
    decision->set_op(key->op);
    decision->set_problem_key(key->problem_key);
    decision->set_compatibility(std::string(CompatibilityName(verdict.compatibility)));

    std::string action, reason;
    if (verdict.compatibility == Compatibility::kIncompatible) {
      action = "rejected";
      reason = verdict.reason;
    } else {
      const std::string flat = FlatKey(*key);
      auto earlier = planned.find(flat);
      std::optional<v1::Entry> stored = earlier != planned.end()
                                            ? std::optional<v1::Entry>(plan.writes[earlier->second])
                                            : (existing ? existing(*key) : std::nullopt);
      if (!stored.has_value()) {
        action = "added";
        reason = "new key";
      } else {
        std::tie(action, reason) = Resolve(*stored, entry, policy);
      }
      if (action == "added" || action == "replaced") {
        if (earlier != planned.end()) {
          plan.writes[earlier->second] = entry;
        } else {
          planned[flat] = plan.writes.size();
          plan.writes.push_back(entry);
        }
      }
      if (verdict.compatibility != Compatibility::kExact) {
        absl::StrAppend(&reason, "; ", verdict.reason);
      }
    }
    decision->set_action(action);
    decision->set_reason(reason);
    Count(action, &plan.report);
  }
  return plan;
}

absl::StatusOr<MergedBundles> MergeOffline(const OpRegistry& ops, const std::vector<NamedEntries>& inputs,
                                           v1::MergePolicy policy) {
  std::map<std::string, v1::Entry> merged;  // flat key -> entry; ordered output
  MergedBundles out;
  MergeTarget target;
  target.not_judged_note = "offline merge: compatibility is judged when a daemon imports";
  for (const NamedEntries& input : inputs) {
    absl::StatusOr<MergePlan> plan =
        PlanMerge(ops, input.entries, policy, target, [&merged](const EntryKey& key) -> std::optional<v1::Entry> {
          auto it = merged.find(FlatKey(key));
          if (it == merged.end()) return std::nullopt;
          return it->second;
        });
    if (!plan.ok()) {
      return absl::Status(plan.status().code(), absl::StrCat(input.name, ": ", plan.status().message()));
    }
    for (v1::Entry& e : plan->writes) {
      absl::StatusOr<EntryKey> key = KeyOf(ops, e);
      if (!key.ok()) return key.status();
      merged.insert_or_assign(FlatKey(*key), std::move(e));
    }
    v1::ImportBundleResponse& r = out.report;
    r.set_added(r.added() + plan->report.added());
    r.set_replaced(r.replaced() + plan->report.replaced());
    r.set_unchanged(r.unchanged() + plan->report.unchanged());
    r.set_kept(r.kept() + plan->report.kept());
    r.set_rejected(r.rejected() + plan->report.rejected());
    for (v1::MergeDecision& d : *plan->report.mutable_decisions()) {
      d.set_reason(absl::StrCat(input.name, ": ", d.reason()));
      *r.add_decisions() = std::move(d);
    }
  }
  for (auto& [flat, entry] : merged) out.entries.push_back(std::move(entry));
  return out;
}

absl::StatusOr<v1::MergePolicy> ParseMergePolicy(std::string_view name) {
  if (name == "keep-faster") return v1::KEEP_FASTER;
  if (name == "prefer-incoming") return v1::PREFER_INCOMING;
  if (name == "prefer-existing") return v1::PREFER_EXISTING;
  return absl::InvalidArgumentError(
      absl::StrCat("policy: \"", std::string(name), "\" is not one of keep-faster, prefer-incoming, prefer-existing"));
}

std::string_view MergePolicyName(v1::MergePolicy policy) {
  switch (policy) {
    case v1::PREFER_INCOMING:
      return "prefer-incoming";
    case v1::PREFER_EXISTING:
      return "prefer-existing";
    default:
      return "keep-faster";
  }
}

}  // namespace ktune
