#include "cache/fleet_store.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <openssl/evp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <deque>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cache/pg_session.h"
#include "spdlog/spdlog.h"
#include "tuner/core/input_file.h"

namespace ktune {
namespace {

constexpr size_t kMaxUrlBytes = 4096;
constexpr size_t kMaxPasswordBytes = 1024;
constexpr InputFileKind kPasswordFile{"fleet store password file", uint64_t{64} << 10};
// NOTIFY payloads are shorter than 8000 bytes; a longer key is published
// without one (the other daemons find it on their next miss).
constexpr size_t kMaxNotifyPayload = 7999;
// Serializes migrations of daemons connecting at once (an arbitrary constant:
// "ktfleet" + 1).
constexpr int64_t kMigrationLockId = 0x6b74666c65657401;

// kFleetMigrations[v] takes the tables from version v to v + 1, inside the
// migration's transaction. Never edit one: add a step.
constexpr std::array<const char*, kFleetSchemaVersion> kFleetMigrations = {
    // 0 -> 1: the entries, keyed as the local store keys them.
    "CREATE TABLE ktune_fleet_entries ("
    " op text NOT NULL, problem_key text NOT NULL, device_key text NOT NULL, software_key text NOT NULL,"
    " device_name text NOT NULL, entry bytea NOT NULL, time_us double precision NOT NULL,"
    " publisher text NOT NULL, published_at timestamptz NOT NULL DEFAULT now(),"
    " PRIMARY KEY (op, problem_key, device_key, software_key))",
};
static_assert(kFleetMigrations.size() == kFleetSchemaVersion, "a new fleet schema version needs its migration");

// Keep-faster as one statement: a row is written only if there was none or
// it is slower, so two publishers of one key end with the faster one, never
// a mix; the key is notified (at commit) only when the row changed.
constexpr char kUpsertReturning[] =
    "INSERT INTO ktune_fleet_entries AS t"
    " (op, problem_key, device_key, software_key, device_name, entry, time_us, publisher)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7::float8, $8)"
    " ON CONFLICT (op, problem_key, device_key, software_key) DO UPDATE"
    " SET device_name = excluded.device_name, entry = excluded.entry, time_us = excluded.time_us,"
    " publisher = excluded.publisher, published_at = now()"
    " WHERE excluded.time_us < t.time_us"
    " RETURNING 1";

std::string Sha256Prefix8(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(digest), 8);
}

std::vector<PgParam> KeyParams(const EntryKey& key) {
  return {{key.op}, {key.problem_key}, {key.device_key}, {key.software_key}};
}

// The tables are gone (a server restored from an older backup, a table
// dropped by hand): the session is given up, and the next one migrates again.
bool SchemaLost(const absl::Status& s) { return absl::StrContains(s.message(), "SQLSTATE 42P01"); }

std::optional<EntryKey> ParseKey(const std::string& payload) {
  std::vector<std::string> parts = absl::StrSplit(payload, '\x1f');
  if (parts.size() != 4) return std::nullopt;
  return EntryKey{std::move(parts[0]), std::move(parts[1]), std::move(parts[2]), std::move(parts[3])};
}

}  // namespace

absl::Status CheckFleetUrl(const std::string& url) {
  auto bad = [](absl::string_view why) { return absl::InvalidArgumentError(absl::StrCat("--fleet-store: ", why)); };
  if (url.size() > kMaxUrlBytes) return bad(absl::StrCat("the URL is longer than ", kMaxUrlBytes, " bytes"));
  if (!absl::StartsWith(url, "postgresql://") && !absl::StartsWith(url, "postgres://")) {
    return bad("must be a postgresql:// URL (postgresql://user@host:port/dbname?sslmode=...)");
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    // libpq's message may quote the URL: not echoed.
    if (error != nullptr) PQfreemem(error);
    return bad("libpq cannot parse the URL");
  }
  bool has_password = false;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::string_view(o->keyword) == "password" && o->val != nullptr && *o->val != '\0') has_password = true;
  }
  PQconninfoFree(options);
  if (has_password) {
    return bad(
        "the URL carries a password; a URL ends up in process listings and manifests: put the password in "
        "--fleet-store-password-file PATH instead");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFleetPasswordFile(const std::string& path) {
  absl::StatusOr<std::string> read = ReadInputFile(path, kPasswordFile);
  if (!read.ok()) {
    return absl::Status(read.status().code(), absl::StrCat("--fleet-store-password-file ", read.status().message()));
  }
  std::string password = *std::move(read);
  if (absl::EndsWith(password, "\n")) password.pop_back();
  if (absl::EndsWith(password, "\r")) password.pop_back();
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--fleet-store-password-file ", path, ": ", why));
  };
  if (password.empty()) return bad("the file is empty");
  if (password.size() > kMaxPasswordBytes) return bad(absl::StrCat("more than ", kMaxPasswordBytes, " bytes"));
  for (char c : password) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("the password holds a control character");
  }
  return password;
}

