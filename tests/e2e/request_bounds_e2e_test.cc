// What a caller's request bytes can do to ktuned: a request that does not
// parse gets INVALID_ARGUMENT with a message, and a TLS caller without the
// token cannot make the daemon hold a large body.
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cache/bundle.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "tests/cache/test_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/tls_certs.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

constexpr char kToken[] = "bounds-token-0123456789abcdef";

// One unary call of `bytes` (not necessarily a valid message) to `method`.
grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                          const std::string& bytes, const std::string& token = "") {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                       std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

// The most memory the process has held, in KiB (VmHWM).
int64_t PeakKib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A valid GetConfigRequest carrying `bytes` in an unknown field (number
// 1000, length-delimited), which a parser would keep.
std::string PaddedGetConfig(size_t bytes) {
  std::string out = "\xc2\x3e";       // tag: field 1000, wire type 2
  for (size_t n = bytes;; n >>= 7) {  // varint length
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  out.append(bytes, 'x');
  return out;
}

TEST_CASE("a request that does not parse gets INVALID_ARGUMENT naming the method", "[e2e][bounds]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto channel = Channel(daemon.address(), grpc::InsecureChannelCredentials());
  // Field 1, length-delimited, with a length running past the end.
  const std::string garbage("\x0a\xff\xff\xff\x0f\x01\x02", 7);
  for (const char* method : {"GetConfig", "ListEntries", "GetStatus"}) {
    const std::string full = absl::StrCat("/ktune.v1.KtuneService/", method);
    const grpc::Status s = RawUnaryCall(channel, full, garbage);
    INFO(full << ": " << s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message().find(full) != std::string::npos);
    CHECK(s.error_message().find("not a valid") != std::string::npos);
  }
  // A valid empty request still reaches the handler.
  CHECK(RawUnaryCall(channel, "/ktune.v1.KtuneService/GetStatus", "").ok());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a TLS caller without the token never makes ktuned hold its request body", "[e2e][bounds]") {
  TempDir dir;
  const testing::TestCa ca = testing::MakeTestCa(dir.path(), "ca");
  testing::MakeServerCert(dir.path(), ca, dir.path() + "/server.pem", dir.path() + "/server.key");
  const std::string token_file = dir.path() + "/token";
  std::ofstream(token_file) << kToken;
  const std::string tcp = absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--listen", tcp, "--tls-cert", dir.path() + "/server.pem", "--tls-key",
                        dir.path() + "/server.key", "--token-file", token_file}));
  grpc::SslCredentialsOptions ssl;
  std::ifstream ca_in(ca.cert);
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(ca_in), std::istreambuf_iterator<char>());
  auto channel = Channel(tcp, grpc::SslCredentials(ssl));
  REQUIRE(RawUnaryCall(channel, "/ktune.v1.KtuneService/GetStatus", "", kToken).ok());

  const std::string big = PaddedGetConfig(size_t{32} << 20);

  const int64_t before = PeakKib(daemon.pid());
  std::vector<std::thread> callers;
  std::vector<grpc::Status> answers(6);
  for (size_t i = 0; i < answers.size(); ++i) {
    callers.emplace_back([&, i] { answers[i] = RawUnaryCall(channel, "/ktune.v1.KtuneService/GetConfig", big); });
  }
  for (std::thread& t : callers) t.join();
  for (const grpc::Status& s : answers) {
    INFO(s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  const int64_t grown_mib = (PeakKib(daemon.pid()) - before) >> 10;
  INFO("peak memory grew by " << grown_mib << " MiB");
  CHECK(grown_mib < 40);  // six bodies of 32 MiB, none held (10 MiB here; 305 before the gate)
  CHECK(RawUnaryCall(channel, "/ktune.v1.KtuneService/GetStatus", "", kToken).ok());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("every request ktuned reads is small and a large bundle comes in pieces after the admin token",
          "[e2e][bounds]") {
  TempDir dir;
  const std::string token_file = dir.path() + "/token", admin_file = dir.path() + "/admin";
  std::ofstream(token_file) << kToken;
  std::ofstream(admin_file) << "bounds-admin-0123456789abcdef";
  const std::string tcp = absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--listen", tcp, "--token-file", token_file, "--admin-token-file", admin_file}));

  // 8 MiB GetConfigs: refused before any handler, on either transport.
  const std::string big = PaddedGetConfig(size_t{8} << 20);
  for (const auto& [address, token] : {std::pair<std::string, std::string>{daemon.address(), ""}, {tcp, kToken}}) {
    const grpc::Status s = RawUnaryCall(Channel(address, grpc::InsecureChannelCredentials()),
                                        "/ktune.v1.KtuneService/GetConfig", big, token);
    INFO(address << ": " << s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  // A bundle several pieces long.
  const size_t per_entry =  // what one more entry adds
      EncodeBundle({testutil::MakeTestEntry(1024), testutil::MakeTestEntry(1032)}, "test", 1795000000).size() -
      EncodeBundle({testutil::MakeTestEntry(1024)}, "test", 1795000000).size();
  std::vector<v1::Entry> entries;
  for (size_t i = 0; i <= 4 * size_t{v1::IMPORT_PIECE_BYTES} / per_entry; ++i) {
    entries.push_back(testutil::MakeTestEntry(1024 + 8 * static_cast<int64_t>(i)));
  }
  const std::string bundle = EncodeBundle(entries, "test", 1795000000);
  REQUIRE(bundle.size() >= 4 * size_t{v1::IMPORT_PIECE_BYTES});
  v1::ImportBundleRequest unary;
  unary.set_bundle(bundle);
  const grpc::Status as_one = RawUnaryCall(Channel(daemon.address(), grpc::InsecureChannelCredentials()),
                                           "/ktune.v1.KtuneService/ImportBundle", unary.SerializeAsString());
  CHECK(as_one.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);

  ClientOptions user;
  user.token = kToken;
  auto refused = Client::Create(tcp, user)->ImportBundle(bundle);
  CHECK(refused.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(daemon.NewClient()->GetStatus()->entries() == 0);
  ClientOptions admin;
  admin.token = "bounds-admin-0123456789abcdef";
  auto imported = Client::Create(tcp, admin)->ImportBundle(bundle);
  INFO(imported.status());
  REQUIRE(imported.ok());
  CHECK(imported->added() == static_cast<int>(entries.size()));
  CHECK(daemon.NewClient()->GetStatus()->entries() == static_cast<int64_t>(entries.size()));
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("client strings never forge a daemon log line nor make an error unbounded", "[e2e][bounds]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  const std::string forged = "x\n2026-01-01T00:00:00.000+0000 ktuned level=critical event=FORGED";
  v1::ExportBundleRequest export_request;
  export_request.set_device_name(forged);
  REQUIRE(daemon.NewClient()->ExportBundle(export_request).ok());

  v1::Entry entry = testutil::MakeTestEntry();
  entry.mutable_device()->set_name(forged);
  auto imported = daemon.NewClient()->ImportBundle(EncodeBundle({entry}, "test", 1795000000));
  CHECK(imported.status().code() == absl::StatusCode::kInvalidArgument);

  v1::ListEntriesRequest list;
  list.set_op(std::string(32 << 10, 'o') + "\n");  // under the request cap
  auto listed = daemon.NewClient()->ListEntries(list);
  REQUIRE_FALSE(listed.ok());
  CHECK(listed.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(listed.status().message().size() < 1024);
  CHECK(listed.status().message().find("more bytes") != std::string::npos);

  const std::string log = daemon.Log();
  CHECK(log.find("event=export") != std::string::npos);
  CHECK(log.find("x\\n2026-01-01") != std::string::npos);  // logged, escaped
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    INFO(line);
    CHECK(line.rfind("2026-01-01T00:00:00.000+0000", 0) != 0);  // no line of the caller's making
  }
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
