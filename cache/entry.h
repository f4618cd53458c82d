// A cache entry is a v1::Entry (proto/ktune/v1/ktune.proto): the same message
// is stored in SQLite, served over gRPC and carried in bundles, for a norm
// problem (RMSNorm or LayerNorm, forward or backward) or a GEMM problem alike.
// This file derives its key and family and checks that every field is present
// and in range. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/op.h"

namespace ktune {

// The four parts of a cache key: the op, the problem, the device and the
// software fingerprint, each as stable text (the op's Key, tuner/op.h;
// DeviceKey and SoftwareKey, tuner/core/fingerprint.h).
struct EntryKey {
  std::string op;            // "rmsnorm.fwd", ..., or "gemm"
  std::string problem_key;   // CanonicalKey(norm problem) or GemmCanonicalKey(GEMM problem)
  std::string device_key;    // DeviceKey(device)
  std::string software_key;  // SoftwareKey(software)
};
bool operator==(const EntryKey& a, const EntryKey& b);

// The most one entry may take serialized (without a cubin). Every known field
// is bounded far below it; the cap keeps a hostile or corrupt entry (unknown
// fields of 50 MB) from ever reaching the store, a listing or a bundle.
inline constexpr size_t kMaxEntryBytes = size_t{64} << 10;

// INVALID_ARGUMENT naming the first missing or out-of-range field, checked in
// this order: the serialized size without the cubin (kMaxEntryBytes); the
// problem (its op's Identify, found in `ops`); the device (cc, SM count, name); the software
// fingerprint (64-hex template hash, versions); the config (its op's
// CheckConfig: e.g. a norm config's knobs in range and, on an architecture
// this build knows, runnable; a GEMM config naming its source with a recipe
// of that source); the recipe (template id and hash, arch matching the
// device; a cuBLASLt recipe has no kernels and the config's algorithm, any
// other one 1 to 16 kernels, each with grid and block); the measurement
// (finite, positive time; spread and throughput finite and >= 0; repetitions >=
// 1) and the provenance (tuned_at_unix > 0, candidates_measured >= 1). An
// entry of this build's software fingerprint (one it would serve) must also
// carry exactly the recipe this build writes for its problem and config
// in its stored form (VerifyStoredRecipe, cache/recipe_check.h: every
// field; no lowered names, cubin or interface), and so must be of an architecture this build knows. The message
// starts with the field's path:
// "entry.measurement.time_us: must be finite and > 0, got -1".
absl::Status ValidateEntry(const OpRegistry& ops, const v1::Entry& entry);

// As above with `prefix` in place of "entry.", so a caller holding many
// entries can say which one: ValidateEntry(ops, e, "entry 3: ") gives
// "entry 3: measurement.time_us: ...".
absl::Status ValidateEntry(const OpRegistry& ops, const v1::Entry& entry, std::string_view prefix);

// The key its op (in `ops`) gives its problem. REQUIRES: ValidateEntry(ops, entry).ok().
absl::StatusOr<EntryKey> KeyOf(const OpRegistry& ops, const v1::Entry& entry);

// One string combining all four parts, for in-memory maps.
std::string FlatKey(const EntryKey& key);

// Entries that differ only in M share a family (the op's Family): op, the
// problem with m = 0, device and software. The store indexes entries by
// (family, m) so that the entry of the nearest M is found without reading any
// other. REQUIRES: ValidateEntry(ops, entry).ok().
absl::StatusOr<ProblemFamily> FamilyOf(const OpRegistry& ops, const v1::Entry& entry);

}  // namespace ktune
