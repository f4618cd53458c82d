// The persistent store of tuned entries: one SQLite database.
//
// WAL mode, a busy timeout, prepared statements, the schema version checked and
// migrated at Open, and every write in one transaction: a crash at any point
// loses no acknowledged entry and leaves no half-written import.
// Thread-safe: all methods may be called concurrently. Writes are serialized
// on one connection (one writer); reads use a small pool of read connections
// of their own, so a lookup never waits for a write's commit to be synced and
// a listing never holds up a tune's write. Nothing is read into memory at
// Open: the store scales to millions of entries with memory that does not.
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
inline constexpr int kStoreSchemaVersion = 3;

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

// Which entries a listing, an export or a deletion takes. Every set field
// narrows it.
struct EntryFilter {
  std::string op;           // "" = every op
  std::string problem_key;  // "" = every problem; REQUIRES: op set
  int64_t since_unix = 0;   // only entries tuned at or after this time
  // Only stale entries: of one of `device_keys` (the GPU kinds a daemon
  // serves), whose software key is not the one `current_software` gives
  // their op. An op missing from the map has none; no device key, none.
  struct Stale {
    std::vector<std::string> device_keys;
    std::map<std::string, std::string> current_software;  // op -> software key
  };
  std::optional<Stale> stale;
};

struct StoredEntry {
  EntryKey key;
  v1::Entry entry;
};

// One page of a listing in key order (op, problem, device, software).
struct PageRequest {
  std::optional<EntryKey> after;  // the last key of the previous page; none: from the start
  int limit = 1000;               // entries at most; >= 1
  // The page also ends once its entries' stored bytes reach this, so a page
  // fits a message whatever the entries weigh (it holds at least one).
  size_t max_bytes = size_t{2} << 20;
};
struct Page {
  std::vector<StoredEntry> entries;
  bool more = false;  // entries after the last one match the filter
};

// Entries stored per (op, device, software), kept by the database itself
// (triggers) in the same transaction as every write, so counting is a read
// of a few rows whatever the store holds.
struct EntryGroupCount {
  std::string op;
  std::string device_key;
  std::string software_key;
  int64_t entries = 0;
};

struct DeleteResult {
  int64_t deleted = 0;           // or, dry run, that would be
  std::vector<EntryKey> listed;  // the first max_listed of them, in key order
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
  //
  // `ops` (not owned, outliving the store) keys, families and validates
  // entries: ktuned and ktune pass BuiltinOps().
  static absl::StatusOr<std::unique_ptr<Store>> Open(const OpRegistry& ops, const std::string& path);
  ~Store();

  // The registry given to Open.
  const OpRegistry& ops() const;

  // The entry stored under exactly `key`, or nullopt.
  absl::StatusOr<std::optional<v1::Entry>> Get(const EntryKey& key);

  // Inserts or replaces. REQUIRES: ValidateEntry(entry).ok() (checked again:
  // INVALID_ARGUMENT). A cubin in the recipe is not stored.
  absl::Status Put(const v1::Entry& entry);

  // Inserts or replaces all entries in one transaction: all or nothing.
  // REQUIRES: every entry validated. Errors name the entry: "entry 3: ...".
  absl::StatusOr<PutAllStats> PutAll(const std::vector<v1::Entry>& entries);

  // All entries, optionally only those of one op ("" = all), ordered by key.
  // Reads everything: for tests and small stores; a daemon pages (ListPage).
  absl::StatusOr<std::vector<v1::Entry>> List(const std::string& op = "");

  // One page of the entries `filter` takes, in key order, starting after
  // `page.after`. Each read is a fresh snapshot, so paging through a store
  // that changes meanwhile yields every entry present throughout exactly once.
  // Stored entries are returned with unknown fields dropped.
  absl::StatusOr<Page> ListPage(const EntryFilter& filter, const PageRequest& page);

  // The entry of family `family_key` (FamilyKey in cache/entry.h) whose M is
  // nearest to m by ratio (the smaller on a tie), if any. Reads at most two
  // entries (an index on family and M).
  absl::StatusOr<std::optional<v1::Entry>> Nearest(const std::string& family_key, int64_t m);

  // Entry count per op.
  absl::StatusOr<std::map<std::string, int64_t>> CountByOp();
  // Entry count per (op, device, software), in that order.
  absl::StatusOr<std::vector<EntryGroupCount>> CountByGroup();

  // Deletes the entries `filter` takes, in one transaction (dry run: counts
  // them and changes nothing). INVALID_ARGUMENT for a filter with neither a
  // problem nor a stale condition: nothing deletes a whole store by accident.
  absl::StatusOr<DeleteResult> Delete(const EntryFilter& filter, bool dry_run, size_t max_listed);

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
