// A real PostgreSQL server for the fleet store's tests: Debian's postgresql
// package (initdb, pg_ctl under /usr/lib/postgresql/N/bin), a cluster in a
// temporary directory, a Unix socket in it (no TCP port to collide with a
// parallel test's), SCRAM passwords.
// initdb refuses root, so as root the cluster belongs to `nobody` and every
// server command runs through runuser. One cluster is made per test process
// and copied for each server (initdb costs a second or two; a copy does not).
// The server runs with fsync off: tests kill and restart it, never the machine
// (a commit is in the kernel's page cache once acknowledged).
// Missing binaries fail the test, naming the package: never a skip.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ktune::testing {

class PgServer {
 public:
  static constexpr char kUser[] = "ktune";
  static constexpr char kPassword[] = "fleet-test-secret";
  // The socket's name (.s.PGSQL.5432) in a directory of this server's own:
  // no TCP port to collide with a parallel test's.
  static constexpr int kPort = 5432;

  PgServer() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ktune-pg-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    // nobody must reach the cluster inside it.
    chmod(dir_.c_str(), 0755);
    password_file_ = dir_ + "/client-password";
    std::ofstream(password_file_) << kPassword << "\n";
    chmod(password_file_.c_str(), 0600);
  }
  ~PgServer() {
    Stop(/*immediate=*/true);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;

  // The directory of initdb and pg_ctl, or "" when the package is missing.
  static std::string BinDir() {
    std::string best;
    std::error_code ec;
    for (const auto& d : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      const std::string bin = d.path().string() + "/bin";
      if (std::filesystem::exists(bin + "/initdb") && std::filesystem::exists(bin + "/pg_ctl") && bin > best) {
        best = bin;
      }
    }
    return best;
  }

  // Before the first Start: also listen on 127.0.0.1:`port` (TCP), with TLS
  // from `cert` and `key` (PEM files) when given.
  void ListenTcp(int port, const std::string& cert = "", const std::string& key = "") {
    tcp_port_ = port;
    tls_cert_ = cert;
    tls_key_ = key;
  }

  // Makes the cluster (on the first call) and starts the server; once
  // started, a later Start after Stop restarts it on the same port and data.
  absl::Status Start() {
    if (BinDir().empty()) {
      return absl::FailedPreconditionError(
          "the PostgreSQL server binaries (initdb, pg_ctl under /usr/lib/postgresql/N/bin) are missing: install "
          "Debian's `postgresql` package (deploy/setup.sh test installs it)");
    }
    if (!started_once_) {
      absl::StatusOr<std::string> cluster = TemplateCluster();
      if (!cluster.ok()) return cluster.status();
      const std::string copy = absl::StrCat("cp -a ", *cluster, " ", data_dir(), " && mkdir -p ", dir_, "/sock");
      if (Shell(copy) != 0) return absl::InternalError("copying the template cluster failed");
      // The server's copies of its TLS files: its own, the key private to it.
      if (!tls_cert_.empty() && Shell(absl::StrCat("cp ", tls_cert_, " ", dir_, "/server.crt && cp ", tls_key_, " ",
                                                   dir_, "/server.key && chmod 600 ", dir_, "/server.key")) != 0) {
        return absl::InternalError("copying the TLS files failed");
      }
      if (getuid() == 0 && Shell(absl::StrCat("chown -R nobody ", dir_)) != 0) {
        return absl::InternalError("chown of the cluster failed");
      }
      started_once_ = true;
    }
    std::string options = absl::StrCat(
        "-p ", tcp_port_ > 0 ? tcp_port_ : kPort, " -c listen_addresses=", tcp_port_ > 0 ? "127.0.0.1" : "",
        " -c unix_socket_directories=", dir_, "/sock -c fsync=off -c full_page_writes=off -c max_connections=40");
    if (!tls_cert_.empty()) {
      absl::StrAppend(&options, " -c ssl=on -c ssl_cert_file=", dir_, "/server.crt -c ssl_key_file=", dir_,
                      "/server.key");
    }
    const std::string cmd = absl::StrCat(AsServerUser(), BinDir(), "/pg_ctl -D ", data_dir(), " -l ", dir_,
                                         "/server.log -w -t 30 -o '", options, "' start >>", dir_, "/ctl.log 2>&1");
    if (Shell(cmd) != 0)
      return absl::InternalError(
          absl::StrCat("pg_ctl start failed: ", ReadFile("/ctl.log"), " ", ReadFile("/server.log")));
    running_ = true;
    return absl::OkStatus();
  }

  // Stops the server: immediate = as a crash would (no checkpoint).
  void Stop(bool immediate = false) {
    if (!running_) return;
    Shell(absl::StrCat(AsServerUser(), BinDir(), "/pg_ctl -D ", data_dir(), " -w -t 30 -m ",
                       immediate ? "immediate" : "fast", " stop >>", dir_, "/ctl.log 2>&1"));
    running_ = false;
  }

  // The URL a daemon names (no password: that is in password_file()).
  std::string url() const {
    return absl::StrCat("postgresql://", kUser, "@/postgres?host=", dir_,
                        "/sock&port=", tcp_port_ > 0 ? tcp_port_ : kPort);
  }
  const std::string& password_file() const { return password_file_; }
  const std::string& dir() const { return dir_; }

  // Runs SQL through psql as the test user; its exit code.
  int Psql(const std::string& sql) const {
    const std::string sql_path = dir_ + "/statement.sql";
    std::ofstream(sql_path) << sql;
    return Shell(absl::StrCat("PGPASSWORD=", kPassword, " ", BinDir(), "/psql -X -q -v ON_ERROR_STOP=1 '", url(),
                              "' -f ", sql_path, " >>", dir_, "/psql.log 2>&1"));
  }

 private:
  std::string data_dir() const { return dir_ + "/data"; }

  static int Shell(const std::string& cmd) {
    const int raw = std::system(cmd.c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  }
  static std::string AsServerUser() { return getuid() == 0 ? "runuser -u nobody -- " : ""; }

  std::string ReadFile(const std::string& name) const {
    std::ifstream in(dir_ + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str().substr(0, 4000);
  }

  static std::string& TemplateRoot() {
    static std::string root;
    return root;
  }

  // One initdb per process, kept for the process's life (removed at exit).
  static absl::StatusOr<std::string> TemplateCluster() {
    static const absl::StatusOr<std::string> cluster = []() -> absl::StatusOr<std::string> {
      std::string pattern = (std::filesystem::temp_directory_path() / "ktune-pgtemplate-XXXXXX").string();
      const std::string dir = mkdtemp(pattern.data());
      chmod(dir.c_str(), 0755);
      TemplateRoot() = dir;
      std::atexit([] {
        std::error_code ec;
        std::filesystem::remove_all(TemplateRoot(), ec);
      });
      const std::string pwfile = dir + "/pw";
      std::ofstream(pwfile) << kPassword << "\n";
      chmod(pwfile.c_str(), 0644);
      if (getuid() == 0 && Shell(absl::StrCat("chown nobody ", dir)) != 0) {
        return absl::InternalError("chown of the template directory failed");
      }
      const std::string cmd = absl::StrCat(AsServerUser(), BinDir(), "/initdb -N -A scram-sha-256 -U ", kUser,
                                           " --pwfile=", pwfile, " -D ", dir, "/data >", dir, "/initdb.log 2>&1");
      if (Shell(cmd) != 0) {
        std::ifstream in(dir + "/initdb.log");
        std::stringstream ss;
        ss << in.rdbuf();
        return absl::InternalError(absl::StrCat("initdb failed: ", ss.str().substr(0, 4000)));
      }
      return dir + "/data";
    }();
    return cluster;
  }

  std::string dir_;
  std::string password_file_;
  bool started_once_ = false;
  int tcp_port_ = 0;
  std::string tls_cert_, tls_key_;
  bool running_ = false;
};

}  // namespace ktune::testing
