#include "cache/store.h"

#include <sqlite3.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iterator>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "cache/recipe_check.h"
#include "tuner/core/fingerprint.h"

namespace ktune {
namespace {

constexpr int kBusyTimeoutMs = 5000;

// PRAGMA application_id ("ktun"): tells a ktune database from any other SQLite
// file, so a foreign database is refused instead of being migrated into.
constexpr int64_t kApplicationId = 0x6b74756e;

absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {  // the primary code of an extended one
    case SQLITE_NOTADB:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kInternal;
  }
}

// The one check helper: every SQLite call's result goes through it, so each
// error names the call that failed and carries SQLite's own message.
absl::Status Check(sqlite3* db, int rc, absl::string_view call) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return absl::OkStatus();
  const char* message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return absl::Status(CodeFor(rc), absl::StrCat(call, ": ", message, " (sqlite code ", rc, ")"));
}

// Owns one connection.
class Database {
 public:
  Database() = default;
  explicit Database(sqlite3* db) : db_(db) {}
  Database(Database&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}
  Database& operator=(Database&& other) noexcept {
    std::swap(db_, other.db_);
    return *this;
  }
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  // close_v2 defers the close until every statement is finalized, so the
  // order in which owners are destroyed cannot leak the connection.
  ~Database() { sqlite3_close_v2(db_); }

  sqlite3* get() const { return db_; }

  // For statements without results or parameters (DDL, pragmas that set);
  // `name` identifies them in error messages.
  absl::Status Exec(absl::string_view name, const std::string& sql) {
    return Check(db_, sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr),
                 absl::StrCat("sqlite3_exec(", name, ")"));
  }

 private:
  sqlite3* db_ = nullptr;
};

// Owns one prepared statement. Prepared once, then bound, stepped and reset
// for each use; Use() returns a guard that resets and clears it on scope
// exit, so a statement never keeps a read transaction open or leaks a binding
// into the next call.
class Statement {
 public:
  Statement() = default;
  Statement(Statement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)), name_(std::move(other.name_)) {}
  Statement& operator=(Statement&& other) noexcept {
    std::swap(db_, other.db_);
    std::swap(stmt_, other.stmt_);
    std::swap(name_, other.name_);
    return *this;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  // `name` identifies the statement in error messages.
  static absl::StatusOr<Statement> Prepare(sqlite3* db, absl::string_view name, absl::string_view sql) {
    Statement s;
    s.db_ = db;
    s.name_ = std::string(name);
    absl::Status status = Check(
        db,
        sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &s.stmt_, nullptr),
        absl::StrCat("sqlite3_prepare(", name, ")"));
    if (!status.ok()) return status;
    return s;
  }

  class ResetGuard {
   public:
    explicit ResetGuard(Statement& s) : s_(s) {}
    ~ResetGuard() {
      sqlite3_reset(s_.stmt_);
      sqlite3_clear_bindings(s_.stmt_);
    }
    ResetGuard(const ResetGuard&) = delete;
    ResetGuard& operator=(const ResetGuard&) = delete;

   private:
    Statement& s_;
  };
  [[nodiscard]] ResetGuard Use() { return ResetGuard(*this); }

  // Parameters are 1-based, as in SQL.
  absl::Status BindText(int i, absl::string_view v) {
    return Bound(sqlite3_bind_text64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  absl::Status BindBlob(int i, absl::string_view v) {
    return Bound(sqlite3_bind_blob64(stmt_, i, v.data(), v.size(), SQLITE_TRANSIENT));
  }
  absl::Status BindInt64(int i, int64_t v) { return Bound(sqlite3_bind_int64(stmt_, i, v)); }
  absl::Status BindDouble(int i, double v) { return Bound(sqlite3_bind_double(stmt_, i, v)); }

  // True while there is a row to read, false once done.
  absl::StatusOr<bool> Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (absl::Status s = Check(db_, rc, absl::StrCat("sqlite3_step(", name_, ")")); !s.ok()) {
      return s;
    }
    return false;
  }

  // Columns are 0-based. Views are valid until the next Step or reset.
  absl::string_view ColumnBytes(int i) {
    const void* data = sqlite3_column_blob(stmt_, i);  // TEXT comes back as its bytes
    int size = sqlite3_column_bytes(stmt_, i);
    return data ? absl::string_view(static_cast<const char*>(data), size) : absl::string_view();
  }
  int64_t ColumnInt64(int i) { return sqlite3_column_int64(stmt_, i); }

 private:
  absl::Status Bound(int rc) { return Check(db_, rc, absl::StrCat("sqlite3_bind(", name_, ")")); }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string name_;
};

// Runs a one-off query (a pragma, a count) and reads its single row.
template <typename T, typename Read>
absl::StatusOr<T> QueryOne(sqlite3* db, absl::string_view sql, Read read) {
  absl::StatusOr<Statement> stmt = Statement::Prepare(db, sql, sql);
  if (!stmt.ok()) return stmt.status();
  auto reset = stmt->Use();
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat(sql, ": returned no row"));
  return read(*stmt);
}

absl::StatusOr<int64_t> QueryInt(sqlite3* db, absl::string_view sql) {
  return QueryOne<int64_t>(db, sql, [](Statement& s) { return s.ColumnInt64(0); });
}

absl::StatusOr<std::string> QueryText(sqlite3* db, absl::string_view sql) {
  return QueryOne<std::string>(db, sql, [](Statement& s) { return std::string(s.ColumnBytes(0)); });
}

