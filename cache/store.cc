#include "cache/store.h"

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "tuner/fingerprint.h"

namespace ktune {
namespace {

constexpr int kBusyTimeoutMs = 5000;

// PRAGMA application_id ("ktun"): tells a ktune database from any other SQLite
// file, so a foreign database is refused instead of being migrated into.
constexpr int64_t kApplicationId = 0x6b74756e;

// kMigrations[v] takes the tables from version v to v + 1 (kStoreSchemaVersion
// in store.h). The tables' version is separate from the entries' format
// (kSchemaVersion, part of the software fingerprint): adding a table must not
// make every stored entry stale. Bumping kStoreSchemaVersion without adding a
// step here does not compile.
constexpr const char* kMigrations[] = {
    // 0 -> 1. The key columns are the four parts of EntryKey; the listing
    // columns repeat two fields of the blob so that listing needs no parsing.
    R"sql(
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
    // 1 -> 2. Candidates that faulted or hung, never run again in the same
    // environment (device and software fingerprint).
    R"sql(
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
};
static_assert(std::size(kMigrations) == kStoreSchemaVersion,
              "every schema version needs a migration step in kMigrations");

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
  static absl::StatusOr<Statement> Prepare(sqlite3* db, absl::string_view name,
                                           absl::string_view sql) {
    Statement s;
    s.db_ = db;
    s.name_ = std::string(name);
    absl::Status status = Check(db,
                                sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                                   SQLITE_PREPARE_PERSISTENT, &s.stmt_, nullptr),
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

// What a file on disk says about itself before anything is written to it.
struct Identity {
  int64_t application_id = 0;
  int64_t user_version = 0;
  int64_t schema_objects = 0;  // tables, indexes, views, triggers
};

absl::StatusOr<Identity> ReadIdentity(sqlite3* db) {
  Identity id;
  for (auto [sql, out] :
       {std::pair<absl::string_view, int64_t*>{"PRAGMA application_id", &id.application_id},
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
  bool empty = id.schema_objects == 0 && id.user_version == 0 &&
               (id.application_id == 0 || id.application_id == kApplicationId);
  if (empty) return 0;
  if (id.application_id != kApplicationId || id.user_version <= 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "not a ktune database (an SQLite file with application_id 0x%x, user_version %d and %d "
        "schema objects); refusing to modify it",
        id.application_id, id.user_version, id.schema_objects));
  }
  if (id.user_version > kStoreSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("written by a newer ktune (schema version ",
                                                      id.user_version, "; this ktune knows up to ",
                                                      kStoreSchemaVersion, ")"));
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
  static absl::StatusOr<Transaction> Begin(sqlite3* db, Statement& begin, Statement& commit,
                                           Statement& rollback) {
    auto reset = begin.Use();
    absl::StatusOr<bool> row = begin.Step();
    if (!row.ok()) return row.status();
    return Transaction(db, commit, rollback);
  }
  Transaction(Transaction&& other) noexcept
      : db_(std::exchange(other.db_, nullptr)),
        commit_(other.commit_),
        rollback_(other.rollback_) {}
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
  Transaction(sqlite3* db, Statement& commit, Statement& rollback)
      : db_(db), commit_(commit), rollback_(rollback) {}
  sqlite3* db_;  // null once committed
  Statement& commit_;
  Statement& rollback_;
};

}  // namespace

struct Store::Impl {
  std::string path;
  absl::Mutex mu;
  // Declared before the statements so that it is destroyed after them.
  Database db ABSL_GUARDED_BY(mu);
  Statement begin ABSL_GUARDED_BY(mu);
  Statement commit ABSL_GUARDED_BY(mu);
  Statement rollback ABSL_GUARDED_BY(mu);
  Statement get ABSL_GUARDED_BY(mu);
  Statement upsert ABSL_GUARDED_BY(mu);
  Statement list_all ABSL_GUARDED_BY(mu);
  Statement list_op ABSL_GUARDED_BY(mu);
  Statement count_by_op ABSL_GUARDED_BY(mu);
  Statement quarantine_put ABSL_GUARDED_BY(mu);
  Statement quarantine_list ABSL_GUARDED_BY(mu);

