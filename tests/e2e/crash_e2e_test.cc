// Crash consistency: ktuned killed with SIGKILL at random moments while a
// client imports bundles, restarted on the same database, round after round.
// Every import the client saw succeed must be there whole, no import may be
// there in part, and SQLite must find the file intact.
#include <sqlite3.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <random>
#include <set>
#include <thread>

#include "cache/bundle.h"
#include "cache/store.h"
#include "tests/cache/test_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/builtin_ops.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

constexpr int kEntriesPerBundle = 40;

// Bundle i: kEntriesPerBundle entries of its own (M unique to it).
std::vector<v1::Entry> BundleEntries(int i) {
  std::vector<v1::Entry> out;
  for (int j = 0; j < kEntriesPerBundle; ++j) out.push_back(testutil::MakeTestEntry(i * 1000 + j + 1, 4096));
  return out;
}

std::string QueryText(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  std::string text(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
  sqlite3_finalize(stmt);
  return text;
}

TEST_CASE("kill -9 during imports: every acknowledged import is whole, the database intact", "[e2e][crash]") {
  TempDir dir;
  const std::string db_path = dir.path() + "/cache.db";
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> delay_ms(20, 250);
  std::set<int> acknowledged;
  int next_bundle = 0;
  constexpr int kRounds = 12;
  for (int round = 0; round < kRounds; ++round) {
    DaemonProcess daemon(dir.path(), db_path);
    REQUIRE(daemon.Start());
    std::atomic<bool> stop{false};
    std::vector<int> acked_this_round;
    std::thread importer([&] {
      auto client = Client::Create(daemon.address(), 10);
      while (!stop) {
        const int i = next_bundle++;
        auto r = client->ImportBundle(EncodeBundle(BundleEntries(i), "crash-test", 1795000000));
        if (!r.ok()) return;  // the daemon is gone: this import's fate is unknown
        acked_this_round.push_back(i);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    daemon.Kill();
    stop = true;
    importer.join();
    acknowledged.insert(acked_this_round.begin(), acked_this_round.end());
  }
  INFO(acknowledged.size() << " imports acknowledged of " << next_bundle << " attempted");
  CHECK(acknowledged.size() >= kRounds);  // the kills did land among imports

  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    CHECK(QueryText(db, "PRAGMA integrity_check") == "ok");
    // The counts status reports agree with the entries themselves.
    CHECK(QueryText(db, "SELECT coalesce((SELECT sum(n) FROM entry_counts), 0) = (SELECT count(*) FROM entries)") ==
          "1");
    sqlite3_close_v2(db);
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), db_path);
  REQUIRE(store.ok());
  for (int i = 0; i < next_bundle; ++i) {
    int present = 0;
    for (const v1::Entry& e : BundleEntries(i)) {
      absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), e);
      REQUIRE(key.ok());
      absl::StatusOr<std::optional<v1::Entry>> got = (*store)->Get(*key);
      REQUIRE(got.ok());
      present += got->has_value();
    }
    INFO("bundle " << i);
    if (acknowledged.count(i) > 0) {
      CHECK(present == kEntriesPerBundle);
    } else {
      CHECK((present == 0 || present == kEntriesPerBundle));  // never in part
    }
  }
}

}  // namespace
}  // namespace ktune
