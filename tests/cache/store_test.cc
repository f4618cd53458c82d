#include "cache/store.h"

#include <google/protobuf/util/message_differencer.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/cache/current_entries.h"
#include "tests/cache/test_entries.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

using testutil::MakeTestEntry;

// A fresh directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ktune-store-test-XXXXXX");
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Direct access to the database file, bypassing Store, for what a test must
// observe or tamper with from outside (another process, an older build).
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    REQUIRE(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close_v2(db_); }
  void Exec(const std::string& sql) {
    char* error = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    INFO(sql << ": " << (error ? error : ""));
    sqlite3_free(error);
    REQUIRE(rc == SQLITE_OK);
  }
  std::string QueryText(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
    std::string text(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
    sqlite3_finalize(stmt);
    return text;
  }
  sqlite3* get() { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

std::unique_ptr<Store> OpenOrFail(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), path);
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  return *std::move(store);
}

EntryKey KeyOrFail(const v1::Entry& entry) {
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), entry);
  REQUIRE(key.ok());
  return *key;
}

bool Same(const v1::Entry& a, const v1::Entry& b) { return google::protobuf::util::MessageDifferencer::Equals(a, b); }

int64_t CountAll(Store& store) {
  absl::StatusOr<std::vector<v1::Entry>> all = store.List();
  REQUIRE(all.ok());
  return static_cast<int64_t>(all->size());
}

// Undoes migration 2 -> 3, leaving the tables as version 2 of the store wrote them.
void DowngradeToVersion2(RawDb& raw) {
  raw.Exec(
      "DROP TRIGGER entries_count_insert; DROP TRIGGER entries_count_delete; "
      "DROP TRIGGER entries_count_rekey; DROP TABLE entry_counts; DROP INDEX entries_family; "
      "ALTER TABLE entries DROP COLUMN family_key; ALTER TABLE entries DROP COLUMN m");
  raw.Exec("PRAGMA user_version = 2");
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("Store: put then get returns the entry", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  const v1::Entry entry = MakeTestEntry();
  REQUIRE(store->Put(entry).ok());

  absl::StatusOr<std::optional<v1::Entry>> got = store->Get(KeyOrFail(entry));
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK(Same(**got, entry));

  SECTION("another key is a miss, not an error") {
    absl::StatusOr<std::optional<v1::Entry>> miss = store->Get(KeyOrFail(MakeTestEntry(8, 4096)));
    REQUIRE(miss.ok());
    CHECK_FALSE(miss->has_value());
  }
  SECTION("the path is the one opened") { CHECK(store->path() == dir.File("cache.db")); }
}

TEST_CASE("Store: a cubin is never stored", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  v1::Entry entry = MakeTestEntry();
  entry.mutable_recipe()->set_cubin(std::string(1000, '\x7f'));
  REQUIRE(store->Put(entry).ok());
  absl::StatusOr<std::optional<v1::Entry>> got = store->Get(KeyOrFail(entry));
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->recipe().cubin().empty());
}

TEST_CASE("Store: an entry put with its recipe's interface reads back without it", "[cache][recipe]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  for (const v1::Entry& stored : testutil::CurrentEntriesOfEveryKind()) {
    INFO(stored.problem().ShortDebugString());
    const v1::Entry entry = testutil::WithServedRecipe(stored);
    REQUIRE(store->Put(entry).ok());
    absl::StatusOr<std::optional<v1::Entry>> got = store->Get(KeyOrFail(entry));
    REQUIRE(got.ok());
    REQUIRE(got->has_value());
    CHECK((*got)->recipe().tensors().empty());
    CHECK_FALSE((*got)->recipe().has_cublaslt_call());
    for (const v1::KernelLaunch& k : (*got)->recipe().kernels()) CHECK(k.args().empty());
    CHECK(Same(**got, stored));
  }
}

