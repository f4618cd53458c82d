// The daemon's view of tuned entries: an in-memory map in front of the SQLite
// store, so a cache hit is a hash lookup (GetConfig must answer well under a
// millisecond) and the store is read once per key per process.
// Thread-safe: lookups take a shared lock; writes go to the store first (so an
// acknowledged entry is durable) and then to the map.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/entry.h"
#include "cache/store.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

class EntryCache {
 public:
  explicit EntryCache(Store* store) : store_(store) {}

  // The entry under `key`, from memory or else from the store.
  absl::StatusOr<std::optional<v1::Entry>> Lookup(const EntryKey& key);

  // Stores durably, then remembers. REQUIRES: ValidateEntry(entry).ok().
  absl::Status Insert(const v1::Entry& entry);

  // Stores all in one transaction, then forgets what memory held for them.
  absl::StatusOr<PutAllStats> InsertAll(const std::vector<v1::Entry>& entries);

 private:
  Store* const store_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, v1::Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ktune