int64_t FleetLockId(const EntryKey& key) {
  const std::string prefix = Sha256Prefix8(FlatKey(key));
  uint64_t id = 0;
  for (char c : prefix) id = (id << 8) | static_cast<unsigned char>(c);
  return static_cast<int64_t>(id);
}

struct FleetStore::Impl {
  struct Pending {
    EntryKey key;
    std::string bytes;
    double time_us = 0;
    std::string device_name;
  };

  FleetStoreOptions options;
  std::string password;  // the worker's alone after Open
  int wake_read = -1, wake_write = -1;

  // A session callers share, one call at a time; the worker (re)connects it.
  struct Shared {
    absl::Mutex mu;
    std::unique_ptr<PgSession> session ABSL_GUARDED_BY(mu);
    bool busy ABSL_GUARDED_BY(mu) = false;
    std::set<int64_t> held ABSL_GUARDED_BY(mu);  // advisory locks of `session`
    // The worker's alone:
    absl::Time next_attempt = absl::InfinitePast();
    absl::Duration backoff;
  };
  // Lookups and counts. Tune locks have a session of their own, so a lookup
  // that misses its deadline (and so drops its session) never drops a lock.
  Shared request;
  Shared locks;

  mutable absl::Mutex mu;
  std::deque<Pending> queue ABSL_GUARDED_BY(mu);
  bool sending ABSL_GUARDED_BY(mu) = false;
  bool stop ABSL_GUARDED_BY(mu) = false;
  bool schema_ready ABSL_GUARDED_BY(mu) = false;
  bool reachable ABSL_GUARDED_BY(mu) = false;
  std::string last_error ABSL_GUARDED_BY(mu) = "not connected yet";
  int64_t published ABSL_GUARDED_BY(mu) = 0;
  int64_t dropped ABSL_GUARDED_BY(mu) = 0;

  std::thread worker;

  ~Impl() {
    if (wake_read >= 0) close(wake_read);
    if (wake_write >= 0) close(wake_write);
  }

  void Wake() {
    const char c = 1;
    (void)!write(wake_write, &c, 1);
  }

  void NoteSuccess() {
    absl::MutexLock lock(&mu);
    if (!reachable) spdlog::info("event=fleet_store_reachable");
    reachable = true;
    last_error.clear();
  }
  void NoteFailure(const absl::Status& s) {
    absl::MutexLock lock(&mu);
    if (reachable || last_error != s.message()) {
      spdlog::warn("event=fleet_store_unreachable error=\"{}\"", std::string(s.message()));
    }
    reachable = false;
    last_error = std::string(s.message());
  }

