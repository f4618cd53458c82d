// The CLI and the client library over TLS (certificates made at test time by
// openssl) to a ktuned that needs a token, and the rotation of certificates
// and tokens without a restart.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cache/bundle.h"
#include "tests/cache/test_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/tls_certs.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

constexpr char kToken[] = "tls-use-token-0123456789abcdef";
constexpr char kAdminToken[] = "tls-admin-token-0123456789abcdef";

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ClientOptions TlsClient(const std::string& ca_file, const std::string& token) {
  ClientOptions options;
  options.timeout_s = 10;
  options.token = token;
  options.tls_ca_pem = Slurp(ca_file);
  options.tls_ca_file = ca_file;
  return options;
}

TEST_CASE("ktune speaks TLS for status, get, import and prewarm, and a wrong CA is refused clearly", "[e2e][tls]") {
  TempDir dir;
  const testing::TestCa ca = testing::MakeTestCa(dir.path(), "ca");
  const testing::TestCa other_ca = testing::MakeTestCa(dir.path(), "other-ca");
  testing::MakeServerCert(dir.path(), ca, dir.path() + "/server.pem", dir.path() + "/server.key");
  const std::string tcp = absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
  const std::string token = Write(dir, "token", kToken), admin = Write(dir, "admin", kAdminToken);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start(
      {"--listen", tcp, "--tls-cert", dir.path() + "/server.pem", "--tls-key", dir.path() + "/server.key",
       "--token-file", token, "--admin-token-file", admin, "--search", "descent", "--search-max-candidates", "4"},
      {"KTUNE_WORKER_FAKE_DEVICE=1"}));

  const std::string cli = absl::StrCat(KTUNE_CLI_PATH, " --server ", tcp, " --tls-ca ", ca.cert, " ");
  auto status = RunCommand(cli + "--token-file " + token + " status", dir.path());
  INFO(status.err);
  CHECK(status.exit_code == 0);
  CHECK(status.out.find("ktuned") != std::string::npos);
  // The CA from the environment, and the certificate's other name.
  auto by_env = RunCommand(absl::StrCat("KTUNE_TLS_CA=", ca.cert, " ", KTUNE_CLI_PATH, " --server ", tcp,
                                        " --tls-server-name localhost --token-file ", token, " status"),
                           dir.path());
  INFO(by_env.err);
  CHECK(by_env.exit_code == 0);

  auto get = RunCommand(cli + "--token-file " + token + " get rmsnorm.fwd --m 256 --n 1024 --json", dir.path());
  INFO(get.err);
  CHECK(get.exit_code == 0);
  CHECK(get.out.find("\"source\"") != std::string::npos);

  const std::string bundle = Write(dir, "one.ktb", EncodeBundle({testutil::MakeTestEntry()}, "test", 1795000000));
  auto as_user = RunCommand(cli + "--token-file " + token + " import " + bundle, dir.path());
  CHECK(as_user.exit_code != 0);
  CHECK(as_user.err.find("admin token") != std::string::npos);
  auto as_admin = RunCommand(cli + "--token-file " + admin + " import " + bundle, dir.path());
  INFO(as_admin.out << as_admin.err);
  CHECK(as_admin.exit_code == 0);
  // Judged by the daemon (the test entry is of another GPU kind than the
  // fake device, so it is refused as incompatible, not for want of a token).
  CHECK(as_admin.out.find("another GPU kind") != std::string::npos);

  const std::string shapes = Write(dir, "shapes.yaml", "problems:\n  - {op: rmsnorm.fwd, n: 1024, m: [128]}\n");
  auto prewarm =
      RunCommand(cli + "--token-file " + token + " prewarm " + shapes + " --servers " + tcp + " --json", dir.path());
  INFO(prewarm.out << prewarm.err);
  CHECK(prewarm.exit_code == 0);
  CHECK(prewarm.out.find("\"tuned\": 1") != std::string::npos);

  // A CA that did not sign the daemon's certificate: refused, and the error
  // says where to look.
  auto wrong_ca = RunCommand(absl::StrCat(KTUNE_CLI_PATH, " --timeout 5 --server ", tcp, " --tls-ca ", other_ca.cert,
                                          " --token-file ", token, " status"),
                             dir.path());
  CHECK(wrong_ca.exit_code != 0);
  CHECK(wrong_ca.err.find("signed by the CA in " + other_ca.cert) != std::string::npos);
  // Plain text to a TLS port fails too.
  auto plain = RunCommand(
      absl::StrCat(KTUNE_CLI_PATH, " --timeout 5 --server ", tcp, " --token-file ", token, " status"), dir.path());
  CHECK(plain.exit_code != 0);
  CHECK(Client::Create(tcp, TlsClient(other_ca.cert, kToken))->GetStatus().status().code() ==
        absl::StatusCode::kUnavailable);
  CHECK(Client::Create(tcp, TlsClient(ca.cert, kToken))->GetStatus().ok());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("ktuned refuses at start a key that is not its certificate's, naming both files", "[e2e][tls]") {
  TempDir dir;
  const testing::TestCa ca = testing::MakeTestCa(dir.path(), "ca");
  const std::string cert_a = dir.path() + "/a.pem", key_a = dir.path() + "/a.key";
  const std::string cert_b = dir.path() + "/b.pem", key_b = dir.path() + "/b.key";
  testing::MakeServerCert(dir.path(), ca, cert_a, key_a);
  testing::MakeServerCert(dir.path(), ca, cert_b, key_b);
  const std::string garbage =
      Write(dir, "garbage.pem", "-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n");
  const std::string ktuned = std::string(KTUNED_PATH);
  auto start = [&](const std::string& cert, const std::string& key) {
    return RunCommand(absl::StrCat("timeout 20 ", ktuned, " --listen 127.0.0.1:", testing::FreeTcpPort(),
                                   " --listen unix:", dir.path(), "/s.sock --db ", dir.path(), "/x.db --tls-cert ",
                                   cert, " --tls-key ", key),
                      dir.path());
  };
  const testing::CommandResult swapped = start(cert_a, key_b);
  INFO(swapped.err);
  CHECK(swapped.exit_code != 0);
  CHECK(swapped.exit_code != 124);  // refused at start, not left serving
  CHECK(swapped.err.find("--tls-key " + key_b + " is not the key of the certificate in --tls-cert " + cert_a) !=
        std::string::npos);
  const testing::CommandResult no_key = start(cert_a, garbage);
  INFO(no_key.err);
  CHECK((no_key.exit_code != 0 && no_key.exit_code != 124));
  CHECK(no_key.err.find("--tls-key " + garbage + ": no private key in it") != std::string::npos);
  const testing::CommandResult key_as_cert = start(key_a, key_a);
  INFO(key_as_cert.err);
  CHECK((key_as_cert.exit_code != 0 && key_as_cert.exit_code != 124));
  CHECK(key_as_cert.err.find("--tls-cert " + key_a + ": no certificate in it") != std::string::npos);
  // Refused as a bad flag, before the database is touched.
  for (const testing::CommandResult* refused : {&swapped, &no_key, &key_as_cert}) CHECK(refused->exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/x.db"));
  // The matching pair starts.
  DaemonProcess daemon(dir.path(), dir.path() + "/ok.db");
  REQUIRE(daemon.Start(
      {"--listen", absl::StrCat("127.0.0.1:", testing::FreeTcpPort()), "--tls-cert", cert_b, "--tls-key", key_b}));
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("ktuned serves a rotated certificate without a restart", "[e2e][tls]") {
  TempDir dir;
  const testing::TestCa old_ca = testing::MakeTestCa(dir.path(), "old-ca");
  const testing::TestCa new_ca = testing::MakeTestCa(dir.path(), "new-ca");
  const std::string cert = dir.path() + "/server.pem", key = dir.path() + "/server.key";
  testing::MakeServerCert(dir.path(), old_ca, cert, key);
  const std::string tcp = absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--listen", tcp, "--tls-cert", cert, "--tls-key", key, "--tls-refresh-seconds", "1"}));
  REQUIRE(Client::Create(tcp, TlsClient(old_ca.cert, ""))->GetStatus().ok());
  CHECK_FALSE(Client::Create(tcp, TlsClient(new_ca.cert, ""))->GetStatus().ok());

  // Made beside, then renamed over: the watcher never sees half a file.
  testing::MakeServerCert(dir.path(), new_ca, cert + ".new", key + ".new");
  std::filesystem::rename(key + ".new", key);
  std::filesystem::rename(cert + ".new", cert);
  bool rotated = false;
  for (int attempt = 0; attempt < 40 && !rotated; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    rotated = Client::Create(tcp, TlsClient(new_ca.cert, ""))->GetStatus().ok();
  }
  CHECK(rotated);
  CHECK_FALSE(Client::Create(tcp, TlsClient(old_ca.cert, ""))->GetStatus().ok());
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
