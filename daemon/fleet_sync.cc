#include "daemon/fleet_sync.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/entry.h"
#include "spdlog/spdlog.h"
#include "tuner/core/safe_text.h"

namespace ktune {
namespace {

constexpr const char* kLookupResults[] = {"hit", "miss", "unavailable", "refused"};
// A key another daemon published is fetched on the listener thread, bounded
// more loosely than a caller's miss: nobody waits for it.
constexpr absl::Duration kNotifiedFetchTimeout = absl::Seconds(2);
// While waiting for another daemon's tune, how often the lock is tried again
// (its holder may have gone away, releasing it).
constexpr absl::Duration kRetryLockEvery = absl::Seconds(5);
// How long a fleet miss is believed without a NOTIFY (one lost while the
// listener was disconnected is made good after this), and how many are kept.
constexpr absl::Duration kAbsentFor = absl::Seconds(5);
constexpr size_t kMaxAbsent = 65536;

}  // namespace

std::string DefaultFleetPublisher() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host[0] == '\0' ? "unknown-host" : host, "/ktuned-", getpid());
}

FleetSync::FleetSync(const FleetOptions& options, Answers* answers, BundleService* bundles, ServiceMetrics* metrics)
    : options_(options), answers_(answers), bundles_(bundles), metrics_(metrics) {
  for (const char* result : kLookupResults) {
    metrics_->metrics()->Get("ktune_fleet_lookups_total", {{"result", result}})->Add(0);
  }
  if (options_.store.url.empty()) return;
  FleetStoreOptions store_options = options_.store;
  store_options.on_published = [this](const EntryKey& key) { OnPublished(key); };
  absl::StatusOr<std::unique_ptr<FleetStore>> store = FleetStore::Open(std::move(store_options));
  if (!store.ok()) {
    // ktuned checked the options before: only a resource could fail here.
    spdlog::error("event=fleet_store_open_failed error=\"{}\"", std::string(store.status().message()));
    return;
  }
  store_ = *std::move(store);
  spdlog::info("event=fleet_store publisher=\"{}\" lookup_ms={}", SafeText(options_.store.publisher),
               absl::ToInt64Milliseconds(options_.lookup_timeout));
}

FleetSync::~FleetSync() { store_.reset(); }

FleetSync::Fetched FleetSync::FetchAndImport(const EntryKey& key, absl::Duration timeout) {
  auto count = [this](const char* result) {
    metrics_->metrics()->Add("ktune_fleet_lookups_total", 1, "result", result);
  };
  absl::StatusOr<std::optional<v1::Entry>> row = store_->Lookup(key, timeout);
  if (!row.ok()) {
    if (absl::IsDataLoss(row.status())) {
      spdlog::error("event=fleet_entry_refused key=\"{}\" error=\"{}\"", key.problem_key,
                    SafeText(row.status().message(), 1024));
      count("refused");
      return Fetched::kRefused;
    }
    spdlog::debug("event=fleet_lookup_unavailable key=\"{}\" error=\"{}\"", key.problem_key,
                  std::string(row.status().message()));
    count("unavailable");
    return Fetched::kUnavailable;
  }
  if (!row->has_value()) {
    count("miss");
    return Fetched::kAbsent;
  }
  const v1::Entry& entry = **row;
  // The row must hold an entry of the key it is stored under; then it goes
  // through exactly the import a bundled entry goes through (Merge validates
  // it, recipe check included). Comparing keys needs no validation first: a
  // key equal to the request's is as well-formed as the request's.
  absl::Status refused;
  absl::StatusOr<EntryKey> own = KeyOf(answers_->ops(), entry);
  if (!own.ok()) {
    refused = own.status();
  } else if (!(*own == key)) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("fleet entry: stored under another key than its own (", SafeText(own->problem_key), ")"));
  }
  if (refused.ok()) {
    absl::StatusOr<MergeOutcome> merged = bundles_->Merge({entry}, v1::KEEP_FASTER, /*dry_run=*/false);
    if (!merged.ok()) {
      refused = merged.status();
    } else if (merged->report.rejected() > 0) {
      refused = absl::InvalidArgumentError(absl::StrCat(
          "fleet entry: ", merged->report.decisions_size() > 0 ? merged->report.decisions(0).reason() : "rejected"));
    }
  }
  if (!refused.ok()) {
    spdlog::error("event=fleet_entry_refused key=\"{}\" publisher_row=kept_there error=\"{}\"", key.problem_key,
                  SafeText(refused.message(), 1024));
    count("refused");
    return Fetched::kRefused;
  }
  count("hit");
  return Fetched::kImported;
}

std::shared_ptr<const ServedEntry> FleetSync::FetchOnMiss(const Resolved& r) {
  if (!configured()) return nullptr;
  const std::string flat = FlatKey(r.key);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&absent_mu_);
    if (auto it = absent_.find(flat); it != absent_.end()) {
      if (now < it->second) return nullptr;
      absent_.erase(it);
    }
  }
  const Fetched fetched = FetchAndImport(r.key, options_.lookup_timeout);
  // A refused row is as good as none, and asked for (and logged) as seldom.
  if (fetched == Fetched::kAbsent || fetched == Fetched::kRefused) {
    absl::MutexLock lock(&absent_mu_);
    if (absent_.size() >= kMaxAbsent) absent_.clear();
    absent_[flat] = now + kAbsentFor;
  }
  if (fetched != Fetched::kImported) return nullptr;
  spdlog::info("event=fleet_hit key=\"{}\"", r.key.problem_key);
  return answers_->entries()->Lookup(r.key);
}