// Migration 2 -> 3 fills the columns it adds from each stored entry (SQL
// cannot decode one), in batches by rowid so that no statement reads a table
// it writes. Stored entries lose any unknown fields on the way: an entry once
// imported with 50 MB of them would otherwise weigh on every listing.
absl::Status BackfillFamilies(const OpRegistry& ops, sqlite3* db) {
  absl::StatusOr<Statement> read = Statement::Prepare(
      db, "backfill read", "SELECT rowid, entry FROM entries WHERE rowid > ?1 ORDER BY rowid LIMIT 1000");
  if (!read.ok()) return read.status();
  absl::StatusOr<Statement> write = Statement::Prepare(
      db, "backfill write", "UPDATE entries SET family_key = ?1, m = ?2, entry = ?3 WHERE rowid = ?4");
  if (!write.ok()) return write.status();
  int64_t after = 0;
  while (true) {
    std::vector<std::pair<int64_t, std::string>> batch;
    {
      auto reset = read->Use();
      if (absl::Status s = read->BindInt64(1, after); !s.ok()) return s;
      while (true) {
        absl::StatusOr<bool> row = read->Step();
        if (!row.ok()) return row.status();
        if (!*row) break;
        batch.emplace_back(read->ColumnInt64(0), std::string(read->ColumnBytes(1)));
      }
    }
    if (batch.empty()) return absl::OkStatus();
    after = batch.back().first;
    for (auto& [rowid, blob] : batch) {
      v1::Entry entry;
      // An entry that no longer decodes keeps no family: it is listed and
      // can be deleted, but never found as a nearest M.
      if (!entry.ParseFromString(blob)) continue;
      entry.DiscardUnknownFields();
      absl::StatusOr<ProblemFamily> family = FamilyOf(ops, entry);
      if (!family.ok()) continue;
      auto reset = write->Use();
      if (absl::Status s = write->BindText(1, family->family_key); !s.ok()) return s;
      if (absl::Status s = write->BindInt64(2, family->position); !s.ok()) return s;
      if (absl::Status s = write->BindBlob(3, entry.SerializeAsString()); !s.ok()) return s;
      if (absl::Status s = write->BindInt64(4, rowid); !s.ok()) return s;
      if (absl::StatusOr<bool> row = write->Step(); !row.ok()) return row.status();
    }
  }
}

// kMigrations[v] takes the tables from version v to v + 1 (kStoreSchemaVersion
// in store.h): its SQL, then its backfill (if any) in the same transaction.
// The tables' version is separate from the entries' format (kSchemaVersion,
// part of the software fingerprint): adding a table must not make every
// stored entry stale. Bumping kStoreSchemaVersion without adding a step here
// does not compile.
struct Migration {
  const char* sql;
  absl::Status (*backfill)(const OpRegistry& ops, sqlite3* db);
};
constexpr Migration kMigrations[] = {
    // 0 -> 1. The key columns are the four parts of EntryKey; the listing
    // columns repeat two fields of the blob so that listing needs no parsing.
    {R"sql(
      CREATE TABLE entries (
        op            TEXT    NOT NULL,
        problem_key   TEXT    NOT NULL,
        device_key    TEXT    NOT NULL,
        software_key  TEXT    NOT NULL,
        entry         BLOB    NOT NULL CHECK (length(entry) > 0),
        tuned_at_unix INTEGER NOT NULL,
        time_us       REAL    NOT NULL CHECK (time_us > 0),
        PRIMARY KEY (op, problem_key, device_key, software_key)
      );
    )sql",
     nullptr},
    // 1 -> 2. Candidates that faulted or hung, never run again in the same
    // environment (device and software fingerprint).
    {R"sql(
      CREATE TABLE quarantine (
        device_key    TEXT    NOT NULL,
        software_key  TEXT    NOT NULL,
        candidate     TEXT    NOT NULL,
        reason        TEXT    NOT NULL,
        detail        TEXT    NOT NULL,
        at_unix       INTEGER NOT NULL,
        PRIMARY KEY (device_key, software_key, candidate)
      );
    )sql",
     nullptr},
    // 2 -> 3. Scale: nothing is read into memory at start any more, so the
    // nearest M is found by an index on (family, m), and the counts that
    // status reports are kept per (op, device, software) by triggers in the
    // writing transaction itself, so they can never drift from the entries.
    {R"sql(
      ALTER TABLE entries ADD COLUMN family_key TEXT NOT NULL DEFAULT '';
      ALTER TABLE entries ADD COLUMN m INTEGER NOT NULL DEFAULT 0;
      CREATE INDEX entries_family ON entries (family_key, m);
      CREATE TABLE entry_counts (
        op            TEXT    NOT NULL,
        device_key    TEXT    NOT NULL,
        software_key  TEXT    NOT NULL,
        n             INTEGER NOT NULL CHECK (n >= 0),
        PRIMARY KEY (op, device_key, software_key)
      ) WITHOUT ROWID;
      INSERT INTO entry_counts (op, device_key, software_key, n)
        SELECT op, device_key, software_key, count(*) FROM entries GROUP BY op, device_key, software_key;
      CREATE TRIGGER entries_count_insert AFTER INSERT ON entries BEGIN
        INSERT INTO entry_counts (op, device_key, software_key, n)
          VALUES (new.op, new.device_key, new.software_key, 1)
          ON CONFLICT (op, device_key, software_key) DO UPDATE SET n = n + 1;
      END;
      CREATE TRIGGER entries_count_delete AFTER DELETE ON entries BEGIN
        UPDATE entry_counts SET n = n - 1
          WHERE op = old.op AND device_key = old.device_key AND software_key = old.software_key;
        DELETE FROM entry_counts
          WHERE op = old.op AND device_key = old.device_key AND software_key = old.software_key AND n = 0;
      END;
      CREATE TRIGGER entries_count_rekey AFTER UPDATE OF op, device_key, software_key ON entries BEGIN
        UPDATE entry_counts SET n = n - 1
          WHERE op = old.op AND device_key = old.device_key AND software_key = old.software_key;
        DELETE FROM entry_counts
          WHERE op = old.op AND device_key = old.device_key AND software_key = old.software_key AND n = 0;
        INSERT INTO entry_counts (op, device_key, software_key, n)
          VALUES (new.op, new.device_key, new.software_key, 1)
          ON CONFLICT (op, device_key, software_key) DO UPDATE SET n = n + 1;
      END;
    )sql",
     BackfillFamilies},
};
static_assert(std::size(kMigrations) == kStoreSchemaVersion,
              "every schema version needs a migration step in kMigrations");

