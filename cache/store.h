// The persistent store of tuned entries: one SQLite database.
//
// WAL mode, a busy timeout, prepared statements, the schema version checked and
// migrated at Open, and every write in one transaction: a crash at any point
// loses no acknowledged entry and leaves no half-written import.
// Thread-safe: all methods may be called concurrently; writes are serialized
// by an internal mutex (one writer), reads share the connection under it too.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/entry.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// The version of the store's tables (PRAGMA user_version), migrated at Open.
// Separate from kSchemaVersion, the entries' format in the software fingerprint.
inline constexpr int kStoreSchemaVersion = 2;

// A candidate that faulted or hung: never run again for that device and
// software fingerprint. `candidate` names it (its kernels' name expressions).
struct QuarantineRecord {
  std::string device_key;
  std::string software_key;
  std::string candidate;
  std::string reason;  // "fault" or "timeout"
  std::string detail;
  int64_t at_unix = 0;
};

struct PutAllStats {
  int added = 0;
  int replaced = 0;
  int unchanged = 0;  // an identical entry was already stored
};

class Store {
 public:
  // Opens or creates the database at `path` (parent directories are created)
  // and migrates an older schema. FAILED_PRECONDITION, leaving the file as it
  // was, if it is not a ktune database (not SQLite, or another program's) or
  // was written by a newer schema; PERMISSION_DENIED if it cannot be written.
  //
  // Errors from SQLite, here and in every method, name the failing call and
  // carry SQLite's message: UNAVAILABLE when the database stayed locked past
  // the busy timeout (5 s), DATA_LOSS when it is corrupt, RESOURCE_EXHAUSTED
  // when the disk is full, INTERNAL otherwise.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  // The entry stored under exactly `key`, or nullopt.
  absl::StatusOr<std::optional<v1::Entry>> Get(const EntryKey& key);

  // Inserts or replaces. REQUIRES: ValidateEntry(entry).ok() (checked again:
  // INVALID_ARGUMENT). A cubin in the recipe is not stored.
  absl::Status Put(const v1::Entry& entry);

  // Inserts or replaces all entries in one transaction: all or nothing.
  // REQUIRES: every entry validated. Errors name the entry: "entry 3: ...".
  absl::StatusOr<PutAllStats> PutAll(const std::vector<v1::Entry>& entries);

  // All entries, optionally only those of one op ("" = all), ordered by key.
  absl::StatusOr<std::vector<v1::Entry>> List(const std::string& op = "");

  // Entry count per op.
  absl::StatusOr<std::map<std::string, int64_t>> CountByOp();

  // Records a quarantined candidate (replacing an earlier record of it).
  absl::Status Quarantine(const QuarantineRecord& record);
  // The quarantined candidates of one environment, ordered by candidate.
  absl::StatusOr<std::vector<QuarantineRecord>> Quarantined(const std::string& device_key,
                                                            const std::string& software_key);

  const std::string& path() const;

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ktune