  absl::Status Migrate(PgSession& s, absl::Time deadline) {
    absl::StatusOr<PgRows> rows = s.Exec(absl::StrCat("BEGIN; SELECT pg_advisory_xact_lock(", kMigrationLockId,
                                                      "); CREATE TABLE IF NOT EXISTS ktune_fleet_schema (version "
                                                      "integer NOT NULL); SELECT coalesce(max(version), -1)::text "
                                                      "FROM ktune_fleet_schema"),
                                         {}, deadline);
    if (!rows.ok()) return rows.status();
    int version = -1;
    if (rows->size() != 1 || !(*rows)[0][0] || !absl::SimpleAtoi(*(*rows)[0][0], &version)) {
      return absl::InternalError("ktune_fleet_schema: unreadable version");
    }
    if (version > kFleetSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat("the fleet store's schema is version ", version,
                                                        ", newer than this ktuned's (", kFleetSchemaVersion,
                                                        "): upgrade ktuned, nothing was changed"));
    }
    if (version < 0) {
      if (auto r = s.Exec("INSERT INTO ktune_fleet_schema VALUES (0)", {}, deadline); !r.ok()) return r.status();
      version = 0;
    }
    for (int v = version; v < kFleetSchemaVersion; ++v) {
      if (auto r = s.Exec(kFleetMigrations[v], {}, deadline); !r.ok()) {
        return absl::Status(r.status().code(),
                            absl::StrCat("fleet schema migration ", v, " -> ", v + 1, ": ", r.status().message()));
      }
      spdlog::info("event=fleet_store_migrated from={} to={}", v, v + 1);
    }
    auto r =
        s.Exec(absl::StrCat("UPDATE ktune_fleet_schema SET version = ", kFleetSchemaVersion, "; COMMIT"), {}, deadline);
    return r.status();
  }

  absl::StatusOr<std::unique_ptr<PgSession>> OpenSession(bool listen) {
    // Read again for every connection: a rotated secret (a Kubernetes Secret
    // updated in place) is used from the next reconnect on; a file that cannot
    // be read now keeps the password read before.
    if (!options.password_file.empty()) {
      absl::StatusOr<std::string> read = ReadFleetPasswordFile(options.password_file);
      if (read.ok()) {
        password = *std::move(read);
      } else {
        spdlog::warn("event=fleet_password_unreadable error=\"{}\" note=\"the previous password stays in use\"",
                     std::string(read.status().message()));
      }
    }
    const absl::Time deadline = absl::Now() + options.connect_timeout;
    absl::StatusOr<std::unique_ptr<PgSession>> s =
        PgSession::Connect(options.url, password, deadline, options.statement_timeout);
    if (!s.ok()) return s.status();
    bool ready;
    {
      absl::MutexLock lock(&mu);
      ready = schema_ready;
    }
    if (!ready) {
      if (absl::Status m = Migrate(**s, deadline + options.statement_timeout); !m.ok()) return m;
      absl::MutexLock lock(&mu);
      schema_ready = true;
    }
    if (listen) {
      if (auto r = (*s)->Exec(absl::StrCat("LISTEN ", kFleetChannel), {}, deadline); !r.ok()) return r.status();
    }
    return s;
  }

  // Runs `fn` on `shared`'s session, waiting for it until `deadline`.
  template <typename T>
  absl::StatusOr<T> With(Shared& shared, absl::Time deadline, const std::function<absl::StatusOr<T>(PgSession&)>& fn) {
    PgSession* session = nullptr;
    {
      auto idle = [&shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared.mu) { return !shared.busy; };
      // Lock, then Await: what the TSan build sees of abseil (tsan_absl_sync.cc).
      shared.mu.Lock();
      shared.mu.AwaitWithTimeout(absl::Condition(&idle), deadline - absl::Now());
      if (shared.busy) {
        shared.mu.Unlock();
        return absl::UnavailableError("fleet store: busy past the deadline");
      }
      if (shared.session == nullptr) {
        shared.mu.Unlock();
        std::string why;
        {
          absl::MutexLock lock(&mu);
          why = last_error;
        }
        return absl::UnavailableError(absl::StrCat("fleet store: not connected (", why, ")"));
      }
      shared.busy = true;
      session = shared.session.get();
      shared.mu.Unlock();
    }
    absl::StatusOr<T> result = fn(*session);
    if (!result.ok() && SchemaLost(result.status())) ForgetSchema(session);
    bool lost = false;
    {
      absl::MutexLock lock(&shared.mu);
      shared.busy = false;
      if (session->broken()) {
        if (!shared.held.empty()) spdlog::warn("event=fleet_locks_lost count={}", shared.held.size());
        shared.held.clear();
        shared.session.reset();
        lost = true;
      }
    }
    if (lost) {
      NoteFailure(result.status());
      Wake();  // the worker reconnects it
    } else if (result.ok() || !absl::IsUnavailable(result.status())) {
      NoteSuccess();
    }
    return result;
  }

  // Connects `shared` again if it lost its session, backing off on failure.
  // True while it has none.
  bool Reconnect(Shared& shared) {
    {
      absl::MutexLock lock(&shared.mu);
      if (shared.session != nullptr || shared.busy) return false;
    }
    if (absl::Now() < shared.next_attempt) return true;
    absl::StatusOr<std::unique_ptr<PgSession>> s = OpenSession(/*listen=*/false);
    if (!s.ok()) {
      NoteFailure(s.status());
      shared.next_attempt = absl::Now() + shared.backoff;
      shared.backoff = std::min(shared.backoff * 2, options.retry_max);
      return true;
    }
    absl::MutexLock lock(&shared.mu);
    shared.session = *std::move(s);
    shared.next_attempt = absl::InfinitePast();
    shared.backoff = options.retry_min;
    return false;
  }

  void ForgetSchema(PgSession* session) {
    spdlog::warn("event=fleet_schema_lost note=\"the tables are gone; migrating again\"");
    session->MarkBroken();
    absl::MutexLock lock(&mu);
    schema_ready = false;
  }

  absl::Status Upsert(PgSession& s, const Pending& p) {
    const std::string payload = FlatKey(p.key);
    std::vector<PgParam> params = KeyParams(p.key);
    params.push_back({p.device_name});
    params.push_back({p.bytes, /*binary=*/true});
    params.push_back({absl::StrFormat("%.17g", p.time_us)});
    params.push_back({options.publisher});
    std::string sql;
    if (payload.size() <= kMaxNotifyPayload) {
      sql = absl::StrCat("WITH up AS (", kUpsertReturning, ") SELECT pg_notify($9, $10)::text FROM up");
      params.push_back({kFleetChannel});
      params.push_back({payload});
    } else {
      sql = absl::StrCat("WITH up AS (", kUpsertReturning, ") SELECT count(*)::text FROM up");
    }
    return s.Exec(sql, params, absl::Now() + options.statement_timeout + absl::Seconds(1)).status();
  }

  void Deliver(const std::vector<std::string>& payloads) {
    for (const std::string& payload : payloads) {
      std::optional<EntryKey> key = ParseKey(payload);
      if (!key) {
        spdlog::warn("event=fleet_notify_ignored note=\"not a key\" bytes={}", payload.size());
        continue;
      }
      if (options.on_published) options.on_published(*key);
    }
  }

  // Sleeps until `timeout` passes or something wakes the worker.
  void Sleep(absl::Duration timeout, int socket = -1) {
    pollfd fds[2] = {{wake_read, POLLIN, 0}, {socket, POLLIN, 0}};
    const int n = poll(fds, socket >= 0 ? 2 : 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      char buf[64];
      while (read(wake_read, buf, sizeof(buf)) > 0) {
      }
    }
  }

  void Run() {
    std::unique_ptr<PgSession> session;  // publishes and LISTEN
    absl::Duration backoff = options.retry_min;
    request.backoff = locks.backoff = options.retry_min;
    for (;;) {
      {
        absl::MutexLock lock(&mu);
        if (stop) return;
      }
      if (session == nullptr) {
        absl::StatusOr<std::unique_ptr<PgSession>> s = OpenSession(/*listen=*/true);
        if (!s.ok()) {
          NoteFailure(s.status());
          Sleep(backoff);
          backoff = std::min(backoff * 2, options.retry_max);
          continue;
        }
        session = *std::move(s);
        backoff = options.retry_min;
      }
      const bool need_request = Reconnect(request);
      const bool need_locks = Reconnect(locks);
      // Reachable only once lookups can run too: a caller told the store is
      // reachable may look up at once (it found "not connected" when this was
      // said on the LISTEN session alone).
      if (!need_request) NoteSuccess();
      std::optional<Pending> next;
      {
        absl::MutexLock lock(&mu);
        if (!queue.empty()) {
          next = queue.front();
          sending = true;
        }
      }
      if (next) {
        absl::Status s = Upsert(*session, *next);
        if (!s.ok() && SchemaLost(s)) ForgetSchema(session.get());
        absl::MutexLock lock(&mu);
        sending = false;
        if (s.ok()) {
          queue.pop_front();
          ++published;
        } else if (!session->broken()) {
          // The server refused this row (not the connection): retrying it
          // would hold up every publish behind it.
          queue.pop_front();
          ++dropped;
          spdlog::error("event=fleet_publish_refused key=\"{}\" error=\"{}\"", next->key.problem_key,
                        std::string(s.message()));
        }
      }
      absl::StatusOr<std::vector<std::string>> notes =
          session->broken() ? absl::UnavailableError("lost") : session->TakeNotifications();
      if (!notes.ok() || session->broken()) {
        NoteFailure(notes.ok() ? absl::UnavailableError("fleet store: the connection was lost") : notes.status());
        session.reset();
        Sleep(backoff);
        backoff = std::min(backoff * 2, options.retry_max);
        continue;
      }
      Deliver(*notes);
      bool more;
      {
        absl::MutexLock lock(&mu);
        more = !queue.empty();
      }
      if (!more) {
        Sleep(need_request || need_locks ? std::min(request.backoff, locks.backoff) : absl::Seconds(1),
              session->socket());
      }
    }
  }
};

