// The Prometheus endpoint of a real (compile-only) ktuned: what it exports
// from the start, the GetConfig latency histogram, who may bind it where, and
// that idle connections cannot stall it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "httplib.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/compile/nvrtc_compiler.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

// A TCP port nothing listens on right now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

bool HasLine(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

std::string Scrape(int port) {
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(5, 0);
  auto res = http.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  return res->body;
}

v1::GetConfigRequest HeuristicRequest() {
  v1::GetConfigRequest request;
  v1::NormProblem* p = request.mutable_problem()->mutable_norm();
  p->set_op(v1::RMSNORM);
  p->set_norm_pass(v1::FWD);
  p->set_m(512);
  p->set_n(4096);
  p->set_input_dtype(v1::BF16);
  p->set_has_weight(true);
  request.set_policy(v1::HEURISTIC_ON_MISS);
  return request;
}

TEST_CASE("a compile-only daemon exports build info, its mode, zeroed answer labels and a latency histogram",
          "[e2e][metrics]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  const int port = FreePort();
  REQUIRE(daemon.Start({"--metrics-listen", "127.0.0.1:" + std::to_string(port)}));

  const std::string before = Scrape(port);
  CHECK(HasLine(before,
                "ktune_build_info{version=\"" KTUNE_VERSION "\",nvrtc=\"" + std::to_string(NvrtcVersion()) + "\"} 1"));
  CHECK(HasLine(before, "ktune_compile_only 1"));
  // Every answer is exported before the first request, at 0, in both families.
  for (const char* answer : {"hit", "heuristic", "nearest", "tuned", "not_found", "refused", "cancelled", "error"}) {
    INFO(answer);
    const std::string labels = std::string("{answer=\"") + answer + "\"";
    CHECK(HasLine(before, "ktune_getconfig_total" + labels + "} 0"));
    CHECK(HasLine(before, "ktune_getconfig_seconds_bucket" + labels + ",le=\"+Inf\"} 0"));
    CHECK(HasLine(before, "ktune_getconfig_seconds_count" + labels + "} 0"));
  }
  CHECK(HasLine(before, "# TYPE ktune_getconfig_seconds histogram"));
  CHECK(HasLine(before, "ktune_tunes_total{result=\"failed\"} 0"));
  CHECK(HasLine(before, "ktune_entries{op=\"gemm\"} 0"));

  auto client = daemon.NewClient();
  auto first = client->GetConfig(HeuristicRequest());
  REQUIRE(first.ok());
  REQUIRE(first->source() == v1::HEURISTIC);
  REQUIRE(client->GetConfig(HeuristicRequest()).ok());
  const std::string after = Scrape(port);
  CHECK(HasLine(after, "ktune_getconfig_total{answer=\"heuristic\"} 2"));
  CHECK(HasLine(after, "ktune_getconfig_seconds_count{answer=\"heuristic\"} 2"));
  CHECK(HasLine(after, "ktune_getconfig_seconds_bucket{answer=\"heuristic\",le=\"+Inf\"} 2"));
  CHECK(HasLine(after, "ktune_getconfig_seconds_bucket{answer=\"heuristic\",le=\"1800\"} 2"));
  CHECK(HasLine(after, "ktune_getconfig_seconds_count{answer=\"hit\"} 0"));
  CHECK(after.find("ktune_getconfig_seconds_sum{answer=\"heuristic\"} 0\n") == std::string::npos);
  // GetStatus carries the histogram's count too (ktune status prints it).
  auto status = client->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->metrics().at("ktune_getconfig_seconds_count{answer=\"heuristic\"}") == 2);
  CHECK(status->metrics().at("ktune_compile_only") == 1);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("64 idle connections to the metrics endpoint do not stall a scrape", "[e2e][metrics]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  const int port = FreePort();
  REQUIRE(daemon.Start({"--metrics-listen", "127.0.0.1:" + std::to_string(port)}));
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    idle.push_back(fd);  // connected, sends nothing
  }
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(3, 0);
  http.set_read_timeout(3, 0);
  auto res = http.Get("/metrics");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(seconds < 2.0);
  for (int fd : idle) close(fd);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("the metrics endpoint binds beyond loopback only with --metrics-allow-remote", "[e2e][metrics]") {
  TempDir dir;
  const int port = FreePort();
  // timeout: a ktuned that wrongly starts must not hang the suite.
  const std::string base = "timeout 20 " + testing::KtunedPath() + " --listen unix:" + dir.path() + "/k.sock --db " +
                           dir.path() + "/cache.db --kernel-cache-dir " + dir.path() +
                           "/kernels --metrics-listen 0.0.0.0:" + std::to_string(port);
  auto refused = RunCommand(base, dir.path());
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("--metrics-allow-remote") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/cache.db"));  // refused before touching anything

  DaemonProcess daemon(dir.path(), dir.path() + "/cache2.db");
  REQUIRE(daemon.Start({"--metrics-listen", "0.0.0.0:" + std::to_string(port), "--metrics-allow-remote"}));
  CHECK(HasLine(Scrape(port), "ktune_compile_only 1"));
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
