#include "daemon/entry_cache.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "tuner/gemm_problem.h"
#include "tuner/wire.h"

namespace ktune {

std::string EntryCache::FamilyKey(const NormProblem& problem, const std::string& device_key,
                                  const std::string& software_key) {
  NormProblem family = problem;
  family.m = 0;
  return absl::StrCat(CanonicalKey(family), "\x1f", device_key, "\x1f", software_key);
}

std::string EntryCache::FamilyKey(const v1::GemmProblem& problem, const std::string& device_key,
                                  const std::string& software_key) {
  v1::GemmProblem family = problem;
  family.set_m(0);
  return absl::StrCat(GemmCanonicalKey(family), "\x1f", device_key, "\x1f", software_key);
}

void EntryCache::RememberLocked(const v1::Entry& entry) {
  absl::StatusOr<EntryKey> key = KeyOf(entry);
  if (!key.ok()) return;
  const std::string flat = FlatKey(*key);
  entries_.insert_or_assign(flat, entry);
  if (entry.problem().has_gemm()) {
    const v1::GemmProblem& gemm = entry.problem().gemm();
    families_[FamilyKey(gemm, key->device_key, key->software_key)][gemm.m()] = flat;
    return;
  }
  absl::StatusOr<NormProblem> problem = NormProblemFromProto(entry.problem().norm());
  if (problem.ok()) {
    families_[FamilyKey(*problem, key->device_key, key->software_key)][problem->m] = flat;
  }
}

absl::StatusOr<int> EntryCache::Load() {
  absl::StatusOr<std::vector<v1::Entry>> all = store_->List();
  if (!all.ok()) return all.status();
  absl::MutexLock lock(&mu_);
  int skipped = 0;
  for (const v1::Entry& e : *all) {
    if (!KeyOf(e).ok()) {
      ++skipped;
      continue;
    }
    RememberLocked(e);
  }
  return skipped;
}

std::optional<v1::Entry> EntryCache::Lookup(const EntryKey& key) {
  absl::ReaderMutexLock lock(&mu_);
  auto it = entries_.find(FlatKey(key));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::optional<v1::Entry> EntryCache::Nearest(const NormProblem& problem,
                                             const std::string& device_key,
                                             const std::string& software_key) {
  absl::ReaderMutexLock lock(&mu_);
  return NearestInFamily(FamilyKey(problem, device_key, software_key), problem.m);
}

std::optional<v1::Entry> EntryCache::Nearest(const v1::GemmProblem& problem, const std::string& device_key,
                                             const std::string& software_key) {
  absl::ReaderMutexLock lock(&mu_);
  return NearestInFamily(FamilyKey(problem, device_key, software_key), problem.m());
}

std::optional<v1::Entry> EntryCache::NearestInFamily(const std::string& family_key, int64_t m_wanted) {
  auto family = families_.find(family_key);
  if (family == families_.end() || family->second.empty()) return std::nullopt;
  const std::map<int64_t, std::string>& by_m = family->second;
  // The neighbours of m on either side; the closer by ratio wins, the smaller on a tie.
  auto above = by_m.lower_bound(m_wanted);
  auto best = above;
  if (above == by_m.end()) {
    best = std::prev(above);
  } else if (above != by_m.begin()) {
    auto below = std::prev(above);
    const double m = static_cast<double>(m_wanted);
    if (std::log(m / below->first) <= std::log(above->first / m)) best = below;
  }
  auto it = entries_.find(best->second);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

absl::Status EntryCache::Insert(const v1::Entry& entry) {
  absl::MutexLock write_lock(&write_mu_);
  if (absl::Status s = store_->Put(entry); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  RememberLocked(entry);
  return absl::OkStatus();
}

absl::StatusOr<PutAllStats> EntryCache::InsertAll(const std::vector<v1::Entry>& entries) {
  absl::MutexLock write_lock(&write_mu_);
  return InsertAllLocked(entries);
}

absl::Status EntryCache::Update(
    const std::function<absl::StatusOr<std::vector<v1::Entry>>()>& plan) {
  absl::MutexLock write_lock(&write_mu_);
  absl::StatusOr<std::vector<v1::Entry>> writes = plan();
  if (!writes.ok()) return writes.status();
  if (writes->empty()) return absl::OkStatus();
  return InsertAllLocked(*writes).status();
}

absl::StatusOr<PutAllStats> EntryCache::InsertAllLocked(const std::vector<v1::Entry>& entries) {
  absl::StatusOr<PutAllStats> stats = store_->PutAll(entries);
  if (!stats.ok()) return stats;
  absl::MutexLock lock(&mu_);
  for (const v1::Entry& e : entries) RememberLocked(e);
  return stats;
}

}  // namespace ktune
