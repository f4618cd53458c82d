// A cache entry is a v1::Entry (proto/ktune/v1/ktune.proto): the same message
// is stored in SQLite, served over gRPC and carried in bundles. This file
// derives its key and checks that every field is present and in range.
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// The four parts of a cache key (DESIGN.md): the op, the problem, the device
// and the software fingerprint, each as stable text.
struct EntryKey {
  std::string op;            // "rmsnorm.fwd"
  std::string problem_key;   // CanonicalKey(problem)
  std::string device_key;    // DeviceKey(device)
  std::string software_key;  // SoftwareKey(software)
};
bool operator==(const EntryKey& a, const EntryKey& b);

// INVALID_ARGUMENT naming the first missing or out-of-range field: the problem
// (ValidateNormProblem), the device (cc, SM count, name), the software
// fingerprint (64-hex template hash, versions), the config (positive knobs),
// the recipe (template id, arch matching the device, at least one kernel with
// grid and block), the measurement (finite, positive time; spread >= 0) and
// the provenance (tuned_at_unix > 0, candidates_measured >= 1). An entry of
// this build's software fingerprint (one it would serve) must also carry
// exactly the recipe this build writes for its problem and config
// (VerifyRecipe, cache/recipe_check.h: every field, no lowered names, no
// cubin). The message starts with the field's path:
// "entry.measurement.time_us: must be finite and > 0, got -1".
absl::Status ValidateEntry(const v1::Entry& entry);

// As above with `prefix` in place of "entry.", so a caller holding many
// entries can say which one: ValidateEntry(e, "entry 3: ") gives
// "entry 3: measurement.time_us: ...".
absl::Status ValidateEntry(const v1::Entry& entry, std::string_view prefix);

// REQUIRES: ValidateEntry(entry).ok().
absl::StatusOr<EntryKey> KeyOf(const v1::Entry& entry);

// One string combining all four parts, for in-memory maps.
std::string FlatKey(const EntryKey& key);

}  // namespace ktune
