#include "daemon/entry_cache.h"

#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "tests/cache/test_entries.h"

namespace ktune {
namespace {

using testutil::MakeTestEntry;

struct TempStore {
  TempStore() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ktune-entry-cache-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(dir + "/cache.db");
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
  absl::StatusOr<EntryKey> key = KeyOf(e);
  REQUIRE(key.ok());
  return *key;
}

TEST_CASE("EntryCache: reads the store on a miss, keeps a bounded number in memory", "[daemon][scale]") {
  TempStore t;
  std::vector<v1::Entry> entries;
  for (int m = 1; m <= 500; ++m) entries.push_back(MakeTestEntry(m, 4096));
  REQUIRE(t.store->PutAll(entries).ok());
  EntryCache cache(t.store.get(), /*capacity=*/64);
  CHECK(cache.cached() == 0);  // nothing read at construction
  for (const v1::Entry& e : entries) {
    std::shared_ptr<const v1::Entry> hit = cache.Lookup(KeyOrFail(e));
    REQUIRE(hit != nullptr);
    CHECK(hit->problem().norm().m() == e.problem().norm().m());
  }
  CHECK(cache.cached() <= 64);
  // A hit from memory is the same object, not a copy.
  const EntryKey key = KeyOrFail(entries.back());
  CHECK(cache.Lookup(key).get() == cache.Lookup(key).get());
  CHECK(cache.Lookup(KeyOrFail(MakeTestEntry(100000, 4096))) == nullptr);
}

TEST_CASE("EntryCache: writes and deletes are seen at once, never an older entry", "[daemon][scale]") {
  TempStore t;
  EntryCache cache(t.store.get());
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
  std::shared_ptr<const v1::Entry> last = cache.Lookup(key);
  REQUIRE(last != nullptr);
  CHECK(last->measurement().time_us() == 210.0);

  EntryFilter filter;
  filter.op = key.op;
  filter.problem_key = key.problem_key;
  absl::StatusOr<DeleteResult> deleted = cache.Delete(filter, /*dry_run=*/false, 10);
  REQUIRE(deleted.ok());
  CHECK(deleted->deleted == 1);
  CHECK(cache.Lookup(key) == nullptr);
}

}  // namespace
}  // namespace ktune
