// One libpq connection (a PostgreSQL session) whose every call is bounded in
// time: the connect (PQconnectStartParams and PQconnectPoll, polled against a
// deadline, with connect_timeout in the conninfo too), and each statement
// (sent non-blocking, its result awaited with poll() against a deadline, and
// statement_timeout set on the session so the server gives up as well). A
// statement that misses its deadline, or a connection that fails, leaves the
// session broken (`broken()`): its owner drops it and connects again later;
// nothing here retries or sleeps. The fleet store's private piece
// (cache/fleet_store.h); only it includes this header.
// Not thread-safe: one owner at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct pg_conn;

namespace ktune {

// A statement parameter: text, or raw bytes (bytea) sent in binary.
struct PgParam {
  std::string value;
  bool binary = false;
};

// A result's rows, every column as its binary form (text columns: their
// bytes; cast numbers to text in the SQL). nullopt for NULL.
using PgRows = std::vector<std::vector<std::optional<std::string>>>;

class PgSession {
 public:
  // Connects to `url` (a postgresql:// URL; its sslmode and other options pass
  // through to libpq) with `password` ("" = none) before `deadline`, then
  // sets statement_timeout to `statement_timeout`. UNAVAILABLE with libpq's
  // message (never the password) when the server cannot be reached or the
  // deadline passes; PERMISSION_DENIED when authentication fails.
  static absl::StatusOr<std::unique_ptr<PgSession>> Connect(const std::string& url, const std::string& password,
                                                            absl::Time deadline, absl::Duration statement_timeout);
  ~PgSession();
  PgSession(const PgSession&) = delete;
  PgSession& operator=(const PgSession&) = delete;

  // Runs one statement (with params: the extended protocol; without: the
  // simple one, which may hold several statements; the last result is
  // returned). UNAVAILABLE (the session is then broken) if the connection
  // fails or `deadline` passes; INTERNAL with the server's message (and
  // SQLSTATE) for an error of the statement itself, the session still usable.
  absl::StatusOr<PgRows> Exec(const std::string& sql, const std::vector<PgParam>& params, absl::Time deadline);

  // Reads what the server sent without waiting and returns the payloads of
  // the notifications received so far (LISTEN) from other sessions: this
  // session's own NOTIFYs are left out. UNAVAILABLE (broken) when the
  // connection is gone.
  absl::StatusOr<std::vector<std::string>> TakeNotifications();

  // The socket, for poll() (readable: a notification or a closed connection).
  int socket() const;
  bool broken() const { return broken_; }
  // Gives the session up (its owner drops it and connects again).
  void MarkBroken() { broken_ = true; }

 private:
  explicit PgSession(pg_conn* conn) : conn_(conn) {}
  // poll()s the socket for `events` until `deadline`: false on timeout.
  bool WaitFor(short events, absl::Time deadline);
  absl::Status Broken(const std::string& what);

  pg_conn* conn_;
  bool broken_ = false;
};

}  // namespace ktune
