// The GPU kinds a daemon answers for. An answer is a function of (problem,
// store, device), so a daemon that serves every GPU of its node groups them
// by their fingerprint's key (DeviceKey): a node of H100s and H200s has two
// kinds, each with its own answers, entries and quarantine, and a request
// names the kind it wants (v1::DeviceSelector), the first by default.
//
// Thread-compatible values, made once at start.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/fingerprint.h"

namespace ktune {

struct DeviceKind {
  int index = 0;              // in the daemon's list: kind 0 is its lowest-numbered GPU's
  DeviceInfo device;          // as the first GPU of the kind reported it
  std::string key;            // DeviceKey(device): on every key of its answers
  std::vector<int> ordinals;  // its GPUs, ascending; none for the compile-only target
};

// The kinds of `gpus` ((ordinal, device), ascending ordinals), in the order
// of each kind's first GPU. No GPU: the compile-only target alone
// (CompileOnlyTarget(), no ordinals).
std::vector<DeviceKind> GroupByKind(const std::vector<std::pair<int, DeviceInfo>>& gpus);

// The kind `selector` names in `kinds` (GroupByKind's): unset, the first; a
// GPU ordinal, that GPU's kind; a name, the kind of that device name.
// INVALID_ARGUMENT naming the field and listing what this daemon has when it
// names nothing here (or a name two kinds share: then an ordinal picks);
// FAILED_PRECONDITION for any selector on a compile-only daemon, which has no
// GPU to pick. REQUIRES: `kinds` is not empty.
absl::StatusOr<const DeviceKind*> SelectKind(const std::vector<DeviceKind>& kinds, const v1::DeviceSelector& selector);

}  // namespace ktune
