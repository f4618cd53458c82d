// Where ktuned listens is its own: the default socket directory must be ours
// alone (ktuned and ktune refuse one another user could write or swap), and a
// TCP port (gRPC or metrics) is never shared with a second daemon.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

// ktuned with the default socket under XDG_RUNTIME_DIR=`runtime`, bounded in
// time: a daemon that wrongly starts is cut after 10 s (exit 124).
testing::CommandResult RunDefaultDaemon(const TempDir& scratch, const std::string& runtime) {
  return RunCommand(absl::StrCat("XDG_RUNTIME_DIR=", runtime, " timeout 10 ", testing::KtunedPath(), " --db ",
                                 scratch.path(), "/cache.db --kernel-cache-dir ", scratch.path(), "/kernels"),
                    scratch.path());
}

TEST_CASE("ktuned and ktune refuse a default socket directory another user could use", "[e2e][listen]") {
  TempDir scratch, runtime;
  const std::string dir = runtime.path() + "/ktune";

  SECTION("world-writable") {
    REQUIRE(mkdir(dir.c_str(), 0700) == 0);
    REQUIRE(chmod(dir.c_str(), 0777) == 0);
    const auto daemon = RunDefaultDaemon(scratch, runtime.path());
    CHECK(daemon.exit_code == 1);
    CHECK(daemon.err.find("socket directory " + dir + " is writable by others") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir + "/ktuned.sock"));
    const auto cli =
        RunCommand(absl::StrCat("XDG_RUNTIME_DIR=", runtime.path(), " ", KTUNE_CLI_PATH, " status"), scratch.path());
    CHECK(cli.exit_code != 0);
    CHECK(cli.err.find("socket directory " + dir + " is writable by others") != std::string::npos);
  }
  SECTION("a symlink") {
    const std::string elsewhere = scratch.path() + "/elsewhere";
    REQUIRE(mkdir(elsewhere.c_str(), 0700) == 0);
    REQUIRE(symlink(elsewhere.c_str(), dir.c_str()) == 0);
    const auto daemon = RunDefaultDaemon(scratch, runtime.path());
    CHECK(daemon.exit_code == 1);
    CHECK(daemon.err.find("socket directory " + dir + " is a symlink") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(elsewhere + "/ktuned.sock"));
  }
}

TEST_CASE("a second ktuned on a taken TCP port exits with a clear error and leaves no database behind",
          "[e2e][listen]") {
  TempDir dir, second_dir;
  const std::string tcp = absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
  const std::string metrics = absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
  DaemonProcess first(dir.path(), dir.path() + "/cache.db");
  REQUIRE(first.Start({"--listen", tcp, "--metrics-listen", metrics}));
  const std::string second =
      absl::StrCat("timeout 10 ", testing::KtunedPath(), " --db ", second_dir.path(), "/cache.db --kernel-cache-dir ",
                   second_dir.path(), "/kernels --listen unix:", second_dir.path(), "/s.sock");
  auto grpc_port = RunCommand(second + " --listen " + tcp, second_dir.path());
  CHECK(grpc_port.exit_code == 1);
  CHECK(grpc_port.err.find("--listen " + tcp + ": address already in use") != std::string::npos);
  auto metrics_port = RunCommand(second + " --metrics-listen " + metrics, second_dir.path());
  CHECK(metrics_port.exit_code == 2);
  CHECK(metrics_port.err.find("--metrics-listen " + metrics + ": address already in use") != std::string::npos);
  // Both failed after opening the store: the database that start created is gone.
  CHECK_FALSE(std::filesystem::exists(second_dir.path() + "/cache.db"));
  CHECK_FALSE(std::filesystem::exists(second_dir.path() + "/cache.db-wal"));
  CHECK(first.NewClient()->GetStatus().ok());
  CHECK(first.Stop() == 0);
}

}  // namespace
}  // namespace ktune