FleetStore::FleetStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<FleetStore>> FleetStore::Open(FleetStoreOptions options) {
  if (absl::Status s = CheckFleetUrl(options.url); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  if (!options.password_file.empty()) {
    absl::StatusOr<std::string> password = ReadFleetPasswordFile(options.password_file);
    if (!password.ok()) return password.status();
    impl->password = *std::move(password);
  }
  if (options.max_queued_publishes < 1) return absl::InvalidArgumentError("max_queued_publishes: must be >= 1");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError("pipe2 failed");
  impl->wake_read = fds[0];
  impl->wake_write = fds[1];
  impl->options = std::move(options);
  Impl* raw = impl.get();
  impl->worker = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<FleetStore>(new FleetStore(std::move(impl)));
}

FleetStore::~FleetStore() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stop = true;
    if (!impl_->queue.empty()) {
      spdlog::warn("event=fleet_publishes_lost count={} note=\"the fleet store was not reachable at shutdown\"",
                   impl_->queue.size());
    }
  }
  impl_->Wake();
  impl_->worker.join();
}

absl::StatusOr<std::optional<v1::Entry>> FleetStore::Lookup(const EntryKey& key, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  return impl_->With<std::optional<v1::Entry>>(
      impl_->request, deadline, [&](PgSession& s) -> absl::StatusOr<std::optional<v1::Entry>> {
        std::vector<PgParam> params = KeyParams(key);
        params.push_back({absl::StrCat(kMaxEntryBytes)});
        // The size first: a row past the cap is not sent at all.
        absl::StatusOr<PgRows> rows = s.Exec(
            "SELECT CASE WHEN octet_length(entry) <= $5::int8 THEN entry END, octet_length(entry)::text"
            " FROM ktune_fleet_entries WHERE op = $1 AND problem_key = $2 AND device_key = $3 AND software_key = $4",
            params, deadline);
        if (!rows.ok()) return rows.status();
        if (rows->empty()) return std::nullopt;
        const auto& row = rows->front();
        if (!row[0]) {
          return absl::DataLossError(absl::StrCat("fleet store row of ", key.problem_key, ": ", row[1].value_or("?"),
                                                  " bytes, more than an entry may have (", kMaxEntryBytes, ")"));
        }
        v1::Entry entry;
        if (!entry.ParseFromString(*row[0])) {
          return absl::DataLossError(
              absl::StrCat("fleet store row of ", key.problem_key, ": not a serialized ktune.v1.Entry"));
        }
        return entry;
      });
}