TEST_CASE("Store: an invalid entry is refused", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  v1::Entry entry = MakeTestEntry();
  entry.mutable_measurement()->set_time_us(-1);
  absl::Status s = store->Put(entry);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(CountAll(*store) == 0);
}

TEST_CASE("Store: Open creates parent directories", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("a/b/c/cache.db");
  auto store = OpenOrFail(path);
  CHECK(std::filesystem::exists(path));
}

TEST_CASE("Store: an existing empty file becomes a new database", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  std::ofstream(path, std::ios::binary).flush();  // as `touch` leaves it
  auto store = OpenOrFail(path);
  REQUIRE(store->Put(MakeTestEntry()).ok());
  CHECK(CountAll(*store) == 1);
}

TEST_CASE("Store: a file that cannot be written is refused at Open", "[cache]") {
  if (geteuid() == 0) {
    WARN("skipped: root writes regardless of permissions");
    return;
  }
  TempDir dir;
  const std::string path = dir.File("cache.db");
  OpenOrFail(path).reset();
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), path);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(store.status().message()), Catch::Contains("read-only"));
}

TEST_CASE("Store: the database is in WAL mode with the current schema", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  auto store = OpenOrFail(path);
  RawDb raw(path);
  CHECK(raw.QueryText("PRAGMA journal_mode") == "wal");
  CHECK(raw.QueryText("PRAGMA user_version") == std::to_string(kStoreSchemaVersion));
}

TEST_CASE("Store: entries survive a reopen", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  std::vector<v1::Entry> entries = {MakeTestEntry(1024, 4096), MakeTestEntry(2048, 4096), MakeTestEntry(4096, 8192)};
  {
    auto store = OpenOrFail(path);
    REQUIRE(store->PutAll(entries).ok());
  }
  auto store = OpenOrFail(path);
  for (const v1::Entry& entry : entries) {
    absl::StatusOr<std::optional<v1::Entry>> got = store->Get(KeyOrFail(entry));
    REQUIRE(got.ok());
    REQUIRE(got->has_value());
    CHECK(Same(**got, entry));
  }
  CHECK(CountAll(*store) == 3);
}

TEST_CASE("Store: acknowledged entries survive a process that dies without closing", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  const std::vector<v1::Entry> entries = {MakeTestEntry(1024, 4096), MakeTestEntry(2048, 4096)};
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // No destructors, no close, no WAL checkpoint: as if killed right after
    // the Put returned.
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), path);
    bool ok = store.ok() && (*store)->Put(entries[0]).ok() && (*store)->Put(entries[1]).ok();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(std::filesystem::exists(path + "-wal"));  // the entries are still only in the WAL

  auto store = OpenOrFail(path);
  for (const v1::Entry& entry : entries) {
    absl::StatusOr<std::optional<v1::Entry>> got = store->Get(KeyOrFail(entry));
    REQUIRE(got.ok());
    REQUIRE(got->has_value());
    CHECK(Same(**got, entry));
  }
}

TEST_CASE("Store: a database from a newer schema is refused and left alone", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  {
    auto store = OpenOrFail(path);
    REQUIRE(store->Put(MakeTestEntry()).ok());
  }
  RawDb(path).Exec("PRAGMA user_version = " + std::to_string(kStoreSchemaVersion + 1));

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), path);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(store.status().message()),
             Catch::Contains(path) && Catch::Contains("newer ktune") &&
                 Catch::Contains("schema version " + std::to_string(kStoreSchemaVersion + 1)));
  CHECK(RawDb(path).QueryText("PRAGMA user_version") == std::to_string(kStoreSchemaVersion + 1));
}

TEST_CASE("Store: a file that is not SQLite is refused and left alone", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  const std::string text = "this is a config file, not a database\n" + std::string(4096, '#');
  std::ofstream(path, std::ios::binary) << text;

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), path);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(store.status().message()),
             Catch::Contains(path) && Catch::Contains("not a ktune database") && Catch::Contains("not an SQLite file"));
  CHECK(ReadFile(path) == text);
}