// What a file on disk says about itself before anything is written to it.
struct Identity {
  int64_t application_id = 0;
  int64_t user_version = 0;
  int64_t schema_objects = 0;  // tables, indexes, views, triggers
};

absl::StatusOr<Identity> ReadIdentity(sqlite3* db) {
  Identity id;
  for (auto [sql, out] : {std::pair<absl::string_view, int64_t*>{"PRAGMA application_id", &id.application_id},
                          {"PRAGMA user_version", &id.user_version},
                          {"SELECT count(*) FROM sqlite_schema", &id.schema_objects}}) {
    absl::StatusOr<int64_t> v = QueryInt(db, sql);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  return id;
}

// OK with the version to migrate from, or why this file must not be touched.
absl::StatusOr<int64_t> VersionToMigrateFrom(const Identity& id) {
  bool empty =
      id.schema_objects == 0 && id.user_version == 0 && (id.application_id == 0 || id.application_id == kApplicationId);
  if (empty) return 0;
  if (id.application_id != kApplicationId || id.user_version <= 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("not a ktune database (an SQLite file with application_id 0x%x, user_version %d and %d "
                        "schema objects); refusing to modify it",
                        id.application_id, id.user_version, id.schema_objects));
  }
  if (id.user_version > kStoreSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("written by a newer ktune (schema version ", id.user_version,
                                                      "; this ktune knows up to ", kStoreSchemaVersion, ")"));
  }
  return id.user_version;
}

absl::Status BindKey(Statement& stmt, const EntryKey& key) {
  for (auto [i, part] : {std::pair<int, const std::string*>{1, &key.op},
                         {2, &key.problem_key},
                         {3, &key.device_key},
                         {4, &key.software_key}}) {
    if (absl::Status s = stmt.BindText(i, *part); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// BEGIN IMMEDIATE takes the write lock up front, so a writer waits (up to the
// busy timeout) at the start rather than failing half way on a lock upgrade.
// Destroyed without Commit(), it rolls back.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(sqlite3* db, Statement& begin, Statement& commit, Statement& rollback) {
    auto reset = begin.Use();
    absl::StatusOr<bool> row = begin.Step();
    if (!row.ok()) return row.status();
    return Transaction(db, commit, rollback);
  }
  Transaction(Transaction&& other) noexcept
      : db_(std::exchange(other.db_, nullptr)), commit_(other.commit_), rollback_(other.rollback_) {}
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  ~Transaction() {
    // SQLite rolls back by itself after some errors (a full disk, for one);
    // only a transaction still open needs the statement.
    if (db_ == nullptr || sqlite3_get_autocommit(db_)) return;
    auto reset = rollback_.Use();
    (void)rollback_.Step();  // a failed rollback leaves nothing better to do
  }

  absl::Status Commit() {
    auto reset = commit_.Use();
    absl::StatusOr<bool> row = commit_.Step();
    if (!row.ok()) return row.status();
    db_ = nullptr;
    return absl::OkStatus();
  }

 private:
  Transaction(sqlite3* db, Statement& commit, Statement& rollback) : db_(db), commit_(commit), rollback_(rollback) {}
  sqlite3* db_;  // null once committed
  Statement& commit_;
  Statement& rollback_;
};

}  // namespace

namespace {

// One read connection and the statements prepared on it. WAL lets readers
// run beside the writer; each statement reads one committed snapshot.
struct Reader {
  absl::Mutex mu;
  Database db ABSL_GUARDED_BY(mu);
  Statement get ABSL_GUARDED_BY(mu);
  Statement nearest_up ABSL_GUARDED_BY(mu);
  Statement nearest_down ABSL_GUARDED_BY(mu);
  Statement count_groups ABSL_GUARDED_BY(mu);
};

// Read connections: enough that lookups from many gRPC threads rarely wait
// for one another, few enough that each keeps a useful page cache.
constexpr int kReaders = 4;

// A text or integer to bind, in order, to a statement built at run time.
using SqlValue = std::variant<std::string, int64_t>;

struct SqlWhere {
  std::string sql;  // " WHERE ..." or ""
  std::vector<SqlValue> values;