void FleetStore::Publish(const EntryKey& key, const v1::Entry& entry) {
  Impl::Pending p{key, entry.SerializeAsString(), entry.measurement().time_us(), entry.device().name()};
  {
    absl::MutexLock lock(&impl_->mu);
    // Keeps the newest: a later publish of a key is the one worth sending.
    while (impl_->queue.size() >= impl_->options.max_queued_publishes) {
      spdlog::warn("event=fleet_publish_dropped key=\"{}\" note=\"the publish queue is full\"",
                   impl_->queue.front().key.problem_key);
      impl_->queue.pop_front();
      ++impl_->dropped;
    }
    impl_->queue.push_back(std::move(p));
  }
  impl_->Wake();
}

absl::StatusOr<FleetLock> FleetStore::TryLock(const EntryKey& key, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int64_t id = FleetLockId(key);
  Impl::Shared& locks = impl_->locks;
  return impl_->With<FleetLock>(locks, deadline, [&](PgSession& s) -> absl::StatusOr<FleetLock> {
    {
      absl::MutexLock lock(&locks.mu);
      if (locks.held.count(id) > 0) return FleetLock::kAcquired;  // this session holds it already
    }
    absl::StatusOr<PgRows> rows = s.Exec("SELECT pg_try_advisory_lock($1::int8)::text", {{absl::StrCat(id)}}, deadline);
    if (!rows.ok()) return rows.status();
    if (rows->size() != 1 || !rows->front()[0]) return absl::InternalError("pg_try_advisory_lock: no answer");
    if (*rows->front()[0] != "true") return FleetLock::kHeldElsewhere;
    absl::MutexLock lock(&locks.mu);
    locks.held.insert(id);
    return FleetLock::kAcquired;
  });
}

