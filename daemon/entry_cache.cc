#include "daemon/entry_cache.h"

namespace ktune {

absl::StatusOr<std::optional<v1::Entry>> EntryCache::Lookup(const EntryKey& key) {
  const std::string flat = FlatKey(key);
  {
    absl::ReaderMutexLock lock(&mu_);
    auto it = entries_.find(flat);
    if (it != entries_.end()) return std::optional<v1::Entry>(it->second);
  }
  absl::StatusOr<std::optional<v1::Entry>> stored = store_->Get(key);
  if (!stored.ok() || !stored->has_value()) return stored;
  absl::MutexLock lock(&mu_);
  entries_.insert_or_assign(flat, **stored);
  return stored;
}

absl::Status EntryCache::Insert(const v1::Entry& entry) {
  absl::StatusOr<EntryKey> key = KeyOf(entry);
  if (!key.ok()) return key.status();
  if (absl::Status s = store_->Put(entry); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  entries_.insert_or_assign(FlatKey(*key), entry);
  return absl::OkStatus();
}

absl::StatusOr<PutAllStats> EntryCache::InsertAll(const std::vector<v1::Entry>& entries) {
  absl::StatusOr<PutAllStats> stats = store_->PutAll(entries);
  if (!stats.ok()) return stats;
  absl::MutexLock lock(&mu_);
  for (const v1::Entry& e : entries) {
    if (absl::StatusOr<EntryKey> key = KeyOf(e); key.ok()) entries_.erase(FlatKey(*key));
  }
  return stats;
}

}  // namespace ktune