  void And(absl::string_view clause, std::vector<SqlValue> vs) {
    absl::StrAppend(&sql, sql.empty() ? " WHERE " : " AND ", clause);
    for (SqlValue& v : vs) values.push_back(std::move(v));
  }
};

// The filter as SQL over the key columns, which the primary key's index
// holds, so a filter is evaluated without reading an entry's blob.
SqlWhere WhereOf(const EntryFilter& filter, const std::optional<EntryKey>& after) {
  SqlWhere w;
  if (!filter.op.empty()) w.And("op = ?", {filter.op});
  if (!filter.problem_key.empty()) w.And("problem_key = ?", {filter.problem_key});
  if (filter.since_unix > 0) w.And("tuned_at_unix >= ?", {filter.since_unix});
  if (filter.stale.has_value()) {
    std::vector<SqlValue> vs;
    std::string devices = "0";  // no device: nothing is stale
    for (const std::string& device_key : filter.stale->device_keys) {
      absl::StrAppend(&devices, " OR device_key = ?");
      vs.push_back(device_key);
    }
    std::string any = "0";  // no op with a current fingerprint: nothing is stale
    for (const auto& [op, software_key] : filter.stale->current_software) {
      absl::StrAppend(&any, " OR (op = ? AND software_key <> ?)");
      vs.push_back(op);
      vs.push_back(software_key);
    }
    w.And(absl::StrCat("(", devices, ") AND (", any, ")"), std::move(vs));
  }
  // The cursor as a range the primary key's index can seek to. With an op
  // fixed, SQLite takes the index for `op = ?` alone and filters a 4-column
  // row value row by row (each page would rescan the op from its start), so
  // the op's part of the cursor is decided here and the rest is a 3-column range.
  if (after.has_value() && filter.op.empty()) {
    w.And("(op, problem_key, device_key, software_key) > (?, ?, ?, ?)",
          {after->op, after->problem_key, after->device_key, after->software_key});
  } else if (after.has_value() && after->op == filter.op) {
    w.And("(problem_key, device_key, software_key) > (?, ?, ?)",
          {after->problem_key, after->device_key, after->software_key});
  } else if (after.has_value() && after->op > filter.op) {
    w.And("0", {});  // the cursor is past every entry of the op
  }
  return w;
}

absl::Status BindAll(Statement& stmt, const std::vector<SqlValue>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    const int index = static_cast<int>(i) + 1;
    absl::Status s = std::holds_alternative<std::string>(values[i])
                         ? stmt.BindText(index, std::get<std::string>(values[i]))
                         : stmt.BindInt64(index, std::get<int64_t>(values[i]));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

EntryKey KeyColumns(Statement& stmt, int first) {
  return EntryKey{std::string(stmt.ColumnBytes(first)), std::string(stmt.ColumnBytes(first + 1)),
                  std::string(stmt.ColumnBytes(first + 2)), std::string(stmt.ColumnBytes(first + 3))};
}

constexpr absl::string_view kKeyOrder = " ORDER BY op, problem_key, device_key, software_key";

}  // namespace

struct Store::Impl {
  explicit Impl(const OpRegistry& op_registry) : ops(op_registry) {}
  const OpRegistry& ops;  // keys, families and validation of entries
  std::string path;
  absl::Mutex mu;
  // Declared before the statements so that it is destroyed after them.
  Database db ABSL_GUARDED_BY(mu);
  Statement begin ABSL_GUARDED_BY(mu);
  Statement commit ABSL_GUARDED_BY(mu);
  Statement rollback ABSL_GUARDED_BY(mu);
  Statement get ABSL_GUARDED_BY(mu);
  Statement upsert ABSL_GUARDED_BY(mu);
  Statement quarantine_put ABSL_GUARDED_BY(mu);
  Statement quarantine_list ABSL_GUARDED_BY(mu);
  std::array<Reader, kReaders> readers;