void FleetStore::Unlock(const EntryKey& key) {
  const int64_t id = FleetLockId(key);
  const absl::Time deadline = absl::Now() + impl_->options.statement_timeout;
  Impl::Shared& locks = impl_->locks;
  absl::StatusOr<bool> done = impl_->With<bool>(locks, deadline, [&](PgSession& s) -> absl::StatusOr<bool> {
    {
      absl::MutexLock lock(&locks.mu);
      if (locks.held.erase(id) == 0) return false;
    }
    absl::StatusOr<PgRows> rows = s.Exec("SELECT pg_advisory_unlock($1::int8)::text", {{absl::StrCat(id)}}, deadline);
    if (!rows.ok()) return rows.status();
    return true;
  });
  // A lock that could not be released is released with its session, which
  // is then dropped (an unlock that timed out broke it).
  if (!done.ok()) spdlog::warn("event=fleet_unlock_failed error=\"{}\"", std::string(done.status().message()));
}

FleetStatus FleetStore::status() const {
  absl::MutexLock lock(&impl_->mu);
  FleetStatus s;
  s.reachable = impl_->reachable;
  s.last_error = impl_->last_error;
  s.queued_publishes = impl_->queue.size();
  s.published = impl_->published;
  s.dropped = impl_->dropped;
  return s;
}

absl::StatusOr<std::vector<FleetCount>> FleetStore::Counts(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  return impl_->With<std::vector<FleetCount>>(
      impl_->request, deadline, [&](PgSession& s) -> absl::StatusOr<std::vector<FleetCount>> {
        absl::StatusOr<PgRows> rows = s.Exec(
            "SELECT device_name, publisher, count(*)::text FROM ktune_fleet_entries GROUP BY 1, 2 ORDER BY 1, 2 "
            "LIMIT $1::int8",
            {{"1000"}}, deadline);
        if (!rows.ok()) return rows.status();
        std::vector<FleetCount> counts;
        for (const auto& row : *rows) {
          FleetCount& c = counts.emplace_back();
          c.device_name = row[0].value_or("");
          c.publisher = row[1].value_or("");
          (void)absl::SimpleAtoi(row[2].value_or("0"), &c.entries);
        }
        return counts;
      });
}

bool FleetStore::WaitForPublished(absl::Duration timeout) {
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl_->mu) { return impl_->queue.empty() && !impl_->sending; };
  absl::MutexLock lock(&impl_->mu);
  return impl_->mu.AwaitWithTimeout(absl::Condition(&drained), timeout);
}

}  // namespace ktune
