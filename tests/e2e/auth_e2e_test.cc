// Who may call what: TCP callers need the token, imports need the admin token
// (or the Unix socket when the daemon has none), bad token files are refused.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "cache/bundle.h"
#include "tests/cache/test_entries.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

constexpr char kToken[] = "use-token-0123456789abcdef";
constexpr char kAdminToken[] = "admin-token-0123456789abcdef";

std::string WriteToken(const TempDir& dir, const std::string& name, const std::string& token) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << token << "\n";
  return path;
}

// A client that sends `token` (through $KTUNE_TOKEN, read at creation).
std::unique_ptr<Client> ClientWith(const std::string& address, const char* token) {
  if (token != nullptr) {
    setenv("KTUNE_TOKEN", token, 1);
  } else {
    unsetenv("KTUNE_TOKEN");
  }
  auto client = Client::Create(address, 10);
  unsetenv("KTUNE_TOKEN");
  return client;
}

std::string Bundle() { return EncodeBundle({testutil::MakeTestEntry()}, "test", 1795000000); }

TEST_CASE("TCP callers need the token and imports the admin token", "[e2e][auth]") {
  TempDir dir;
  const std::string tcp = "127.0.0.1:" + std::to_string(30000 + getpid() % 20000);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--listen", tcp, "--token-file", WriteToken(dir, "token", kToken), "--admin-token-file",
                        WriteToken(dir, "admin", kAdminToken)}));

  auto anonymous = ClientWith(tcp, nullptr)->GetStatus();
  REQUIRE_FALSE(anonymous.ok());
  CHECK(anonymous.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(anonymous.status().message().find("token") != std::string::npos);
  CHECK(ClientWith(tcp, "wrong-token-0123456789")->GetStatus().status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(ClientWith(tcp, kToken)->GetStatus().ok());
  CHECK(ClientWith(daemon.address(), nullptr)->GetStatus().ok());  // the Unix socket

  // Imports: the admin token, from any transport.
  auto as_user = ClientWith(tcp, kToken)->ImportBundle(Bundle());
  CHECK(as_user.status().code() == absl::StatusCode::kPermissionDenied);
  auto local_user = ClientWith(daemon.address(), nullptr)->ImportBundle(Bundle());
  CHECK(local_user.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(ClientWith(daemon.address(), nullptr)->GetStatus()->entries() == 0);
  auto as_admin = ClientWith(tcp, kAdminToken)->ImportBundle(Bundle());
  REQUIRE(as_admin.ok());
  CHECK(as_admin->added() == 1);

  // The CLI sends a token from a file.
  const std::string cli = std::string(KTUNE_CLI_PATH) + " --server " + tcp + " ";
  CHECK(RunCommand(cli + "status", dir.path()).exit_code != 0);
  CHECK(RunCommand(cli + "--token-file " + dir.path() + "/token status", dir.path()).exit_code == 0);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("without an admin token, imports come over the Unix socket only", "[e2e][auth]") {
  TempDir dir;
  const std::string tcp = "127.0.0.1:" + std::to_string(30000 + (getpid() + 7) % 20000);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--listen", tcp}));
  CHECK(ClientWith(tcp, nullptr)->GetStatus().ok());  // loopback, no token configured
  auto over_tcp = ClientWith(tcp, nullptr)->ImportBundle(Bundle());
  CHECK(over_tcp.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(over_tcp.status().message().find("Unix socket") != std::string::npos);
  CHECK(ClientWith(daemon.address(), nullptr)->ImportBundle(Bundle()).ok());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("SIGHUP re-reads the token files and the daemon keeps serving", "[e2e][auth]") {
  TempDir dir;
  constexpr char kNewToken[] = "rotated-token-0123456789abcdef";
  const std::string tcp = "127.0.0.1:" + std::to_string(testing::FreeTcpPort());
  const std::string token_file = WriteToken(dir, "token", kToken);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--listen", tcp, "--token-file", token_file}));
  REQUIRE(ClientWith(tcp, kToken)->GetStatus().ok());

  // Rotated: the old token is refused and the new one taken, once the
  // daemon has logged the reload (signals are asynchronous).
  WriteToken(dir, "token", kNewToken);
  REQUIRE(kill(daemon.pid(), SIGHUP) == 0);
  auto reloads = [&] {
    const std::string log = daemon.Log();
    size_t n = 0;
    for (size_t at = log.find("event=tokens_reloaded"); at != std::string::npos;
         at = log.find("event=tokens_reloaded", at + 1)) {
      ++n;
    }
    return n;
  };
  for (int i = 0; i < 100 && reloads() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(reloads() == 1);
  CHECK(ClientWith(tcp, kToken)->GetStatus().status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(ClientWith(tcp, kNewToken)->GetStatus().ok());

  // A token file that is bad at reload keeps the tokens in force.
  WriteToken(dir, "token", "short");
  REQUIRE(kill(daemon.pid(), SIGHUP) == 0);
  for (int i = 0; i < 100 && daemon.Log().find("event=tokens_reload_failed") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(daemon.Log().find("event=tokens_reload_failed") != std::string::npos);
  CHECK(ClientWith(tcp, kNewToken)->GetStatus().ok());
  CHECK(ClientWith(daemon.address(), nullptr)->GetStatus().ok());
  CHECK(daemon.Stop() == 0);
  CHECK_FALSE(std::filesystem::exists(daemon.socket_path()));
}

TEST_CASE("ktuned refuses weak or unreadable token files", "[e2e][auth]") {
  TempDir dir;
  const std::string ktuned = testing::KtunedPath();
  auto weak = RunCommand(ktuned + " --listen unix:" + dir.path() + "/s --db " + dir.path() + "/x.db --token-file " +
                             WriteToken(dir, "weak", "short"),
                         dir.path());
  CHECK(weak.exit_code == 2);
  CHECK(weak.err.find("at least 16 characters") != std::string::npos);
  auto missing = RunCommand(ktuned + " --admin-token-file " + dir.path() + "/none", dir.path());
  CHECK(missing.exit_code != 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/x.db"));
}

}  // namespace
}  // namespace ktune