  // Transaction control first: the migration needs it, and the entry
  // statements can only be prepared once the migration made their table.
  absl::Status PrepareTransactionStatements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status PrepareEntryStatements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status OpenReaders();
  absl::StatusOr<Transaction> BeginTransaction() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The stored blob under `key`, if any.
  absl::StatusOr<std::optional<std::string>> GetBlob(const EntryKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Writes one entry inside the caller's transaction and counts it.
  // Validates the entry as it is stored (StoredRecipe: a recipe put with
  // its build products is stored, and checked, without them) and writes it;
  // errors after `prefix` ("": ValidateEntry's own "entry.", and none).
  absl::Status PutOne(const v1::Entry& entry, const std::string& prefix, PutAllStats* stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // PutOne's write of the validated, stored form.
  absl::Status WriteStored(const v1::Entry& stored, PutAllStats* stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A free read connection, else one picked by the calling thread, locked.
  Reader& AcquireReader() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  absl::StatusOr<v1::Entry> Decode(absl::string_view blob, const EntryKey& key) const;
};

namespace {

struct StatementSpec {
  Statement* stmt;
  absl::string_view name;
  absl::string_view sql;
};

absl::Status PrepareAll(sqlite3* db, absl::Span<const StatementSpec> specs) {
  for (const StatementSpec& spec : specs) {
    absl::StatusOr<Statement> stmt = Statement::Prepare(db, spec.name, spec.sql);
    if (!stmt.ok()) return stmt.status();
    *spec.stmt = *std::move(stmt);
  }
  return absl::OkStatus();
}

// Releases a reader taken by AcquireReader.
class ReaderLease {
 public:
  explicit ReaderLease(Reader& r) : r_(r) {}
  ~ReaderLease() ABSL_NO_THREAD_SAFETY_ANALYSIS { r_.mu.Unlock(); }
  ReaderLease(const ReaderLease&) = delete;
  ReaderLease& operator=(const ReaderLease&) = delete;
  Reader* operator->() { return &r_; }
  Reader& operator*() { return r_; }

 private:
  Reader& r_;
};

constexpr absl::string_view kGetSql =
    "SELECT entry FROM entries WHERE op = ?1 AND problem_key = ?2 AND device_key = ?3 AND "
    "software_key = ?4";

}  // namespace

absl::Status Store::Impl::PrepareTransactionStatements() {
  return PrepareAll(
      db.get(),
      {{&begin, "begin", "BEGIN IMMEDIATE"}, {&commit, "commit", "COMMIT"}, {&rollback, "rollback", "ROLLBACK"}});
}

absl::Status Store::Impl::PrepareEntryStatements() {
  return PrepareAll(db.get(),
                    {
                        {&get, "get", kGetSql},
                        {&upsert, "upsert",
                         "INSERT INTO entries (op, problem_key, device_key, software_key, entry, tuned_at_unix, "
                         "time_us, family_key, m) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
                         "ON CONFLICT (op, problem_key, device_key, software_key) DO UPDATE SET "
                         "entry = excluded.entry, tuned_at_unix = excluded.tuned_at_unix, "
                         "time_us = excluded.time_us, family_key = excluded.family_key, m = excluded.m"},
                        {&quarantine_put, "quarantine_put",
                         "INSERT OR REPLACE INTO quarantine (device_key, software_key, candidate, reason, detail, "
                         "at_unix) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
                        {&quarantine_list, "quarantine_list",
                         "SELECT candidate, reason, detail, at_unix FROM quarantine WHERE device_key = ?1 AND "
                         "software_key = ?2 ORDER BY candidate"},
                    });
}

absl::Status Store::Impl::OpenReaders() {
  for (int i = 0; i < kReaders; ++i) {
    Reader& r = readers[i];
    absl::MutexLock lock(&r.mu);
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    r.db = Database(raw);
    const std::string name = absl::StrCat("reader ", i);
    if (absl::Status s = Check(raw, rc, absl::StrCat("sqlite3_open_v2(", name, ")")); !s.ok()) return s;
    sqlite3_extended_result_codes(raw, 1);
    if (absl::Status s = Check(raw, sqlite3_busy_timeout(raw, kBusyTimeoutMs), "sqlite3_busy_timeout"); !s.ok()) {
      return s;
    }
    // A reader never writes; say so to SQLite too.
    if (absl::Status s = r.db.Exec("query_only", "PRAGMA query_only=1"); !s.ok()) return s;
    absl::Status s = PrepareAll(raw, {{&r.get, "get", kGetSql},
                                      {&r.nearest_up, "nearest_up",
                                       "SELECT entry, m, op, problem_key, device_key, software_key FROM entries "
                                       "WHERE family_key = ?1 AND m >= ?2 ORDER BY m ASC LIMIT 1"},
                                      {&r.nearest_down, "nearest_down",
                                       "SELECT entry, m, op, problem_key, device_key, software_key FROM entries "
                                       "WHERE family_key = ?1 AND m < ?2 ORDER BY m DESC LIMIT 1"},
                                      {&r.count_groups, "count_groups",
                                       "SELECT op, device_key, software_key, n FROM entry_counts "
                                       "ORDER BY op, device_key, software_key"}});
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

Reader& Store::Impl::AcquireReader() {
  for (Reader& r : readers) {
    if (r.mu.TryLock()) return r;
  }
  // All busy: wait on one chosen by the thread, so waiters spread out.
  Reader& r = readers[std::hash<std::thread::id>()(std::this_thread::get_id()) % kReaders];
  r.mu.Lock();
  return r;
}

absl::StatusOr<v1::Entry> Store::Impl::Decode(absl::string_view blob, const EntryKey& key) const {
  v1::Entry entry;
  if (!entry.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
    return absl::DataLossError(
        absl::StrCat(path, ": stored entry for ", key.op, " ", key.problem_key, " does not parse"));
  }
  // Written before unknown fields were dropped on import: they stay out of
  // every answer, listing and bundle.
  entry.DiscardUnknownFields();
  return entry;
}

absl::StatusOr<std::optional<std::string>> Store::Impl::GetBlob(const EntryKey& key) {
  auto reset = get.Use();
  if (absl::Status s = BindKey(get, key); !s.ok()) return s;
  absl::StatusOr<bool> row = get.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  return std::string(get.ColumnBytes(0));
}

absl::Status Store::Impl::PutOne(const v1::Entry& entry, const std::string& prefix, PutAllStats* stats) {
  // Stored entries never carry build products (StoredRecipe: the cubin,
  // lowered names, the interface), nor fields this build does not know
  // (validated callers have dropped them already; this is the last gate).
  v1::Entry stored = entry;
  *stored.mutable_recipe() = StoredRecipe(entry.recipe());
  // Validated again although callers must have: a bad entry never reaches
  // disk, and the check costs microseconds against a synced commit.
  if (absl::Status s = prefix.empty() ? ValidateEntry(ops, stored) : ValidateEntry(ops, stored, prefix); !s.ok()) {
    return s;
  }
  stored.DiscardUnknownFields();
  return Prefixed(prefix, WriteStored(stored, stats));
}

absl::Status Store::Impl::WriteStored(const v1::Entry& stored, PutAllStats* stats) {
  absl::StatusOr<EntryKey> key = KeyOf(ops, stored);
  if (!key.ok()) return key.status();
  absl::StatusOr<ProblemFamily> family = FamilyOf(ops, stored);
  if (!family.ok()) return family.status();
  const std::string blob = stored.SerializeAsString();

  // Entry has no map fields, so equal messages serialize to equal bytes in
  // one build; an encoding difference from another build only turns an
  // "unchanged" into a harmless "replaced".
  absl::StatusOr<std::optional<std::string>> existing = GetBlob(*key);
  if (!existing.ok()) return existing.status();
  if (existing->has_value() && **existing == blob) {
    ++stats->unchanged;
    return absl::OkStatus();
  }

  auto reset = upsert.Use();
  if (absl::Status s = BindKey(upsert, *key); !s.ok()) return s;
  if (absl::Status s = upsert.BindBlob(5, blob); !s.ok()) return s;
  if (absl::Status s = upsert.BindInt64(6, stored.tuned_at_unix()); !s.ok()) return s;
  if (absl::Status s = upsert.BindDouble(7, stored.measurement().time_us()); !s.ok()) return s;
  if (absl::Status s = upsert.BindText(8, family->family_key); !s.ok()) return s;
  if (absl::Status s = upsert.BindInt64(9, family->position); !s.ok()) return s;
  absl::StatusOr<bool> row = upsert.Step();
  if (!row.ok()) return row.status();
  if (existing->has_value()) {
    ++stats->replaced;
  } else {
    ++stats->added;
  }
  return absl::OkStatus();
}

absl::StatusOr<Transaction> Store::Impl::BeginTransaction() {
  return Transaction::Begin(db.get(), begin, commit, rollback);
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const OpRegistry& ops, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                          absl::StrCat("create directory ", parent.string(), ": ", ec.message()));
    }
  }

  auto impl = std::make_unique<Impl>(ops);
  impl->path = path;
  absl::MutexLock lock(&impl->mu);
  auto in_path = [&](const absl::Status& s) { return Prefixed(absl::StrCat(path, ": "), s); };

  // NOMUTEX: the connection is only used under Impl::mu.
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  impl->db = Database(raw);  // owns the handle even when the open failed
  if (absl::Status s = Check(raw, rc, "sqlite3_open_v2"); !s.ok()) return in_path(s);
  sqlite3_extended_result_codes(raw, 1);
  // SQLite quietly falls back to read-only when the file is not writable;
  // say so now rather than fail at the first Put.
  if (sqlite3_db_readonly(raw, "main") == 1) {
    return in_path(
        absl::PermissionDeniedError("opened read-only (no write permission on the file?); the store needs to write"));
  }
  if (absl::Status s = Check(raw, sqlite3_busy_timeout(raw, kBusyTimeoutMs), "sqlite3_busy_timeout"); !s.ok()) {
    return in_path(s);
  }

  // Identify the file before changing anything in it: a foreign or newer
  // database is left exactly as it was.
  absl::StatusOr<Identity> id = ReadIdentity(raw);
  if (!id.ok()) {
    if ((sqlite3_errcode(raw) & 0xff) == SQLITE_NOTADB) {
      return absl::FailedPreconditionError(absl::StrCat(path,
                                                        ": not a ktune database (not an SQLite file; SQLite says \"",
                                                        sqlite3_errmsg(raw), "\"); refusing to modify it"));
    }
    return in_path(id.status());
  }
  if (absl::StatusOr<int64_t> from = VersionToMigrateFrom(*id); !from.ok()) {
    return in_path(from.status());
  }

  // WAL: readers do not block the writer and a crash mid-commit loses nothing
  // committed. synchronous=FULL also syncs the WAL at each commit, so an
  // acknowledged entry survives a power cut, not only a process crash.
  absl::StatusOr<std::string> mode = QueryText(raw, "PRAGMA journal_mode=WAL");
  if (!mode.ok()) return in_path(mode.status());
  if (*mode != "wal") {
    return in_path(absl::FailedPreconditionError(
        absl::StrCat("cannot use WAL mode (journal mode is \"", *mode, "\"; is this a network filesystem?)")));
  }
  if (absl::Status s = impl->db.Exec("synchronous", "PRAGMA synchronous=FULL"); !s.ok()) return in_path(s);

  if (absl::Status s = impl->PrepareTransactionStatements(); !s.ok()) return in_path(s);

  // Another process may be opening the same new file: identify it again
  // under the write lock, and migrate only from what is found there.
  {
    absl::StatusOr<Transaction> tx = impl->BeginTransaction();
    if (!tx.ok()) return in_path(tx.status());
    id = ReadIdentity(raw);
    if (!id.ok()) return in_path(id.status());
    absl::StatusOr<int64_t> from = VersionToMigrateFrom(*id);
    if (!from.ok()) return in_path(from.status());
    if (*from < kStoreSchemaVersion) {
      for (int64_t v = *from; v < kStoreSchemaVersion; ++v) {
        const std::string name = absl::StrCat("migration ", v, " -> ", v + 1);
        if (absl::Status s = impl->db.Exec(name, kMigrations[v].sql); !s.ok()) return in_path(s);
        if (kMigrations[v].backfill != nullptr) {
          if (absl::Status s = kMigrations[v].backfill(ops, raw); !s.ok()) {
            return in_path(Prefixed(absl::StrCat(name, ": "), s));
          }
        }
      }
      // Pragmas take no parameters; both values are integers from this file.
      if (absl::Status s = impl->db.Exec(
              "set schema version",
              absl::StrCat("PRAGMA application_id=", kApplicationId, "; PRAGMA user_version=", kStoreSchemaVersion));
          !s.ok()) {
        return in_path(s);
      }
    }
    if (absl::Status s = tx->Commit(); !s.ok()) return in_path(s);
  }
  if (absl::Status s = impl->PrepareEntryStatements(); !s.ok()) return in_path(s);
  if (absl::Status s = impl->OpenReaders(); !s.ok()) return in_path(s);
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::path() const { return impl_->path; }

const OpRegistry& Store::ops() const { return impl_->ops; }

absl::StatusOr<std::optional<v1::Entry>> Store::Get(const EntryKey& key) {
  ReaderLease lease(impl_->AcquireReader());
  Reader* r = &*lease;
  r->mu.AssertHeld();  // AcquireReader locked it: tells the thread-safety analysis
  auto reset = r->get.Use();
  if (absl::Status s = BindKey(r->get, key); !s.ok()) return s;
  absl::StatusOr<bool> row = r->get.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  absl::StatusOr<v1::Entry> entry = impl_->Decode(r->get.ColumnBytes(0), key);
  if (!entry.ok()) return entry.status();
  return *std::move(entry);
}

absl::Status Store::Put(const v1::Entry& entry) {
  absl::MutexLock lock(&impl_->mu);
  absl::StatusOr<Transaction> tx = impl_->BeginTransaction();
  if (!tx.ok()) return tx.status();
  PutAllStats stats;
  if (absl::Status s = impl_->PutOne(entry, "", &stats); !s.ok()) return s;
  return tx->Commit();
}

absl::StatusOr<PutAllStats> Store::PutAll(const std::vector<v1::Entry>& entries) {
  absl::MutexLock lock(&impl_->mu);
  absl::StatusOr<Transaction> tx = impl_->BeginTransaction();
  if (!tx.ok()) return tx.status();
  PutAllStats stats;
  for (size_t i = 0; i < entries.size(); ++i) {
    // Returning without Commit() rolls back everything written so far.
    const std::string prefix = absl::StrCat("entry ", i, ": ");
    if (absl::Status s = impl_->PutOne(entries[i], prefix, &stats); !s.ok()) return s;
  }
  if (absl::Status s = tx->Commit(); !s.ok()) return s;
  return stats;
}

absl::StatusOr<std::vector<v1::Entry>> Store::List(const std::string& op) {
  EntryFilter filter;
  filter.op = op;
  PageRequest page;
  std::vector<v1::Entry> all;
  while (true) {
    absl::StatusOr<Page> p = ListPage(filter, page);
    if (!p.ok()) return p.status();
    for (StoredEntry& e : p->entries) all.push_back(std::move(e.entry));
    if (!p->more) return all;
    page.after = p->entries.back().key;
  }
}

absl::StatusOr<Page> Store::ListPage(const EntryFilter& filter, const PageRequest& page) {
  if (page.limit < 1) {
    return absl::InvalidArgumentError(absl::StrCat("page limit must be >= 1, got ", page.limit));
  }
  SqlWhere where = WhereOf(filter, page.after);
  // One row past the limit tells whether there are more.
  where.values.push_back(int64_t{page.limit} + 1);
  const std::string sql = absl::StrCat("SELECT op, problem_key, device_key, software_key, entry FROM entries",
                                       where.sql, kKeyOrder, " LIMIT ?");
  ReaderLease lease(impl_->AcquireReader());
  Reader* r = &*lease;
  r->mu.AssertHeld();  // AcquireReader locked it: tells the thread-safety analysis
  absl::StatusOr<Statement> stmt = Statement::Prepare(r->db.get(), "list_page", sql);
  if (!stmt.ok()) return stmt.status();
  auto reset = stmt->Use();
  if (absl::Status s = BindAll(*stmt, where.values); !s.ok()) return s;
  Page out;
  size_t bytes = 0;
  while (true) {
    absl::StatusOr<bool> row = stmt->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    if (static_cast<int>(out.entries.size()) == page.limit || (!out.entries.empty() && bytes >= page.max_bytes)) {
      out.more = true;
      break;
    }
    EntryKey key = KeyColumns(*stmt, 0);
    const absl::string_view blob = stmt->ColumnBytes(4);
    absl::StatusOr<v1::Entry> entry = impl_->Decode(blob, key);
    if (!entry.ok()) return entry.status();
    bytes += blob.size();
    out.entries.push_back({std::move(key), *std::move(entry)});
  }
  return out;
}

absl::StatusOr<std::optional<v1::Entry>> Store::Nearest(const std::string& family_key, int64_t m) {
  ReaderLease lease(impl_->AcquireReader());
  Reader* r = &*lease;
  r->mu.AssertHeld();  // AcquireReader locked it: tells the thread-safety analysis
  struct Found {
    int64_t m;
    v1::Entry entry;
  };
  auto read = [&](Statement& stmt) -> absl::StatusOr<std::optional<Found>> {
    auto reset = stmt.Use();
    if (absl::Status s = stmt.BindText(1, family_key); !s.ok()) return s;
    if (absl::Status s = stmt.BindInt64(2, m); !s.ok()) return s;
    absl::StatusOr<bool> row = stmt.Step();
    if (!row.ok()) return row.status();
    if (!*row) return std::nullopt;
    absl::StatusOr<v1::Entry> entry = impl_->Decode(stmt.ColumnBytes(0), KeyColumns(stmt, 2));
    if (!entry.ok()) return entry.status();
    return Found{stmt.ColumnInt64(1), *std::move(entry)};
  };
  absl::StatusOr<std::optional<Found>> above = read(r->nearest_up);
  if (!above.ok()) return above.status();
  absl::StatusOr<std::optional<Found>> below = read(r->nearest_down);
  if (!below.ok()) return below.status();
  if (!above->has_value() && !below->has_value()) return std::nullopt;
  if (!above->has_value()) return std::move((*below)->entry);
  if (!below->has_value()) return std::move((*above)->entry);
  // The closer by ratio wins, the smaller on a tie.
  const double wanted = static_cast<double>(m);
  if (std::log(wanted / (*below)->m) <= std::log((*above)->m / wanted)) return std::move((*below)->entry);
  return std::move((*above)->entry);
}

absl::StatusOr<std::vector<EntryGroupCount>> Store::CountByGroup() {
  ReaderLease lease(impl_->AcquireReader());
  Reader* r = &*lease;
  r->mu.AssertHeld();  // AcquireReader locked it: tells the thread-safety analysis
  Statement& stmt = r->count_groups;
  auto reset = stmt.Use();
  std::vector<EntryGroupCount> out;
  while (true) {
    absl::StatusOr<bool> row = stmt.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back({std::string(stmt.ColumnBytes(0)), std::string(stmt.ColumnBytes(1)), std::string(stmt.ColumnBytes(2)),
                   stmt.ColumnInt64(3)});
  }
  return out;
}

absl::StatusOr<std::map<std::string, int64_t>> Store::CountByOp() {
  absl::StatusOr<std::vector<EntryGroupCount>> groups = CountByGroup();
  if (!groups.ok()) return groups.status();
  std::map<std::string, int64_t> counts;
  for (const EntryGroupCount& g : *groups) counts[g.op] += g.entries;
  return counts;
}

absl::StatusOr<DeleteResult> Store::Delete(const EntryFilter& filter, bool dry_run, size_t max_listed) {
  if (filter.problem_key.empty() && !filter.stale.has_value()) {
    return absl::InvalidArgumentError("a deletion needs a problem or the stale condition");
  }
  if (!filter.problem_key.empty() && filter.op.empty()) {
    return absl::InvalidArgumentError("a deletion by problem needs its op");
  }
  const SqlWhere where = WhereOf(filter, std::nullopt);
  absl::MutexLock lock(&impl_->mu);
  sqlite3* db = impl_->db.get();
  absl::StatusOr<Transaction> tx = impl_->BeginTransaction();
  if (!tx.ok()) return tx.status();
  DeleteResult result;
  {
    absl::StatusOr<Statement> list = Statement::Prepare(
        db, "delete_list",
        absl::StrCat("SELECT op, problem_key, device_key, software_key FROM entries", where.sql, kKeyOrder));
    if (!list.ok()) return list.status();
    auto reset = list->Use();
    if (absl::Status s = BindAll(*list, where.values); !s.ok()) return s;
    while (true) {
      absl::StatusOr<bool> row = list->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      if (result.listed.size() < max_listed) result.listed.push_back(KeyColumns(*list, 0));
      ++result.deleted;
    }
  }
  if (dry_run || result.deleted == 0) return result;  // the transaction rolls back
  absl::StatusOr<Statement> del = Statement::Prepare(db, "delete", absl::StrCat("DELETE FROM entries", where.sql));
  if (!del.ok()) return del.status();
  {
    auto reset = del->Use();
    if (absl::Status s = BindAll(*del, where.values); !s.ok()) return s;
    if (absl::StatusOr<bool> row = del->Step(); !row.ok()) return row.status();
  }
  if (absl::Status s = tx->Commit(); !s.ok()) return s;
  return result;
}

absl::Status Store::Quarantine(const QuarantineRecord& record) {
  absl::MutexLock lock(&impl_->mu);
  absl::StatusOr<Transaction> tx = impl_->BeginTransaction();
  if (!tx.ok()) return tx.status();
  Statement& stmt = impl_->quarantine_put;
  auto reset = stmt.Use();
  for (auto [i, text] : {std::pair{1, &record.device_key}, std::pair{2, &record.software_key},
                         std::pair{3, &record.candidate}, std::pair{4, &record.reason}, std::pair{5, &record.detail}}) {
    if (absl::Status s = stmt.BindText(i, *text); !s.ok()) return s;
  }
  if (absl::Status s = stmt.BindInt64(6, record.at_unix); !s.ok()) return s;
  absl::StatusOr<bool> row = stmt.Step();
  if (!row.ok()) return row.status();
  return tx->Commit();
}

absl::StatusOr<std::vector<QuarantineRecord>> Store::Quarantined(const std::string& device_key,
                                                                 const std::string& software_key) {
  absl::MutexLock lock(&impl_->mu);
  Statement& stmt = impl_->quarantine_list;
  auto reset = stmt.Use();
  if (absl::Status s = stmt.BindText(1, device_key); !s.ok()) return s;
  if (absl::Status s = stmt.BindText(2, software_key); !s.ok()) return s;
  std::vector<QuarantineRecord> out;
  while (true) {
    absl::StatusOr<bool> row = stmt.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    QuarantineRecord r;
    r.device_key = device_key;
    r.software_key = software_key;
    r.candidate = std::string(stmt.ColumnBytes(0));
    r.reason = std::string(stmt.ColumnBytes(1));
    r.detail = std::string(stmt.ColumnBytes(2));
    r.at_unix = stmt.ColumnInt64(3);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ktune