TEST_CASE("Store: another program's SQLite database is refused and left alone", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("other.db");
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "CREATE TABLE notes (text TEXT)", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), path);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(store.status().message()), Catch::Contains("not a ktune database"));
  RawDb raw(path);
  CHECK(raw.QueryText("PRAGMA journal_mode") == "delete");  // not switched to WAL
  CHECK(raw.QueryText("SELECT count(*) FROM sqlite_schema") == "1");
}

TEST_CASE("Store: PutAll counts added, replaced and unchanged", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  const v1::Entry a = MakeTestEntry(1024, 4096);
  const v1::Entry b = MakeTestEntry(2048, 4096);
  v1::Entry b_faster = b;
  b_faster.mutable_measurement()->set_time_us(10.5);
  const v1::Entry c = MakeTestEntry(4096, 4096);

  absl::StatusOr<PutAllStats> first = store->PutAll({a, b});
  REQUIRE(first.ok());
  CHECK(first->added == 2);
  CHECK(first->replaced == 0);
  CHECK(first->unchanged == 0);

  absl::StatusOr<PutAllStats> second = store->PutAll({a, b_faster, c});
  REQUIRE(second.ok());
  CHECK(second->added == 1);
  CHECK(second->replaced == 1);
  CHECK(second->unchanged == 1);

  absl::StatusOr<std::optional<v1::Entry>> got = store->Get(KeyOrFail(b));
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->measurement().time_us() == 10.5);
  CHECK(CountAll(*store) == 3);

  SECTION("an empty PutAll writes nothing") {
    absl::StatusOr<PutAllStats> none = store->PutAll({});
    REQUIRE(none.ok());
    CHECK(none->added + none->replaced + none->unchanged == 0);
  }
}

