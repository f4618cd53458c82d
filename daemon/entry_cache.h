// The daemon's view of tuned entries: the SQLite store behind a bounded LRU of
// decoded entries (and of keys known to be absent), so a repeated GetConfig is
// a hash lookup in memory (well under a millisecond) while memory stays
// bounded whatever the store holds: nothing is read at start, a miss in the
// LRU is one indexed point read, and a nearest-shape answer is an index seek
// on (family, M).
//
// Each entry is kept with the answer it gives, built by the caller's
// `answer_of` once per read from the store: an entry and this build's
// templates are fixed while the daemon runs, so re-deriving and re-checking
// its recipe on every hit would compute the same answer again (it cost a hit
// 5-7 us, more than the rest of GetConfig; bench/results/2026-12-02-load-c52fae7.md).
// Why: bench/results/decisions/getconfig-hit-path.md
//
// Thread-safe. Lookups take one shard's lock of the LRU and, on a miss, a read
// connection of the store; they never wait for a write's commit. Writes go to
// the store first (so an acknowledged entry is durable) and then drop the keys
// they touched from the LRU; each shard's version makes a lookup that read
// the store before such a write discard what it read, so the LRU never keeps
// an entry older than the store. Writes are serialized by write_mu_, so an
// Update's plan sees every entry it may overwrite.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/entry.h"
#include "cache/store.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // grpc::SerializationTraits for protobuf
#include "grpcpp/support/byte_buffer.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/op.h"

namespace ktune {

// A stored entry as the daemon serves it.
struct ServedEntry {
  v1::Entry entry;
  // What `answer_of` made of `entry`: the answer without code, or why the
  // entry is not served.
  absl::StatusOr<v1::GetConfigResponse> answer;
  // `answer` serialized, as GetConfig sends it (empty when it is not ok).
  // Its slices are reference-counted and never changed: a hit sends a
  // shallow copy of these bytes.
  grpc::ByteBuffer answer_wire;
};

class EntryCache {
 public:
  // Decoded entries (and absent keys) the LRU keeps, over all shards.
  static constexpr size_t kDefaultCapacity = 16384;

  // The answer an entry gives. Must be a function of the entry alone (and of
  // what is fixed for the cache's lifetime), since it is kept with it.
  using AnswerFn = std::function<absl::StatusOr<v1::GetConfigResponse>(const v1::Entry&)>;

  EntryCache(Store* store, AnswerFn answer_of, size_t capacity = kDefaultCapacity);

  // The entry under exactly `key`, or null. Shared, never copied: the entry
  // stays valid for as long as the caller holds it, whatever is written
  // meanwhile. A store error is logged and answered as a miss.
  std::shared_ptr<const ServedEntry> Lookup(const EntryKey& key);

  // The stored entry of `family` (the op's Family: same op, device, software
  // and everything but M) whose M is nearest to family.position (by ratio),
  // if any. Read from the store on each call, and without an answer: the
  // caller answers its own problem with the entry's config.
  std::shared_ptr<const v1::Entry> Nearest(const ProblemFamily& family);

  // Stores durably. REQUIRES: ValidateEntry(entry).ok().
  absl::Status Insert(const v1::Entry& entry);

  // Stores all in one transaction.
  absl::StatusOr<PutAllStats> InsertAll(const std::vector<v1::Entry>& entries);

  // Read-modify-write with no other write in between: calls `plan` (which may
  // call Lookup) and stores the entries it returns in one transaction. A
  // failed plan or store writes nothing. REQUIRES: the entries validated.
  absl::Status Update(const std::function<absl::StatusOr<std::vector<v1::Entry>>()>& plan);

  // Deletes what `filter` takes from the store (Store::Delete) and from memory.
  absl::StatusOr<DeleteResult> Delete(const EntryFilter& filter, bool dry_run, size_t max_listed);

  // Entries and absent keys held in memory now (for tests and metrics).
  size_t cached();

 private:
  static constexpr int kShards = 16;
  struct Node {
    std::string flat_key;
    std::shared_ptr<const ServedEntry> entry;  // null: known to be absent
  };
  struct Shard {
    absl::Mutex mu;
    std::list<Node> order ABSL_GUARDED_BY(mu);  // most recently used first
    absl::flat_hash_map<std::string, std::list<Node>::iterator> index ABSL_GUARDED_BY(mu);
    uint64_t version ABSL_GUARDED_BY(mu) = 0;  // bumped by every write to a key of the shard
  };

  Shard& ShardOf(const std::string& flat_key);
  // Remembers what a lookup read, unless a write to the shard came between.
  void RememberIfCurrent(Shard& shard, const std::string& flat_key, uint64_t version,
                         std::shared_ptr<const ServedEntry> entry);
  std::shared_ptr<const ServedEntry> Served(v1::Entry entry) const;
  // After a write to `keys` has committed: they are read again from the store.
  void Forget(const std::vector<EntryKey>& keys);
  void ForgetAll();
  void ForgetWritten(const std::vector<v1::Entry>& entries);
  absl::StatusOr<PutAllStats> InsertAllLocked(const std::vector<v1::Entry>& entries)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  Store* const store_;
  const AnswerFn answer_of_;
  const size_t shard_capacity_;
  absl::Mutex write_mu_;  // held across a store write and the forgetting after it
  std::array<Shard, kShards> shards_;
};

}  // namespace ktune
