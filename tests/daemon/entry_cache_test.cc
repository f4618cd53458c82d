#include "daemon/entry_cache.h"

#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "tests/cache/test_entries.h"
#include "tuner/builtin_ops.h"

namespace ktune {
namespace {

using testutil::MakeTestEntry;

struct TempStore {
  TempStore() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ktune-entry-cache-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(BuiltinOps(), dir + "/cache.db");
    REQUIRE(opened.ok());
    store = *std::move(opened);
  }
  ~TempStore() {
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
  std::unique_ptr<Store> store;
};

EntryKey KeyOrFail(const v1::Entry& e) {
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), e);
  REQUIRE(key.ok());
  return *key;
}

// An answer that shows which entry it was made from (its measured time) and
// counts how often it was made.
struct CountingAnswer {
  std::shared_ptr<std::atomic<int>> made = std::make_shared<std::atomic<int>>(0);
  EntryCache::AnswerFn Fn() const {
    return [made = made](const v1::Entry& e) -> absl::StatusOr<v1::GetConfigResponse> {
      ++*made;
      if (e.measurement().time_us() >= 1e6) return absl::InvalidArgumentError("stored entry: too slow to serve");
      v1::GetConfigResponse r;
      *r.mutable_measurement() = e.measurement();
      return r;
    };
  }
};

TEST_CASE("EntryCache: reads the store on a miss, keeps a bounded number in memory", "[daemon][scale]") {
  TempStore t;
  std::vector<v1::Entry> entries;
  for (int m = 1; m <= 500; ++m) entries.push_back(MakeTestEntry(m, 4096));
  REQUIRE(t.store->PutAll(entries).ok());
  EntryCache cache(t.store.get(), CountingAnswer().Fn(), /*capacity=*/64);
  CHECK(cache.cached() == 0);  // nothing read at construction
  for (const v1::Entry& e : entries) {
    std::shared_ptr<const ServedEntry> hit = cache.Lookup(KeyOrFail(e));
    REQUIRE(hit != nullptr);
    CHECK(hit->entry.problem().norm().m() == e.problem().norm().m());
  }
  CHECK(cache.cached() <= 64);
  // A hit from memory is the same object, not a copy.
  const EntryKey key = KeyOrFail(entries.back());
  CHECK(cache.Lookup(key).get() == cache.Lookup(key).get());
  CHECK(cache.Lookup(KeyOrFail(MakeTestEntry(100000, 4096))) == nullptr);
}

TEST_CASE("EntryCache: writes and deletes are seen at once, never an older entry", "[daemon][scale]") {
  TempStore t;
  CountingAnswer answer;
  EntryCache cache(t.store.get(), answer.Fn());
  v1::Entry entry = MakeTestEntry();
  const EntryKey key = KeyOrFail(entry);
  CHECK(cache.Lookup(key) == nullptr);  // remembered as absent...
  REQUIRE(cache.Insert(entry).ok());
  REQUIRE(cache.Lookup(key) != nullptr);  // ...and forgotten by the write

  // Lookups racing writes: once the last write is acknowledged, every lookup
  // answers it.
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      while (!stop) cache.Lookup(key);
    });
  }
  for (int i = 1; i <= 200; ++i) {
    entry.mutable_measurement()->set_time_us(10.0 + i);
    REQUIRE(cache.Insert(entry).ok());
  }
  stop = true;
  for (std::thread& r : readers) r.join();
  std::shared_ptr<const ServedEntry> last = cache.Lookup(key);
  REQUIRE(last != nullptr);
  CHECK(last->entry.measurement().time_us() == 210.0);
  REQUIRE(last->answer.ok());
  CHECK(last->answer->measurement().time_us() == 210.0);  // the answer is the new entry's too

  EntryFilter filter;
  filter.op = key.op;
  filter.problem_key = key.problem_key;
  absl::StatusOr<DeleteResult> deleted = cache.Delete(filter, /*dry_run=*/false, 10);
  REQUIRE(deleted.ok());
  CHECK(deleted->deleted == 1);
  CHECK(cache.Lookup(key) == nullptr);
}

TEST_CASE("EntryCache: an entry's answer is made once per read from the store, and again after a write", "[daemon]") {
  TempStore t;
  CountingAnswer answer;
  EntryCache cache(t.store.get(), answer.Fn());
  v1::Entry entry = MakeTestEntry();
  const EntryKey key = KeyOrFail(entry);
  REQUIRE(cache.Insert(entry).ok());
  CHECK(*answer.made == 0);  // a write makes no answer
  for (int i = 0; i < 100; ++i) {
    std::shared_ptr<const ServedEntry> hit = cache.Lookup(key);
    REQUIRE(hit != nullptr);
    REQUIRE(hit->answer.ok());
    CHECK(hit->answer->measurement().time_us() == entry.measurement().time_us());
  }
  CHECK(*answer.made == 1);

  // A rewrite of the key is answered from the new entry, once.
  entry.mutable_measurement()->set_time_us(entry.measurement().time_us() + 1);
  REQUIRE(cache.Insert(entry).ok());
  for (int i = 0; i < 10; ++i) {
    std::shared_ptr<const ServedEntry> hit = cache.Lookup(key);
    REQUIRE(hit != nullptr);
    REQUIRE(hit->answer.ok());
    CHECK(hit->answer->measurement().time_us() == entry.measurement().time_us());
  }
  CHECK(*answer.made == 2);

  // An entry that is not served keeps its reason, and is not served on the
  // next lookup either.
  entry.mutable_measurement()->set_time_us(2e6);
  REQUIRE(cache.Insert(entry).ok());
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<const ServedEntry> hit = cache.Lookup(key);
    REQUIRE(hit != nullptr);
    CHECK(hit->answer.status().message() == "stored entry: too slow to serve");
  }
  CHECK(*answer.made == 3);
}

}  // namespace
}  // namespace ktune