TEST_CASE("Store: PutAll is all or nothing", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  auto store = OpenOrFail(path);
  const v1::Entry kept = MakeTestEntry(512, 4096);
  REQUIRE(store->Put(kept).ok());
  v1::Entry kept_changed = kept;
  kept_changed.mutable_measurement()->set_time_us(1);

  SECTION("an invalid entry in the middle") {
    v1::Entry bad = MakeTestEntry(2048, 4096);
    bad.mutable_measurement()->set_time_us(-1);
    absl::StatusOr<PutAllStats> stats =
        store->PutAll({MakeTestEntry(1024, 4096), kept_changed, bad, MakeTestEntry(4096, 4096)});
    REQUIRE_FALSE(stats.ok());
    CHECK(stats.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(stats.status().message()),
               Catch::StartsWith("entry 2: measurement.time_us: must be finite and > 0"));
  }
  SECTION("SQLite failing in the middle") {
    // A trigger makes the third insert fail inside the transaction, after two
    // rows (one new, one replacing) have been written.
    RawDb(path).Exec(
        "CREATE TRIGGER fail_on_777 BEFORE INSERT ON entries WHEN NEW.time_us = 777 "
        "BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
    v1::Entry poisoned = MakeTestEntry(2048, 4096);
    poisoned.mutable_measurement()->set_time_us(777);
    absl::StatusOr<PutAllStats> stats =
        store->PutAll({MakeTestEntry(1024, 4096), kept_changed, poisoned, MakeTestEntry(4096, 4096)});
    REQUIRE_FALSE(stats.ok());
    CHECK_THAT(std::string(stats.status().message()),
               Catch::StartsWith("entry 2: ") && Catch::Contains("injected failure"));
    RawDb(path).Exec("DROP TRIGGER fail_on_777");
  }

  // Nothing of the failed batch is visible, to this connection or another.
  absl::StatusOr<std::vector<v1::Entry>> all = store->List();
  REQUIRE(all.ok());
  REQUIRE(all->size() == 1);
  CHECK(Same(all->front(), kept));
  CHECK(RawDb(path).QueryText("SELECT count(*) FROM entries") == "1");

  // The store is not left inside a transaction.
  absl::StatusOr<PutAllStats> after = store->PutAll({MakeTestEntry(1024, 4096)});
  REQUIRE(after.ok());
  CHECK(after->added == 1);
  CHECK(CountAll(*OpenOrFail(path)) == 2);
}

TEST_CASE("Store: List filters by op and is ordered by key, CountByOp counts", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  auto store = OpenOrFail(path);
  REQUIRE(store->PutAll({MakeTestEntry(4096, 4096), MakeTestEntry(1024, 4096), MakeTestEntry(2048, 4096)}).ok());
  // Only rmsnorm.fwd validates in this version, so a row of another op is
  // written directly, to see that the filter uses the op column.
  {
    RawDb raw(path);
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(raw.get(),
                               "INSERT INTO entries (op, problem_key, device_key, software_key, entry, "
                               "tuned_at_unix, time_us) SELECT 'layernorm.fwd', problem_key, "
                               "device_key, software_key, entry, tuned_at_unix, time_us FROM "
                               "entries WHERE problem_key LIKE '% m=1024 %'",
                               -1, &stmt, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(stmt) == SQLITE_DONE);
    sqlite3_finalize(stmt);
  }

  absl::StatusOr<std::vector<v1::Entry>> rms = store->List("rmsnorm.fwd");
  REQUIRE(rms.ok());
  REQUIRE(rms->size() == 3);
  std::vector<std::string> keys;
  for (const v1::Entry& e : *rms) keys.push_back(KeyOrFail(e).problem_key);
  CHECK(std::is_sorted(keys.begin(), keys.end()));

  absl::StatusOr<std::vector<v1::Entry>> ln = store->List("layernorm.fwd");
  REQUIRE(ln.ok());
  CHECK(ln->size() == 1);

  absl::StatusOr<std::vector<v1::Entry>> none = store->List("rmsnorm.bwd");
  REQUIRE(none.ok());
  CHECK(none->empty());

  CHECK(CountAll(*store) == 4);

  absl::StatusOr<std::map<std::string, int64_t>> counts = store->CountByOp();
  REQUIRE(counts.ok());
  CHECK(*counts == std::map<std::string, int64_t>{{"layernorm.fwd", 1}, {"rmsnorm.fwd", 3}});
}

TEST_CASE("Store: an empty store lists and counts nothing", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  CHECK(CountAll(*store) == 0);
  absl::StatusOr<std::map<std::string, int64_t>> counts = store->CountByOp();
  REQUIRE(counts.ok());
  CHECK(counts->empty());
}

TEST_CASE("Store: two stores on one file see each other's writes", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  auto first = OpenOrFail(path);
  auto second = OpenOrFail(path);
  REQUIRE(first->Put(MakeTestEntry(1024, 4096)).ok());
  REQUIRE(second->Put(MakeTestEntry(2048, 4096)).ok());
  CHECK(CountAll(*first) == 2);
  CHECK(CountAll(*second) == 2);
}

TEST_CASE("Store: concurrent puts and gets from many threads", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const v1::Entry e = MakeTestEntry(1 + t * kPerThread + i, 4096);
        absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), e);
        if (!key.ok() || !store->Put(e).ok()) {
          ++failures[t];
          continue;
        }
        absl::StatusOr<std::optional<v1::Entry>> got = store->Get(*key);
        if (!got.ok() || !got->has_value()) ++failures[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(failures == std::vector<int>(kThreads, 0));
  CHECK(CountAll(*store) == kThreads * kPerThread);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("Store: a version 1 database migrates to the quarantine table, keeping its entries", "[cache]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  {
    auto store = OpenOrFail(path);
    REQUIRE(store->Put(MakeTestEntry()).ok());
  }
  {
    RawDb raw(path);  // what the first version of the store wrote
    DowngradeToVersion2(raw);
    raw.Exec("DROP TABLE quarantine");
    raw.Exec("PRAGMA user_version = 1");
  }
  auto store = OpenOrFail(path);
  auto listed = store->List();
  REQUIRE(listed.ok());
  CHECK(listed->size() == 1);
  CHECK(RawDb(path).QueryText("PRAGMA user_version") == std::to_string(kStoreSchemaVersion));
  auto none = store->Quarantined("dev", "sw");
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("Store: quarantined candidates are kept per environment", "[cache]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  REQUIRE(store->Quarantine({"dev A", "sw 1", "ktune::k<1>", "fault", "illegal address", 100}).ok());
  REQUIRE(store->Quarantine({"dev A", "sw 1", "ktune::k<2>", "timeout", "no answer in 30 s", 101}).ok());
  REQUIRE(store->Quarantine({"dev B", "sw 1", "ktune::k<3>", "fault", "", 102}).ok());
  REQUIRE(store->Quarantine({"dev A", "sw 1", "ktune::k<1>", "fault", "again", 103}).ok());  // replaces
  auto a = store->Quarantined("dev A", "sw 1");
  REQUIRE(a.ok());
  REQUIRE(a->size() == 2);
  CHECK((*a)[0].candidate == "ktune::k<1>");
  CHECK((*a)[0].detail == "again");
  CHECK((*a)[0].at_unix == 103);
  CHECK((*a)[1].reason == "timeout");
  CHECK(store->Quarantined("dev A", "sw 2")->empty());
  CHECK(store->Quarantined("dev B", "sw 1")->size() == 1);
}

// ---------------------------------------------------------------- scale

// Entries of four families (two ops, two widths) and many M.
std::vector<v1::Entry> ManyEntries(int per_family) {
  std::vector<v1::Entry> out;
  for (int64_t n : {2048, 4096}) {
    for (bool layernorm : {false, true}) {
      for (int i = 1; i <= per_family; ++i) {
        v1::Entry e = MakeTestEntry(i * 8, n);
        if (layernorm) e.mutable_problem()->mutable_norm()->set_op(v1::LAYERNORM);
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

std::vector<std::string> FlatKeysOf(const std::vector<StoredEntry>& entries) {
  std::vector<std::string> keys;
  for (const StoredEntry& e : entries) keys.push_back(FlatKey(e.key));
  return keys;
}

// Pages through everything `filter` takes, `limit` and `max_bytes` a page.
std::vector<StoredEntry> PageThrough(Store& store, const EntryFilter& filter, int limit, size_t max_bytes, int* pages) {
  std::vector<StoredEntry> all;
  PageRequest page;
  page.limit = limit;
  page.max_bytes = max_bytes;
  *pages = 0;
  while (true) {
    absl::StatusOr<Page> p = store.ListPage(filter, page);
    INFO(p.status().ToString());
    REQUIRE(p.ok());
    ++*pages;
    REQUIRE(*pages < 10000);
    for (StoredEntry& e : p->entries) all.push_back(std::move(e));
    if (!p->more) return all;
    REQUIRE(!p->entries.empty());
    page.after = all.back().key;
  }
}

TEST_CASE("Store: paging returns every entry exactly once, in key order", "[cache][scale]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  const std::vector<v1::Entry> entries = ManyEntries(60);  // 240 entries
  REQUIRE(store->PutAll(entries).ok());

  std::vector<std::string> expected;
  for (const v1::Entry& e : entries) expected.push_back(FlatKey(KeyOrFail(e)));
  std::sort(expected.begin(), expected.end());

  int pages = 0;
  SECTION("by count") {
    std::vector<std::string> got = FlatKeysOf(PageThrough(*store, {}, 7, size_t{1} << 20, &pages));
    CHECK(got == expected);
    CHECK(pages == (240 + 6) / 7);
  }
  SECTION("by bytes: a page holds at least one entry however small the budget") {
    std::vector<std::string> got = FlatKeysOf(PageThrough(*store, {}, 1000, 1, &pages));
    CHECK(got == expected);
    CHECK(pages == 240);
  }
  SECTION("one op") {
    EntryFilter filter;
    filter.op = "layernorm.fwd";
    std::vector<StoredEntry> got = PageThrough(*store, filter, 13, size_t{1} << 20, &pages);
    CHECK(got.size() == 120);
    for (const StoredEntry& e : got) CHECK(e.key.op == "layernorm.fwd");
    CHECK(std::is_sorted(got.begin(), got.end(),
                         [](const StoredEntry& a, const StoredEntry& b) { return FlatKey(a.key) < FlatKey(b.key); }));
  }
  SECTION("entries written between pages do not repeat or hide the others") {
    PageRequest page;
    page.limit = 50;
    absl::StatusOr<Page> first = store->ListPage({}, page);
    REQUIRE(first.ok());
    REQUIRE(first->more);
    // Replace an entry already listed and add new ones on both sides.
    REQUIRE(store->Put(entries[0]).ok());
    REQUIRE(store->PutAll({MakeTestEntry(100000, 2048), MakeTestEntry(3, 8192)}).ok());
    page.after = first->entries.back().key;
    std::vector<std::string> got = FlatKeysOf(first->entries);
    while (true) {
      absl::StatusOr<Page> p = store->ListPage({}, page);
      REQUIRE(p.ok());
      for (const std::string& k : FlatKeysOf(p->entries)) got.push_back(k);
      if (!p->more) break;
      page.after = p->entries.back().key;
    }
    std::vector<std::string> unique = got;
    std::sort(unique.begin(), unique.end());
    CHECK(std::adjacent_find(unique.begin(), unique.end()) == unique.end());
    for (const std::string& k : expected) CHECK(std::binary_search(unique.begin(), unique.end(), k));
  }
}

TEST_CASE("Store: counts are kept by the database through puts, replacements and deletes", "[cache][scale]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  auto store = OpenOrFail(path);
  REQUIRE(store->PutAll(ManyEntries(5)).ok());  // 10 rmsnorm.fwd, 10 layernorm.fwd
  v1::Entry other_software = MakeTestEntry(8, 2048);
  other_software.mutable_software()->set_nvrtc_version(12080);
  REQUIRE(store->Put(other_software).ok());
  REQUIRE(store->Put(MakeTestEntry(8, 2048)).ok());  // a replacement: no new entry

  auto counts = store->CountByOp();
  REQUIRE(counts.ok());
  CHECK(*counts == std::map<std::string, int64_t>{{"layernorm.fwd", 10}, {"rmsnorm.fwd", 11}});
  auto groups = store->CountByGroup();
  REQUIRE(groups.ok());
  CHECK(groups->size() == 3);
  // The counts agree with the entries themselves.
  CHECK(RawDb(path).QueryText("SELECT (SELECT sum(n) FROM entry_counts) = (SELECT count(*) FROM entries)") == "1");

  EntryFilter one;
  one.op = "rmsnorm.fwd";
  one.problem_key = KeyOrFail(MakeTestEntry(8, 2048)).problem_key;
  auto deleted = store->Delete(one, /*dry_run=*/false, 10);
  REQUIRE(deleted.ok());
  CHECK(deleted->deleted == 2);  // both software fingerprints
  counts = store->CountByOp();
  REQUIRE(counts.ok());
  CHECK(counts->at("rmsnorm.fwd") == 9);
  CHECK(CountAll(*store) == 19);
}

TEST_CASE("Store: Delete takes a problem or the stale entries, and a dry run changes nothing", "[cache][scale]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  const v1::Entry current = MakeTestEntry(64, 4096);
  v1::Entry stale = MakeTestEntry(128, 4096);
  stale.mutable_software()->set_nvrtc_version(12080);
  v1::Entry other_gpu = stale;
  other_gpu.mutable_device()->set_name("NVIDIA H100");
  REQUIRE(store->PutAll({current, stale, other_gpu}).ok());
  const EntryKey current_key = KeyOrFail(current);

  EntryFilter filter;
  filter.stale = EntryFilter::Stale{{current_key.device_key}, {{"rmsnorm.fwd", current_key.software_key}}};

  auto dry = store->Delete(filter, /*dry_run=*/true, 10);
  REQUIRE(dry.ok());
  CHECK(dry->deleted == 1);
  REQUIRE(dry->listed.size() == 1);
  CHECK(dry->listed[0] == KeyOrFail(stale));
  CHECK(CountAll(*store) == 3);

  // The stale filter lists what it deletes.
  int pages = 0;
  std::vector<StoredEntry> listed = PageThrough(*store, filter, 10, size_t{1} << 20, &pages);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].key == KeyOrFail(stale));

  auto done = store->Delete(filter, /*dry_run=*/false, 10);
  REQUIRE(done.ok());
  CHECK(done->deleted == 1);
  CHECK(CountAll(*store) == 2);
  CHECK(store->Get(KeyOrFail(stale))->has_value() == false);
  CHECK(store->Get(KeyOrFail(other_gpu))->has_value());  // another GPU's entries are not stale here

  // A daemon of two GPU kinds finds the stale entries of both, and of no other.
  v1::Entry third_gpu = other_gpu;
  third_gpu.mutable_device()->set_name("NVIDIA B200");
  REQUIRE(store->PutAll({third_gpu}).ok());
  EntryFilter both = filter;
  both.stale->device_keys.push_back(KeyOrFail(other_gpu).device_key);
  auto two_kinds = store->Delete(both, /*dry_run=*/true, 10);
  REQUIRE(two_kinds.ok());
  REQUIRE(two_kinds->listed.size() == 1);
  CHECK(two_kinds->listed[0] == KeyOrFail(other_gpu));
  EntryFilter no_kind = filter;
  no_kind.stale->device_keys.clear();
  CHECK(store->Delete(no_kind, /*dry_run=*/true, 10)->deleted == 0);
  EntryFilter problem;
  problem.op = "rmsnorm.fwd";
  problem.problem_key = KeyOrFail(third_gpu).problem_key;
  REQUIRE(store->Delete(problem, false, 10).ok());
  CHECK(CountAll(*store) == 1);  // the problem's entries of every GPU went; `current` stays

  // Nothing deletes a whole store by accident.
  CHECK(store->Delete(EntryFilter{}, false, 10).status().code() == absl::StatusCode::kInvalidArgument);
  EntryFilter op_only;
  op_only.op = "rmsnorm.fwd";
  CHECK(store->Delete(op_only, false, 10).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(CountAll(*store) == 1);
}

TEST_CASE("Store: Nearest finds the nearest M of a family by ratio", "[cache][scale]") {
  TempDir dir;
  auto store = OpenOrFail(dir.File("cache.db"));
  REQUIRE(store->PutAll({MakeTestEntry(1024, 4096), MakeTestEntry(4096, 4096), MakeTestEntry(2000, 2048)}).ok());
  const EntryKey key = KeyOrFail(MakeTestEntry(1024, 4096));
  absl::StatusOr<NormProblem> problem = NormProblemFromProto(MakeTestEntry(1, 4096).problem().norm());
  REQUIRE(problem.ok());
  const std::string family = FamilyOf(BuiltinOps(), MakeTestEntry(1, 4096)).value().family_key;
  auto m_of = [&](int64_t m) -> int64_t {
    absl::StatusOr<std::optional<v1::Entry>> e = store->Nearest(family, m);
    REQUIRE(e.ok());
    return e->has_value() ? (*e)->problem().norm().m() : -1;
  };
  CHECK(m_of(1) == 1024);
  CHECK(m_of(2000) == 1024);  // 2000/1024 < 4096/2000
  CHECK(m_of(2100) == 4096);
  CHECK(m_of(2048) == 1024);  // a tie: the smaller
  CHECK(m_of(1 << 20) == 4096);
  CHECK(m_of(4096) == 4096);
  // Another family (N) has its own entries; an unknown one has none.
  CHECK(store->Nearest(family + "x", 1000)->has_value() == false);
}

// An entry's serialization with an unknown field (number 1000, `bytes` long)
// appended, as a newer or hostile writer would send it.
std::string WithUnknownField(const v1::Entry& e, size_t bytes) {
  std::string wire = e.SerializeAsString();
  wire.push_back(static_cast<char>(0xc2));  // field 1000, length-delimited
  wire.push_back(static_cast<char>(0x3e));
  for (uint64_t n = bytes;; n >>= 7) {
    if (n < 0x80) {
      wire.push_back(static_cast<char>(n));
      break;
    }
    wire.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  wire.append(bytes, 'u');
  return wire;
}

TEST_CASE("Store: a version 2 database migrates: families, counts, unknown fields dropped", "[cache][scale]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  const v1::Entry small = MakeTestEntry(1024, 4096);
  const v1::Entry large = MakeTestEntry(8192, 4096);
  {
    auto store = OpenOrFail(path);
    REQUIRE(store->PutAll({small, large}).ok());
  }
  {
    RawDb raw(path);  // what version 2 of the store wrote, an entry with an unknown field
    DowngradeToVersion2(raw);
    sqlite3_stmt* stmt = nullptr;
    REQUIRE(sqlite3_prepare_v2(raw.get(), "UPDATE entries SET entry = ?1 WHERE tuned_at_unix > 0 AND rowid = 1", -1,
                               &stmt, nullptr) == SQLITE_OK);
    const std::string blob = WithUnknownField(small, 100000);
    sqlite3_bind_blob(stmt, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    REQUIRE(sqlite3_step(stmt) == SQLITE_DONE);
    sqlite3_finalize(stmt);
  }
  auto store = OpenOrFail(path);
  CHECK(RawDb(path).QueryText("PRAGMA user_version") == std::to_string(kStoreSchemaVersion));
  CHECK(RawDb(path).QueryText("SELECT max(length(entry)) < 10000 FROM entries") == "1");
  auto got = store->Get(KeyOrFail(small));
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK(Same(**got, small));
  auto counts = store->CountByOp();
  REQUIRE(counts.ok());
  CHECK(counts->at("rmsnorm.fwd") == 2);
  absl::StatusOr<NormProblem> problem = NormProblemFromProto(small.problem().norm());
  REQUIRE(problem.ok());
  const EntryKey key = KeyOrFail(small);
  auto nearest = store->Nearest(FamilyOf(BuiltinOps(), small).value().family_key, 6000);
  REQUIRE(nearest.ok());
  REQUIRE(nearest->has_value());
  CHECK((*nearest)->problem().norm().m() == 8192);
}

TEST_CASE("Store: unknown fields are never stored, and an entry over the size cap is refused", "[cache][scale]") {
  TempDir dir;
  const std::string path = dir.File("cache.db");
  auto store = OpenOrFail(path);
  const v1::Entry clean = MakeTestEntry();
  v1::Entry with_unknown;
  REQUIRE(with_unknown.ParseFromString(WithUnknownField(clean, 1000)));
  REQUIRE(store->Put(with_unknown).ok());
  CHECK(RawDb(path).QueryText("SELECT length(entry) FROM entries") == std::to_string(clean.ByteSizeLong()));

  v1::Entry huge;
  REQUIRE(huge.ParseFromString(WithUnknownField(clean, kMaxEntryBytes)));
  absl::Status s = store->Put(huge);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("entry.size:") && Catch::Contains("rmsnorm.fwd") && Catch::Contains("cap"));
}

}  // namespace
}  // namespace ktune