void FleetSync::Publish(const std::vector<v1::Entry>& entries) {
  if (!configured()) return;
  for (const v1::Entry& e : entries) {
    absl::StatusOr<EntryKey> key = KeyOf(answers_->ops(), e);
    if (!key.ok()) continue;  // every written entry was validated: not reached
    store_->Publish(*key, e);
  }
}

void FleetSync::OnPublished(const EntryKey& key) {
  {
    absl::MutexLock lock(&absent_mu_);
    absent_.erase(FlatKey(key));
  }
  // Only keys this daemon would serve: one of its GPU kinds, this build's software.
  if (answers_->KindOfKey(key.device_key) == nullptr) return;
  auto current = answers_->current_software().find(key.op);
  if (current == answers_->current_software().end() || current->second != key.software_key) return;
  const Fetched fetched = FetchAndImport(key, kNotifiedFetchTimeout);
  if (fetched == Fetched::kImported) spdlog::info("event=fleet_picked_up key=\"{}\"", key.problem_key);
  absl::MutexLock lock(&mu_);
  if (waiters_ > 0) ++notified_[FlatKey(key)];
}

FleetSync::Claim FleetSync::ClaimTune(const EntryKey& key) {
  if (!configured()) return Claim::kTuneHere;
  absl::StatusOr<FleetLock> lock = store_->TryLock(key, options_.lock_timeout);
  if (!lock.ok()) {
    // The store being down never stops a tune: at worst two daemons tune the
    // key and keep-faster keeps one result.
    spdlog::warn("event=fleet_lock_unavailable key=\"{}\" error=\"{}\"", key.problem_key,
                 std::string(lock.status().message()));
    return Claim::kTuneHere;
  }
  return *lock == FleetLock::kAcquired ? Claim::kTuneHere : Claim::kTunedElsewhere;
}

void FleetSync::Release(const EntryKey& key) {
  if (configured()) store_->Unlock(key);
}

std::shared_ptr<const ServedEntry> FleetSync::AwaitPublished(const Resolved& r, const std::atomic<bool>& cancelled,
                                                             bool* claimed) {
  *claimed = false;
  if (!configured()) return nullptr;
  const std::string flat = FlatKey(r.key);
  uint64_t seen;
  {
    absl::MutexLock lock(&mu_);
    ++waiters_;
    seen = notified_[flat];
  }
  std::shared_ptr<const ServedEntry> got;
  const absl::Time deadline = absl::Now() + options_.tune_wait;
  absl::Time next_lock_try = absl::Now() + kRetryLockEvery;
  // Published before this wait began: found at once.
  if (FetchAndImport(r.key, options_.lookup_timeout) == Fetched::kImported) got = answers_->entries()->Lookup(r.key);
  while (got == nullptr && !cancelled && absl::Now() < deadline) {
    bool notified;
    {
      absl::MutexLock lock(&mu_);
      auto published = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_[flat] > seen; };
      notified = mu_.AwaitWithTimeout(absl::Condition(&published), absl::Seconds(1));
      seen = notified_[flat];
    }
    if (notified) {
      // OnPublished imported it (or refused it).
      got = answers_->entries()->Lookup(r.key);
      if (got != nullptr && !got->answer.ok()) got = nullptr;
      continue;
    }
    if (absl::Now() >= next_lock_try) {
      next_lock_try = absl::Now() + kRetryLockEvery;
      if (ClaimTune(r.key) == Claim::kTuneHere) {
        *claimed = true;
        break;
      }
    }
  }
  if (got != nullptr && !got->answer.ok()) got = nullptr;
  absl::MutexLock lock(&mu_);
  if (--waiters_ == 0) notified_.clear();
  return got;
}

v1::FleetStoreStatus FleetSync::Status(bool with_counts) {
  v1::FleetStoreStatus out;
  out.set_configured(configured());
  if (!configured()) return out;
  const FleetStatus s = store_->status();
  out.set_reachable(s.reachable);
  out.set_last_error(s.last_error);
  out.set_queued_publishes(static_cast<int64_t>(s.queued_publishes));
  out.set_published(s.published);
  out.set_dropped(s.dropped);
  if (with_counts) {
    absl::StatusOr<std::vector<FleetCount>> counts = store_->Counts(absl::Seconds(1));
    if (!counts.ok()) {
      out.set_counts_error(std::string(counts.status().message()));
    } else {
      for (const FleetCount& c : *counts) {
        v1::FleetStoreCount* o = out.add_counts();
        o->set_device_name(c.device_name);
        o->set_publisher(c.publisher);
        o->set_entries(c.entries);
      }
    }
  }
  return out;
}

void FleetSync::RefreshGauges() {
  Metrics* m = metrics_->metrics();
  m->Set("ktune_fleet_store_configured", configured() ? 1 : 0);
  if (!configured()) return;
  const FleetStatus s = store_->status();
  m->Set("ktune_fleet_store_reachable", s.reachable ? 1 : 0);
  m->Set("ktune_fleet_publish_queue_depth", static_cast<double>(s.queued_publishes));
  m->Set("ktune_fleet_published_total", static_cast<double>(s.published));
  m->Set("ktune_fleet_publishes_dropped_total", static_cast<double>(s.dropped));
}

}  // namespace ktune
