#include "daemon/entry_cache.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "spdlog/spdlog.h"

namespace ktune {

EntryCache::EntryCache(Store* store, AnswerFn answer_of, size_t capacity)
    : store_(store), answer_of_(std::move(answer_of)), shard_capacity_(std::max<size_t>(1, capacity / kShards)) {}

std::shared_ptr<const ServedEntry> EntryCache::Served(v1::Entry entry) const {
  auto served = std::make_shared<ServedEntry>();
  served->answer = answer_of_(entry);
  if (served->answer.ok()) {
    bool own_buffer;
    (void)grpc::SerializationTraits<v1::GetConfigResponse>::Serialize(*served->answer, &served->answer_wire,
                                                                      &own_buffer);
  }
  served->entry = std::move(entry);
  return served;
}

EntryCache::Shard& EntryCache::ShardOf(const std::string& flat_key) {
  return shards_[absl::Hash<std::string>()(flat_key) % kShards];
}

std::shared_ptr<const ServedEntry> EntryCache::Lookup(const EntryKey& key) {
  std::string flat = FlatKey(key);
  Shard& shard = ShardOf(flat);
  uint64_t version;
  {
    absl::MutexLock lock(&shard.mu);
    if (auto it = shard.index.find(flat); it != shard.index.end()) {
      shard.order.splice(shard.order.begin(), shard.order, it->second);
      return it->second->entry;
    }
    version = shard.version;
  }
  absl::StatusOr<std::optional<v1::Entry>> stored = store_->Get(key);
  if (!stored.ok()) {
    spdlog::error("event=store_lookup_failed key=\"{}\" error=\"{}\"", key.problem_key,
                  std::string(stored.status().message()));
    return nullptr;
  }
  std::shared_ptr<const ServedEntry> entry;
  if (stored->has_value()) entry = Served(**std::move(stored));
  RememberIfCurrent(shard, flat, version, entry);
  return entry;
}

void EntryCache::RememberIfCurrent(Shard& shard, const std::string& flat_key, uint64_t version,
                                   std::shared_ptr<const ServedEntry> entry) {
  absl::MutexLock lock(&shard.mu);
  if (shard.version != version) return;  // a write came between: what was read may be old
  if (auto it = shard.index.find(flat_key); it != shard.index.end()) {
    it->second->entry = std::move(entry);  // another lookup of the same key got here first
    shard.order.splice(shard.order.begin(), shard.order, it->second);
    return;
  }
  shard.order.push_front(Node{flat_key, std::move(entry)});
  shard.index.emplace(flat_key, shard.order.begin());
  while (shard.order.size() > shard_capacity_) {
    shard.index.erase(shard.order.back().flat_key);
    shard.order.pop_back();
  }
}

void EntryCache::Forget(const std::vector<EntryKey>& keys) {
  for (const EntryKey& key : keys) {
    const std::string flat = FlatKey(key);
    Shard& shard = ShardOf(flat);
    absl::MutexLock lock(&shard.mu);
    ++shard.version;
    if (auto it = shard.index.find(flat); it != shard.index.end()) {
      shard.order.erase(it->second);
      shard.index.erase(it);
    }
  }
}

void EntryCache::ForgetAll() {
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    ++shard.version;
    shard.index.clear();
    shard.order.clear();
  }
}

size_t EntryCache::cached() {
  size_t n = 0;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    n += shard.order.size();
  }
  return n;
}

std::shared_ptr<const v1::Entry> EntryCache::Nearest(const ProblemFamily& family) {
  absl::StatusOr<std::optional<v1::Entry>> found = store_->Nearest(family.family_key, family.position);
  if (!found.ok()) {
    spdlog::error("event=store_nearest_failed error=\"{}\"", std::string(found.status().message()));
    return nullptr;
  }
  if (!found->has_value()) return nullptr;
  return std::make_shared<const v1::Entry>(**std::move(found));
}

absl::Status EntryCache::Insert(const v1::Entry& entry) {
  absl::MutexLock write_lock(&write_mu_);
  if (absl::Status s = store_->Put(entry); !s.ok()) return s;
  ForgetWritten({entry});
  return absl::OkStatus();
}

absl::StatusOr<PutAllStats> EntryCache::InsertAll(const std::vector<v1::Entry>& entries) {
  absl::MutexLock write_lock(&write_mu_);
  return InsertAllLocked(entries);
}

absl::Status EntryCache::Update(const std::function<absl::StatusOr<std::vector<v1::Entry>>()>& plan) {
  absl::MutexLock write_lock(&write_mu_);
  absl::StatusOr<std::vector<v1::Entry>> writes = plan();
  if (!writes.ok()) return writes.status();
  if (writes->empty()) return absl::OkStatus();
  return InsertAllLocked(*writes).status();
}

absl::StatusOr<PutAllStats> EntryCache::InsertAllLocked(const std::vector<v1::Entry>& entries) {
  absl::StatusOr<PutAllStats> stats = store_->PutAll(entries);
  if (!stats.ok()) return stats;
  ForgetWritten(entries);
  return stats;
}

void EntryCache::ForgetWritten(const std::vector<v1::Entry>& entries) {
  std::vector<EntryKey> keys;
  keys.reserve(entries.size());
  for (const v1::Entry& e : entries) {
    if (absl::StatusOr<EntryKey> key = KeyOf(store_->ops(), e); key.ok()) keys.push_back(*std::move(key));
  }
  Forget(keys);
}

absl::StatusOr<DeleteResult> EntryCache::Delete(const EntryFilter& filter, bool dry_run, size_t max_listed) {
  absl::MutexLock write_lock(&write_mu_);
  absl::StatusOr<DeleteResult> result = store_->Delete(filter, dry_run, max_listed);
  if (!result.ok() || dry_run || result->deleted == 0) return result;
  if (result->deleted <= static_cast<int64_t>(result->listed.size())) {
    Forget(result->listed);
  } else {
    ForgetAll();  // more than were listed: their keys are not at hand
  }
  return result;
}

}  // namespace ktune
