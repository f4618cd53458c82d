#include "cache/pg_session.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace ktune {
namespace {

// libpq's messages end with a newline and may span lines; kept to one line
// and bounded, as they end up in logs and status.
std::string OneLine(const char* message) {
  std::string text = message == nullptr ? "" : message;
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (text.size() > 500) text.resize(500);
  return std::string(absl::StripAsciiWhitespace(text));
}

// Server notices (NOTICE, WARNING) would go to stderr: they are not errors of
// a statement, and the ones that matter (a shutdown) also break the session.
void IgnoreNotice(void*, const char*) {}

int RemainingMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60000));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgSession>> PgSession::Connect(const std::string& url, const std::string& password,
                                                              absl::Time deadline, absl::Duration statement_timeout) {
  // libpq's own bound too (whole seconds, at least 2), for the steps it
  // takes inside one PQconnectPoll.
  const std::string connect_timeout =
      absl::StrCat(std::max<int64_t>(2, absl::ToInt64Seconds(deadline - absl::Now()) + 1));
  const char* keywords[] = {"dbname", "password", "connect_timeout", "fallback_application_name", nullptr};
  const char* values[] = {url.c_str(), password.empty() ? nullptr : password.c_str(), connect_timeout.c_str(), "ktuned",
                          nullptr};
  pg_conn* conn = PQconnectStartParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError("libpq could not allocate a connection");
  std::unique_ptr<PgSession> session(new PgSession(conn));
  PQsetNoticeProcessor(conn, IgnoreNotice, nullptr);
  if (PQstatus(conn) == CONNECTION_BAD) {
    return absl::UnavailableError(absl::StrCat("connect: ", OneLine(PQerrorMessage(conn))));
  }
  for (PostgresPollingStatusType poll_status = PGRES_POLLING_WRITING;;) {
    if (poll_status == PGRES_POLLING_OK) break;
    if (poll_status == PGRES_POLLING_FAILED) {
      const std::string message = OneLine(PQerrorMessage(conn));
      if (message.find("password authentication failed") != std::string::npos ||
          message.find("no password supplied") != std::string::npos || message.find("SCRAM") != std::string::npos) {
        return absl::PermissionDeniedError(absl::StrCat("connect: ", message));
      }
      return absl::UnavailableError(absl::StrCat("connect: ", message));
    }
    if (!session->WaitFor(poll_status == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline)) {
      return absl::UnavailableError("connect: no answer from the server before the deadline");
    }
    poll_status = PQconnectPoll(conn);
  }
  if (PQsetnonblocking(conn, 1) != 0) {
    return absl::UnavailableError(absl::StrCat("connect: ", OneLine(PQerrorMessage(conn))));
  }
  const std::string set = absl::StrCat("SET statement_timeout = ", absl::ToInt64Milliseconds(statement_timeout));
  if (absl::StatusOr<PgRows> s = session->Exec(set, {}, deadline); !s.ok()) return s.status();
  return session;
}

PgSession::~PgSession() { PQfinish(conn_); }

int PgSession::socket() const { return PQsocket(conn_); }

bool PgSession::WaitFor(short events, absl::Time deadline) {
  pollfd fd{PQsocket(conn_), events, 0};
  if (fd.fd < 0) return false;
  for (;;) {
    const int n = poll(&fd, 1, RemainingMs(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

absl::Status PgSession::Broken(const std::string& what) {
  broken_ = true;
  return absl::UnavailableError(what);
}

absl::StatusOr<PgRows> PgSession::Exec(const std::string& sql, const std::vector<PgParam>& params,
                                       absl::Time deadline) {
  if (broken_) return absl::UnavailableError("the session was lost");
  int sent;
  if (params.empty()) {
    sent = PQsendQuery(conn_, sql.c_str());
  } else {
    std::vector<const char*> values;
    std::vector<int> lengths, formats;
    for (const PgParam& p : params) {
      values.push_back(p.value.data());
      lengths.push_back(static_cast<int>(p.value.size()));
      formats.push_back(p.binary ? 1 : 0);
    }
    sent = PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(params.size()), nullptr, values.data(),
                             lengths.data(), formats.data(), /*resultFormat=*/1);
  }
  if (sent == 0) return Broken(absl::StrCat("send: ", OneLine(PQerrorMessage(conn_))));
  for (;;) {
    const int flushed = PQflush(conn_);
    if (flushed == 0) break;
    if (flushed < 0) return Broken(absl::StrCat("send: ", OneLine(PQerrorMessage(conn_))));
    if (!WaitFor(POLLOUT | POLLIN, deadline)) return Broken("send: the deadline passed");
    if (PQconsumeInput(conn_) == 0) return Broken(absl::StrCat("send: ", OneLine(PQerrorMessage(conn_))));
  }
  PgRows rows;
  absl::Status error;
  for (;;) {
    while (PQisBusy(conn_)) {
      if (!WaitFor(POLLIN, deadline)) return Broken("no answer from the server before the deadline");
      if (PQconsumeInput(conn_) == 0) return Broken(absl::StrCat("receive: ", OneLine(PQerrorMessage(conn_))));
    }
    PGresult* result = PQgetResult(conn_);
    if (result == nullptr) break;
    const ExecStatusType status = PQresultStatus(result);
    if (status == PGRES_TUPLES_OK) {
      rows.clear();
      for (int r = 0; r < PQntuples(result); ++r) {
        auto& row = rows.emplace_back();
        for (int c = 0; c < PQnfields(result); ++c) {
          if (PQgetisnull(result, r, c)) {
            row.emplace_back();
          } else {
            row.emplace_back(std::string(PQgetvalue(result, r, c), PQgetlength(result, r, c)));
          }
        }
      }
    } else if (status != PGRES_COMMAND_OK && error.ok()) {
      const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
      error = absl::InternalError(
          absl::StrCat(OneLine(PQresultErrorMessage(result)), " (SQLSTATE ", state == nullptr ? "?" : state, ")"));
    }
    PQclear(result);
  }
  if (PQstatus(conn_) == CONNECTION_BAD) return Broken(absl::StrCat("the connection failed: ", error.message()));
  if (!error.ok()) return error;
  return rows;
}

absl::StatusOr<std::vector<std::string>> PgSession::TakeNotifications() {
  if (broken_) return absl::UnavailableError("the session was lost");
  if (PQconsumeInput(conn_) == 0 || PQstatus(conn_) == CONNECTION_BAD) {
    return Broken(absl::StrCat("listen: ", OneLine(PQerrorMessage(conn_))));
  }
  std::vector<std::string> payloads;
  const int own = PQbackendPID(conn_);
  while (PGnotify* n = PQnotifies(conn_)) {
    if (n->be_pid != own) payloads.emplace_back(n->extra == nullptr ? "" : n->extra);
    PQfreemem(n);
  }
  return payloads;
}

}  // namespace ktune