  // Transaction control first: the migration needs it, and the entry
  // statements can only be prepared once the migration made their table.
  absl::Status PrepareTransactionStatements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::Status PrepareEntryStatements() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::StatusOr<Transaction> BeginTransaction() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The stored blob under `key`, if any.
  absl::StatusOr<std::optional<std::string>> GetBlob(const EntryKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Writes one entry inside the caller's transaction and counts it.
  // REQUIRES: ValidateEntry(entry).ok().
  absl::Status PutOne(const v1::Entry& entry, PutAllStats* stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::StatusOr<std::vector<v1::Entry>> ReadEntries(Statement& stmt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
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

}  // namespace

absl::Status Store::Impl::PrepareTransactionStatements() {
  return PrepareAll(db.get(), {{&begin, "begin", "BEGIN IMMEDIATE"},
                               {&commit, "commit", "COMMIT"},
                               {&rollback, "rollback", "ROLLBACK"}});
}

absl::Status Store::Impl::PrepareEntryStatements() {
  return PrepareAll(
      db.get(),
      {
          {&get, "get",
           "SELECT entry FROM entries WHERE op = ?1 AND problem_key = ?2 AND device_key = ?3 AND "
           "software_key = ?4"},
          {&upsert, "upsert",
           "INSERT INTO entries (op, problem_key, device_key, software_key, entry, tuned_at_unix, "
           "time_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
           "ON CONFLICT (op, problem_key, device_key, software_key) DO UPDATE SET "
           "entry = excluded.entry, tuned_at_unix = excluded.tuned_at_unix, "
           "time_us = excluded.time_us"},
          {&list_all, "list_all",
           "SELECT entry FROM entries ORDER BY op, problem_key, device_key, software_key"},
          {&list_op, "list_op",
           "SELECT entry FROM entries WHERE op = ?1 ORDER BY op, problem_key, device_key, "
           "software_key"},
          {&count_by_op, "count_by_op", "SELECT op, count(*) FROM entries GROUP BY op ORDER BY op"},
          {&quarantine_put, "quarantine_put",
           "INSERT OR REPLACE INTO quarantine (device_key, software_key, candidate, reason, detail, "
           "at_unix) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"},
          {&quarantine_list, "quarantine_list",
           "SELECT candidate, reason, detail, at_unix FROM quarantine WHERE device_key = ?1 AND "
           "software_key = ?2 ORDER BY candidate"},
      });
}

absl::StatusOr<std::optional<std::string>> Store::Impl::GetBlob(const EntryKey& key) {
  auto reset = get.Use();
  if (absl::Status s = BindKey(get, key); !s.ok()) return s;
  absl::StatusOr<bool> row = get.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::nullopt;
  return std::string(get.ColumnBytes(0));
}

absl::Status Store::Impl::PutOne(const v1::Entry& entry, PutAllStats* stats) {
  absl::StatusOr<EntryKey> key = KeyOf(entry);
  if (!key.ok()) return key.status();

  std::string blob;
  if (entry.recipe().cubin().empty()) {
    blob = entry.SerializeAsString();
  } else {  // stored entries never carry a cubin
    v1::Entry stripped = entry;
    stripped.mutable_recipe()->clear_cubin();
    blob = stripped.SerializeAsString();
  }

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
  if (absl::Status s = upsert.BindInt64(6, entry.tuned_at_unix()); !s.ok()) return s;
  if (absl::Status s = upsert.BindDouble(7, entry.measurement().time_us()); !s.ok()) return s;
  absl::StatusOr<bool> row = upsert.Step();
  if (!row.ok()) return row.status();
  if (existing->has_value()) {
    ++stats->replaced;
  } else {
    ++stats->added;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Entry>> Store::Impl::ReadEntries(Statement& stmt) {
  std::vector<v1::Entry> entries;
  while (true) {
    absl::StatusOr<bool> row = stmt.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    absl::string_view blob = stmt.ColumnBytes(0);
    v1::Entry& entry = entries.emplace_back();
    if (!entry.ParseFromArray(blob.data(), static_cast<int>(blob.size()))) {
      return absl::DataLossError(
          absl::StrCat(path, ": stored entry ", entries.size() - 1, " does not parse"));
    }
  }
  return entries;
}

absl::StatusOr<Transaction> Store::Impl::BeginTransaction() {
  return Transaction::Begin(db.get(), begin, commit, rollback);
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                          absl::StrCat("create directory ", parent.string(), ": ", ec.message()));
    }
  }

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  absl::MutexLock lock(&impl->mu);
  auto in_path = [&](const absl::Status& s) { return Prefixed(absl::StrCat(path, ": "), s); };

  // NOMUTEX: the connection is only used under Impl::mu.
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  impl->db = Database(raw);  // owns the handle even when the open failed
  if (absl::Status s = Check(raw, rc, "sqlite3_open_v2"); !s.ok()) return in_path(s);
  sqlite3_extended_result_codes(raw, 1);
  // SQLite quietly falls back to read-only when the file is not writable;
  // say so now rather than fail at the first Put.
  if (sqlite3_db_readonly(raw, "main") == 1) {
    return in_path(absl::PermissionDeniedError(
        "opened read-only (no write permission on the file?); the store needs to write"));
  }
  if (absl::Status s =
          Check(raw, sqlite3_busy_timeout(raw, kBusyTimeoutMs), "sqlite3_busy_timeout");
      !s.ok()) {
    return in_path(s);
  }

  // Identify the file before changing anything in it: a foreign or newer
  // database is left exactly as it was.
  absl::StatusOr<Identity> id = ReadIdentity(raw);
  if (!id.ok()) {
    if ((sqlite3_errcode(raw) & 0xff) == SQLITE_NOTADB) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": not a ktune database (not an SQLite file; SQLite says \"",
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
    return in_path(absl::FailedPreconditionError(absl::StrCat(
        "cannot use WAL mode (journal mode is \"", *mode, "\"; is this a network filesystem?)")));
  }
  if (absl::Status s = impl->db.Exec("synchronous", "PRAGMA synchronous=FULL"); !s.ok())
    return in_path(s);

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
        if (absl::Status s =
                impl->db.Exec(absl::StrCat("migration ", v, " -> ", v + 1), kMigrations[v]);
            !s.ok()) {
          return in_path(s);
        }
      }
      // Pragmas take no parameters; both values are integers from this file.
      if (absl::Status s = impl->db.Exec("set schema version",
                                         absl::StrCat("PRAGMA application_id=", kApplicationId,
                                                      "; PRAGMA user_version=", kStoreSchemaVersion));
          !s.ok()) {
        return in_path(s);
      }
    }
    if (absl::Status s = tx->Commit(); !s.ok()) return in_path(s);
  }
  if (absl::Status s = impl->PrepareEntryStatements(); !s.ok()) return in_path(s);
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

const std::string& Store::path() const { return impl_->path; }

absl::StatusOr<std::optional<v1::Entry>> Store::Get(const EntryKey& key) {
  absl::MutexLock lock(&impl_->mu);
  absl::StatusOr<std::optional<std::string>> blob = impl_->GetBlob(key);
  if (!blob.ok()) return blob.status();
  if (!blob->has_value()) return std::nullopt;
  v1::Entry entry;
  if (!entry.ParseFromString(**blob)) {
    return absl::DataLossError(absl::StrCat(impl_->path, ": stored entry for ", key.op, " ",
                                            key.problem_key, " does not parse"));
  }
  return entry;
}

absl::Status Store::Put(const v1::Entry& entry) {
  absl::MutexLock lock(&impl_->mu);
  absl::StatusOr<Transaction> tx = impl_->BeginTransaction();
  if (!tx.ok()) return tx.status();
  // Validated again although callers must have: a bad entry never reaches
  // disk, and the check costs microseconds against a synced commit.
  if (absl::Status s = ValidateEntry(entry); !s.ok()) return s;
  PutAllStats stats;
  if (absl::Status s = impl_->PutOne(entry, &stats); !s.ok()) return s;
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
    if (absl::Status s = ValidateEntry(entries[i], prefix); !s.ok()) return s;
    if (absl::Status s = impl_->PutOne(entries[i], &stats); !s.ok()) return Prefixed(prefix, s);
  }
  if (absl::Status s = tx->Commit(); !s.ok()) return s;
  return stats;
}

absl::StatusOr<std::vector<v1::Entry>> Store::List(const std::string& op) {
  absl::MutexLock lock(&impl_->mu);
  if (op.empty()) {
    auto reset = impl_->list_all.Use();
    return impl_->ReadEntries(impl_->list_all);
  }
  auto reset = impl_->list_op.Use();
  if (absl::Status s = impl_->list_op.BindText(1, op); !s.ok()) return s;
  return impl_->ReadEntries(impl_->list_op);
}

absl::StatusOr<std::map<std::string, int64_t>> Store::CountByOp() {
  absl::MutexLock lock(&impl_->mu);
  Statement& stmt = impl_->count_by_op;
  auto reset = stmt.Use();
  std::map<std::string, int64_t> counts;
  while (true) {
    absl::StatusOr<bool> row = stmt.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    counts[std::string(stmt.ColumnBytes(0))] = stmt.ColumnInt64(1);
  }
  return counts;
}

absl::Status Store::Quarantine(const QuarantineRecord& record) {
  absl::MutexLock lock(&impl_->mu);
  absl::StatusOr<Transaction> tx = impl_->BeginTransaction();
  if (!tx.ok()) return tx.status();
  Statement& stmt = impl_->quarantine_put;
  auto reset = stmt.Use();
  for (auto [i, text] : {std::pair{1, &record.device_key}, std::pair{2, &record.software_key},
                         std::pair{3, &record.candidate}, std::pair{4, &record.reason},
                         std::pair{5, &record.detail}}) {
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
