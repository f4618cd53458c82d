// The daemon's side of the fleet store (cache/fleet_store.h, --fleet-store),
// for every op alike:
//   - a local miss asks the fleet store for exactly its key (bounded by
//     --fleet-lookup-ms; a key it did not have is not asked for again for a
//     few seconds, unless a NOTIFY names it); an entry found there must hold the key it is stored
//     under, then goes through the import (BundleService::Merge: ValidateEntry,
//     so the recipe check, then the compatibility judgement and keep-faster)
//     into SQLite, and is served from the EntryCache like any stored entry;
//   - every entry the daemon tunes or imports is published (queued);
//   - a key another daemon published (NOTIFY) is fetched and imported the
//     same way, when it is of this daemon's device and software;
//   - a tune first takes the key's fleet lock (ClaimTune); a key held
//     elsewhere is waited for (AwaitPublished) or left to the other daemon.
// Without --fleet-store every call is a no-op (configured() is false). The
// store being down never fails a caller: a lookup that cannot answer is a
// miss, a lock that cannot be taken lets this daemon tune.
//
// Thread-safe: called from gRPC threads, the tune queue's thread and the
// fleet store's listener thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cache/fleet_store.h"
#include "daemon/answers.h"
#include "daemon/bundle_service.h"
#include "daemon/service_metrics.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

struct FleetOptions {
  FleetStoreOptions store;  // store.url "" = no fleet store
  absl::Duration lookup_timeout = absl::Milliseconds(50);
  absl::Duration lock_timeout = absl::Milliseconds(500);
  // How long a TUNE_ON_MISS caller waits for a key another daemon is tuning
  // before this daemon tunes it too.
  absl::Duration tune_wait = absl::Seconds(300);
};

// "hostname/ktuned-PID": who publishes, in the fleet store's rows.
std::string DefaultFleetPublisher();

class FleetSync {
 public:
  // None of the pointers is owned; all outlive this. Opens the fleet store
  // when options.store.url is set. REQUIRES: its options checked
  // (CheckFleetUrl, ReadFleetPasswordFile), as ktuned does before anything.
  FleetSync(const FleetOptions& options, Answers* answers, BundleService* bundles, ServiceMetrics* metrics);
  ~FleetSync();

  bool configured() const { return store_ != nullptr; }

  // On a local miss of r.key: the fleet's entry, imported and served from
  // the cache, or null (none, unreachable, refused by the import check:
  // logged and counted in ktune_fleet_lookups_total{result}).
  std::shared_ptr<const ServedEntry> FetchOnMiss(const Resolved& r);

  // Queues each entry for the fleet store.
  void Publish(const std::vector<v1::Entry>& entries);

  enum class Claim {
    kTuneHere,       // the lock is held by this daemon (or no fleet / unreachable)
    kTunedElsewhere  // another daemon holds the key's lock
  };
  // Takes the fleet tune lock of `key` for this daemon; Release after the tune.
  Claim ClaimTune(const EntryKey& key);
  void Release(const EntryKey& key);
  // Waits until the fleet publishes r.key (NOTIFY), `cancelled` is set or
  // `wait` passes: the imported entry, or null. Each wake-up also tries the
  // lock again: a holder that went away leaves it to this daemon (`*claimed`).
  std::shared_ptr<const ServedEntry> AwaitPublished(const Resolved& r, const std::atomic<bool>& cancelled,
                                                    bool* claimed);
  absl::Duration tune_wait() const { return options_.tune_wait; }

  // The status GetStatus reports; with counts, one bounded query of them.
  v1::FleetStoreStatus Status(bool with_counts);
  // ktune_fleet_store_* gauges.
  void RefreshGauges();
  // Waits up to `timeout` for the publish queue to empty (shutdown).
  bool Flush(absl::Duration timeout) { return !configured() || store_->WaitForPublished(timeout); }

 private:
  // NOTIFY: another daemon published `key`.
  void OnPublished(const EntryKey& key);
  // Fetches `key` from the fleet store and imports it; the import's outcome.
  enum class Fetched { kImported, kAbsent, kUnavailable, kRefused };
  Fetched FetchAndImport(const EntryKey& key, absl::Duration timeout);

  const FleetOptions options_;
  Answers* const answers_;
  BundleService* const bundles_;
  ServiceMetrics* const metrics_;

  // Keys the fleet store did not have (or held a refused row for) -> until
  // when that is believed, so a
  // key missed again and again (CACHED_ONLY callers, a background tune
  // after a heuristic answer) asks the store once per kAbsentFor; a NOTIFY
  // of the key forgets it at once.
  absl::Mutex absent_mu_;
  absl::flat_hash_map<std::string, absl::Time> absent_ ABSL_GUARDED_BY(absent_mu_);

  absl::Mutex mu_;
  // Flat keys published since a waiter started waiting -> times notified.
  absl::flat_hash_map<std::string, uint64_t> notified_ ABSL_GUARDED_BY(mu_);
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;

  std::unique_ptr<FleetStore> store_;  // last: its listener thread calls OnPublished until it is gone
};

}  // namespace ktune
