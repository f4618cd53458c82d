#include "daemon/device_kinds.h"

#include "absl/strings/str_cat.h"
#include "tuner/core/safe_text.h"

namespace ktune {
namespace {

// "GPU 0, 1: NVIDIA H100 80GB HBM3; GPU 2: NVIDIA H200", for errors.
std::string KindsText(const std::vector<DeviceKind>& kinds) {
  std::string text;
  for (const DeviceKind& kind : kinds) {
    absl::StrAppend(&text, text.empty() ? "" : "; ", "GPU ");
    for (size_t i = 0; i < kind.ordinals.size(); ++i) absl::StrAppend(&text, i ? ", " : "", kind.ordinals[i]);
    absl::StrAppend(&text, ": ", kind.device.name);
  }
  return text;
}

}  // namespace

std::vector<DeviceKind> GroupByKind(const std::vector<std::pair<int, DeviceInfo>>& gpus) {
  std::vector<DeviceKind> kinds;
  for (const auto& [ordinal, device] : gpus) {
    const std::string key = DeviceKey(device);
    DeviceKind* kind = nullptr;
    for (DeviceKind& k : kinds) {
      if (k.key == key) kind = &k;
    }
    if (kind == nullptr) {
      kind = &kinds.emplace_back();
      kind->index = static_cast<int>(kinds.size()) - 1;
      kind->device = device;
      kind->key = key;
    }
    kind->ordinals.push_back(ordinal);
  }
  if (kinds.empty()) {
    DeviceKind& target = kinds.emplace_back();
    target.device = CompileOnlyTarget();
    target.key = DeviceKey(target.device);
  }
  return kinds;
}

absl::StatusOr<const DeviceKind*> SelectKind(const std::vector<DeviceKind>& kinds, const v1::DeviceSelector& selector) {
  if (selector.device_case() == v1::DeviceSelector::DEVICE_NOT_SET) return &kinds.front();
  if (kinds.front().ordinals.empty()) {
    return absl::FailedPreconditionError(
        "device: this ktuned is compile-only and has no GPU to pick; leave device unset for its sm_90 answers");
  }
  if (selector.device_case() == v1::DeviceSelector::kGpu) {
    for (const DeviceKind& kind : kinds) {
      for (int ordinal : kind.ordinals) {
        if (ordinal == selector.gpu()) return &kind;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("device.gpu: this ktuned serves no GPU ", selector.gpu(), " (it serves ", KindsText(kinds), ")"));
  }
  const DeviceKind* found = nullptr;
  for (const DeviceKind& kind : kinds) {
    if (kind.device.name != selector.name()) continue;
    if (found != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("device.name: '", SafeText(selector.name()),
                                                     "' names two GPU kinds here (", KindsText(kinds),
                                                     "); pick one by device.gpu"));
    }
    found = &kind;
  }
  if (found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("device.name: this ktuned serves no '", SafeText(selector.name()),
                                                   "' (it serves ", KindsText(kinds), ")"));
  }
  return found;
}

}  // namespace ktune
