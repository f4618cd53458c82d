// libFuzzer target: bundle files as `ktune import`, `ktune bundle inspect` and
// ktuned's ImportBundle read them (DecodeBundle, which validates every entry),
// then the merge plan an import writes (PlanMerge) against a GPU target and a
// compile-only one.
//
// Input: one mode byte, then the bytes. 'F': the bytes are a whole bundle
// file. Anything else: the bytes are a payload (a serialized v1::Bundle) and
// the header with its checksum is written here, so mutations reach the entry
// validation behind the checksum instead of dying at it.
#include <openssl/sha.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cache/bundle.h"
#include "cache/bundle_merge.h"
#include "cache/entry.h"
#include "tuner/builtin_ops.h"

namespace {

std::string Frame(std::string_view payload) {
  std::string file(ktune::kBundleMagic, sizeof(ktune::kBundleMagic));
  auto put = [&file](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) file.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(ktune::kBundleFormatVersion, 4);
  put(payload.size(), 8);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), digest);
  file.append(reinterpret_cast<const char*>(digest), sizeof(digest));
  file.append(payload);
  return file;
}

// The H200 the test helpers' entries were measured on.
ktune::v1::DeviceFingerprint H200() {
  ktune::v1::DeviceFingerprint d;
  d.set_name("NVIDIA H200");
  d.set_cc_major(9);
  d.set_cc_minor(0);
  d.set_sm_count(132);
  d.set_memory_bytes(uint64_t{150754820096});
  d.set_driver_version(13000);
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string file = data[0] == 'F' ? std::string(bytes) : Frame(bytes);
  absl::StatusOr<ktune::v1::Bundle> bundle = ktune::DecodeBundle(ktune::BuiltinOps(), file);
  if (!bundle.ok()) return 0;

  // What DecodeBundle accepts is valid entry by entry, and keyed.
  const std::vector<ktune::v1::Entry> entries(bundle->entries().begin(), bundle->entries().end());
  for (const ktune::v1::Entry& e : entries) {
    if (!ktune::ValidateEntry(ktune::BuiltinOps(), e).ok() || !ktune::KeyOf(ktune::BuiltinOps(), e).ok()) std::abort();
  }
  // Re-encoding an accepted bundle gives an accepted bundle.
  if (!ktune::DecodeBundle(ktune::BuiltinOps(), ktune::EncodeBundle(entries, "fuzz", 1)).ok()) std::abort();

  // Half the entries play the store an import meets; the plan covers every
  // incoming entry under each policy.
  std::vector<ktune::v1::Entry> stored(entries.begin(), entries.begin() + entries.size() / 2);
  const ktune::ExistingLookup existing = [&stored](const ktune::EntryKey& key) -> std::optional<ktune::v1::Entry> {
    for (const ktune::v1::Entry& e : stored) {
      if (absl::StatusOr<ktune::EntryKey> k = ktune::KeyOf(ktune::BuiltinOps(), e); k.ok() && *k == key) return e;
    }
    return std::nullopt;
  };
  ktune::MergeTarget gpu;
  gpu.devices = {H200()};
  gpu.software_for = [](const ktune::v1::Entry& e) -> absl::StatusOr<ktune::v1::SoftwareFingerprint> {
    if (e.software().nvrtc_version() % 2 == 1) return absl::NotFoundError("not served here");
    return e.software();
  };
  // A node of two GPU kinds: each entry is judged against both.
  ktune::MergeTarget two_kinds = gpu;
  ktune::v1::DeviceFingerprint other = H200();
  other.set_name("NVIDIA H100 80GB HBM3");
  other.set_memory_bytes(uint64_t{85045870592});
  two_kinds.devices.push_back(other);
  ktune::MergeTarget compile_only;
  for (const ktune::MergeTarget* target : {&gpu, &two_kinds, &compile_only}) {
    for (ktune::v1::MergePolicy policy :
         {ktune::v1::KEEP_FASTER, ktune::v1::PREFER_INCOMING, ktune::v1::PREFER_EXISTING}) {
      absl::StatusOr<ktune::MergePlan> plan = ktune::PlanMerge(ktune::BuiltinOps(), entries, policy, *target, existing);
      if (!plan.ok()) std::abort();  // entries are valid: a plan always exists
      if (plan->report.decisions_size() != static_cast<int>(entries.size())) std::abort();
      for (const ktune::v1::Entry& w : plan->writes) {
        if (!ktune::ValidateEntry(ktune::BuiltinOps(), w).ok()) std::abort();  // an import writes only valid entries
      }
    }
  }
  return 0;
}
