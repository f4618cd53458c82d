// The daemon's view of tuned entries: every stored entry in memory in front of
// the SQLite store, so a cache hit is a hash lookup (GetConfig must answer
// well under a millisecond) and a nearest-shape answer is a map search.
// Thread-safe: lookups take a shared lock; writes go to the store first (so an
// acknowledged entry is durable) and then to memory. Writes are serialized by
// write_mu_, so an Update's plan sees every entry it may overwrite.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/entry.h"
#include "cache/store.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/problem.h"

namespace ktune {

class EntryCache {
 public:
  explicit EntryCache(Store* store) : store_(store) {}

  // Reads every stored entry into memory. Entries that no longer decode are
  // skipped (and counted in the returned value).
  absl::StatusOr<int> Load();

  // The entry under exactly `key`.
  std::optional<v1::Entry> Lookup(const EntryKey& key);

  // The stored entry for the same op, dtypes, flags and N on the same device
  // and software whose M is nearest to problem.m (by ratio), if any.
  std::optional<v1::Entry> Nearest(const NormProblem& problem, const std::string& device_key,
                                   const std::string& software_key);
  // Likewise for a GEMM: the same N, K, batch, dtypes, layouts and epilogue.
  std::optional<v1::Entry> Nearest(const v1::GemmProblem& problem, const std::string& device_key,
                                   const std::string& software_key);

  // Stores durably, then remembers. REQUIRES: ValidateEntry(entry).ok().
  absl::Status Insert(const v1::Entry& entry);

  // Stores all in one transaction, then remembers them.
  absl::StatusOr<PutAllStats> InsertAll(const std::vector<v1::Entry>& entries);

  // Read-modify-write with no other write in between: calls `plan` (which may
  // call Lookup) and stores the entries it returns in one transaction. A
  // failed plan or store writes nothing. REQUIRES: the entries validated.
  absl::Status Update(const std::function<absl::StatusOr<std::vector<v1::Entry>>()>& plan);

 private:
  absl::StatusOr<PutAllStats> InsertAllLocked(const std::vector<v1::Entry>& entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Entries that differ only in M share a family: op, problem with m = 0,
  // device, software.
  static std::string FamilyKey(const NormProblem& problem, const std::string& device_key,
                               const std::string& software_key);
  static std::string FamilyKey(const v1::GemmProblem& problem, const std::string& device_key,
                               const std::string& software_key);
  // The family's entry whose M is nearest to m by ratio (the smaller on a tie).
  std::optional<v1::Entry> NearestInFamily(const std::string& family_key, int64_t m)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RememberLocked(const v1::Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // held across store write + remember
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, v1::Entry> entries_ ABSL_GUARDED_BY(mu_);  // FlatKey ->
  absl::flat_hash_map<std::string, std::map<int64_t, std::string>> families_
      ABSL_GUARDED_BY(mu_);  // FamilyKey -> M -> FlatKey
};

}  // namespace ktune
