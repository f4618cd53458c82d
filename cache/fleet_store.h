// The fleet store: a PostgreSQL database shared by every ktuned that names it
// (--fleet-store), beside each daemon's own SQLite store, which stays the
// source of its answers. One table of entries keyed exactly as the local
// store keys them (op, problem, device, software), each row the serialized
// v1::Entry, its measured time, who published it and when.
//
//   Lookup   the entry under exactly a key, bounded by a deadline.
//   Publish  queued; a background thread upserts it keep-faster in ONE
//            statement (ON CONFLICT ... WHERE excluded.time_us < time_us), so
//            concurrent publishes of a key end with the faster, never a mix;
//            the same statement NOTIFYs the key when the row changed.
//   TryLock  a session advisory lock per key (a 64-bit hash of it), held on a
//            session of its own for a tune's duration, so a key is tuned once
//            per fleet; Unlock.
//   Listen   the background thread LISTENs and calls back with each key
//            another daemon published.
//
// Nothing here checks an entry: a row is only parsed (and bounded by
// kMaxEntryBytes). A caller serves or stores a fleet entry only after the
// import check (cache/bundle_merge.h PlanMerge, which runs ValidateEntry and
// so the recipe check), like a bundled one.
//
// The store being down, slow or restarted never throws into a caller and
// never makes one wait past its deadline: every libpq call is bounded
// (cache/pg_session.h); a lookup or lock on a lost connection is UNAVAILABLE
// at once; publishes wait in a bounded queue and are retried with backoff;
// the background thread reconnects. The schema is versioned
// (ktune_fleet_schema) and migrated at the first connection, under an
// advisory lock so daemons starting together migrate once.
//
// Thread-safe: every method may be called from any thread. Lookups and counts
// share one session (one at a time, each waiting for it no longer than its
// deadline); tune locks are held on a session of their own (a lookup that
// misses its deadline drops its session, never a lock); publishing and
// listening have the background thread's. All three are (re)connected by the
// background thread, never by a caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/entry.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// The version of the fleet store's tables, migrated at the first connection.
inline constexpr int kFleetSchemaVersion = 1;

// The channel published keys are notified on.
inline constexpr char kFleetChannel[] = "ktune_fleet_entries";

struct FleetStoreOptions {
  // postgresql://[user@]host[:port]/db[?sslmode=verify-full&...]: TLS, SCRAM
  // and the rest as libpq offers them. Never a password (CheckFleetUrl).
  std::string url;
  // A file holding the password ("" = none: trust, peer or certificate auth),
  // read at Open and again at every reconnect (a rotated secret is picked up).
  std::string password_file;
  // Who publishes: "hostname/daemon id", stored with each published entry.
  std::string publisher;
  absl::Duration connect_timeout = absl::Seconds(3);
  absl::Duration statement_timeout = absl::Seconds(2);
  size_t max_queued_publishes = 4096;  // past it the oldest is dropped (logged, counted)
  absl::Duration retry_min = absl::Milliseconds(100);
  absl::Duration retry_max = absl::Seconds(5);
  // Called on the background thread with each key another store's publish
  // notified (this one's own are left out), after it committed. May be empty.
  std::function<void(const EntryKey&)> on_published;
};

// OK iff `url` is a postgresql:// (or postgres://) URL libpq parses, at most
// 4096 bytes, with no password in it. INVALID_ARGUMENT otherwise, naming what
// is wrong and never echoing the URL (it may hold a secret).
absl::Status CheckFleetUrl(const std::string& url);

// The password in `path`: one line (a trailing newline is dropped), 1 to
// 1024 bytes, no control characters. Errors name the path, never the content.
absl::StatusOr<std::string> ReadFleetPasswordFile(const std::string& path);

struct FleetStatus {
  bool reachable = false;  // the last attempt to use the store succeeded
  std::string last_error;  // the last failure, "" if none since the last success
  size_t queued_publishes = 0;
  int64_t published = 0;  // upserts committed (whether or not they won)
  int64_t dropped = 0;    // publishes dropped: the queue was full, or the server refused the row
};

// Entries in the fleet store per GPU kind (the entry's device name) and
// publisher.
struct FleetCount {
  std::string device_name;
  std::string publisher;
  int64_t entries = 0;
};

enum class FleetLock {
  kAcquired,       // this daemon tunes the key; Unlock when done
  kHeldElsewhere,  // another session holds it: that daemon is tuning it
};

class FleetStore {
 public:
  // Checks the options (URL, password file: INVALID_ARGUMENT /
  // NOT_FOUND / PERMISSION_DENIED naming the flag's value's problem) and
  // starts the background thread, which connects (and migrates) at once. A
  // server that is down is not an error here: status() says so and the
  // thread keeps trying.
  static absl::StatusOr<std::unique_ptr<FleetStore>> Open(FleetStoreOptions options);
  // Stops the background thread; publishes still queued are lost (logged).
  ~FleetStore();

  // The entry stored under exactly `key`, nullopt if none. UNAVAILABLE when
  // the store cannot answer before `timeout` (not connected, busy, slow);
  // DATA_LOSS when the row is not a parseable entry of at most kMaxEntryBytes.
  absl::StatusOr<std::optional<v1::Entry>> Lookup(const EntryKey& key, absl::Duration timeout);

  // Queues `entry` (stored under `key`) for the background thread; never
  // blocks on the network. REQUIRES: the entry validated.
  void Publish(const EntryKey& key, const v1::Entry& entry);

  // Tries the tune lock of `key` without waiting for it. UNAVAILABLE when the
  // store cannot answer before `timeout`.
  absl::StatusOr<FleetLock> TryLock(const EntryKey& key, absl::Duration timeout);
  // Releases a lock TryLock acquired (a no-op if it was lost with its session).
  void Unlock(const EntryKey& key);

  FleetStatus status() const;
  // Entries per (GPU kind, publisher), in that order.
  absl::StatusOr<std::vector<FleetCount>> Counts(absl::Duration timeout);

  // Waits until the publish queue is empty and nothing is being sent, or
  // `timeout` passes: false then. For tests and shutdown.
  bool WaitForPublished(absl::Duration timeout);

  struct Impl;

 private:
  explicit FleetStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The key's 64-bit advisory lock id (the first 8 bytes of SHA-256 of its
// FlatKey), the same in every daemon.
int64_t FleetLockId(const EntryKey& key);

}  // namespace ktune
