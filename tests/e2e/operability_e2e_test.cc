// What whoever runs ktune relies on, through the real binaries: versions,
// exit codes (0 done, 1 failed, 2 usage error, the same in every
// subcommand), a SIGTERM that lets accepted calls finish, a client that
// rides out a daemon start, and a debug log line per request.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RmsProblem;
using testing::RunCommand;
using testing::TempDir;

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST_CASE("ktune and ktuned print their version", "[e2e][cli]") {
  TempDir dir;
  const auto cli = RunCommand(absl::StrCat(KTUNE_CLI_PATH, " --version"), dir.path());
  CHECK(cli.exit_code == 0);
  CHECK(cli.out == "ktune " KTUNE_VERSION "\n");
  const auto daemon = RunCommand(absl::StrCat(testing::KtunedPath(), " --version"), dir.path());
  CHECK(daemon.exit_code == 0);
  CHECK(daemon.out == "ktuned " KTUNE_VERSION "\n");
}

TEST_CASE("every ktune subcommand exits 2 on a usage error, 1 on a failure and 0 on success", "[e2e][cli]") {
  TempDir dir;
  const std::string bundle = dir.path() + "/one.ktb";
  {
    std::ofstream out(bundle);
    out << "not a bundle";
  }
  const std::string shapes = dir.path() + "/shapes.yaml";
  std::ofstream(shapes) << "- {op: rmsnorm.fwd, m: 8, n: 64}\n";
  // No daemon here: a usage error must be found before any call.
  const std::string none = absl::StrCat(KTUNE_CLI_PATH, " --server unix:", dir.path(), "/none.sock ");
  struct Case {
    std::string args;
    std::string message;  // in stderr
  };
  const std::vector<Case> usage = {
      {"stauts",
       "unknown command 'stauts' (commands: status, fleet, get, tune, ls, rm, prune, export, import, bundle, prewarm)"},
      {"bundle frob", "unknown command 'bundle frob' (commands: inspect, merge)"},
      {"", "A subcommand is required"},
      {"--bogus status", "--bogus"},
      {"status --bogus", "--bogus"},
      {"--timeout 0 status", "--timeout"},
      {"--token-file " + dir.path() + "/missing status", "missing"},
      {"get rmsnorm.fwd --n 64", "--m is required"},
      {"get rmsnorm.fwd --m x --n 64", "--m"},
      {"get rmsnorm.fwd --m 0 --n 64", "problem.m"},
      {"get rmsnorm.fwd --m 8 --n 64 --policy sometimes", "--policy"},
      {"get rmsnorm.fwd --m 8 --n 64 --dtype int7", "int7"},
      {"get gemm --m 8 --n 8", "--k: required for gemm"},
      {"get rmsnorm.fwd --m 8 --n 64 --b-layout nk", "--b-layout: only gemm"},
      {"tune rmsnorm.fwd --m 8", "--n is required"},
      {"ls --op", "--op"},
      {"ls --limit x", "--limit"},
      {"rm", "op is required"},
      {"rm rmsnorm.fwd --n 64", "--m is required"},
      {"prune", "--stale is required"},
      {"export", "--output is required"},
      {"export -o " + dir.path() + "/x.ktb --since yesterday", "--since"},
      {"import", "file is required"},
      {"import " + dir.path() + "/missing.ktb", "missing.ktb"},
      {"bundle inspect " + dir.path() + "/missing.ktb", "no such file"},
      {"bundle merge " + bundle, "inputs"},
      {"prewarm " + shapes + " --shard 2/2", "--shard"},
      {"prewarm --frob", "--frob"},
  };
  for (const Case& c : usage) {
    INFO(c.args);
    const auto r = RunCommand(none + c.args, dir.path());
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.err.find("cannot reach") == std::string::npos);
  }
  // Failures: the daemon is not there (retried until the 1 s deadline), or
  // the file is no bundle.
  for (const std::string& args :
       {std::string("--timeout 1 status"), std::string("--timeout 1 get rmsnorm.fwd --m 8 --n 64"), "import " + bundle,
        "bundle inspect " + bundle}) {
    INFO(args);
    const auto r = RunCommand(none + args, dir.path());
    CHECK(r.exit_code == 1);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  // Success.
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  const std::string live = absl::StrCat(KTUNE_CLI_PATH, " --server ", daemon.address(), " ");
  for (const std::string& args :
       {std::string("--help"), std::string("get --help"), std::string("status"),
        std::string("get rmsnorm.fwd --m 8 --n 64"), std::string("ls"), "prewarm " + shapes + " --dry-run"}) {
    INFO(args);
    CHECK(RunCommand(live + args, dir.path()).exit_code == 0);
  }
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("ktuned exits 2 on a usage error, whatever the flag", "[e2e]") {
  TempDir dir;
  const std::string ktuned = absl::StrCat(testing::KtunedPath(), " --db ", dir.path(), "/x.db ");
  for (const char* args : {"--bogus", "--log-level loud", "--drain-seconds -1", "--drain-seconds",
                           "--listen unix:relative.sock", "--search sideways", "extra"}) {
    INFO(args);
    const auto r = RunCommand(ktuned + args, dir.path());
    CHECK(r.exit_code == 2);
    CHECK_FALSE(r.err.empty());
  }
  CHECK(RunCommand(absl::StrCat(testing::KtunedPath(), " --help"), dir.path()).exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/x.db"));
}

TEST_CASE("SIGTERM lets every call accepted before it finish, tunes still queued included", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--drain-seconds", "120"}, {testing::kFakeDeviceEnv}));
  // 24 TUNE_ON_MISS callers over 3 keys: one tune runs, two wait in the
  // queue, when SIGTERM comes.
  constexpr int kCallers = 24;
  std::vector<absl::StatusOr<v1::GetConfigResponse>> answers(kCallers, absl::UnknownError("unset"));
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      v1::GetConfigRequest request;
      *request.mutable_problem() = RmsProblem(1024 * (1 + i % 3), 512);
      request.set_policy(v1::TUNE_ON_MISS);
      answers[i] = Client::Create(daemon.address(), 120)->GetConfig(request);
    });
  }
  // Every call accepted (the debug line is written as its handler returns),
  // and tunes still queued.
  bool ready = false;
  for (int i = 0; i < 1000 && !ready; ++i) {
    ready = CountOf(daemon.Log(), "event=request op=GetConfig") == kCallers;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(ready);
  const bool queued = CountOf(daemon.Log(), "event=tune_done") < 2;
  const int exit_code = daemon.Stop();  // SIGTERM, then waits for the exit
  for (auto& t : callers) t.join();
  CHECK(queued);
  CHECK(exit_code == 0);
  int ok = 0;
  for (const auto& a : answers) {
    INFO(a.status().ToString());
    CHECK(a.ok());
    if (a.ok()) {
      CHECK(a->source() == v1::TUNED);
      ++ok;
    }
  }
  CHECK(ok == kCallers);
}

TEST_CASE("a call made before the daemon is up succeeds once it comes up: UNAVAILABLE is retried", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  auto client = Client::Create(daemon.address(), 30);
  absl::StatusOr<v1::GetStatusResponse> status = absl::UnknownError("unset");
  std::thread caller([&] { status = client->GetStatus(); });
  // Without the retry policy, the call has failed (no socket) by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  REQUIRE(daemon.Start());
  caller.join();
  INFO(status.status().ToString());
  CHECK(status.ok());
  CHECK(daemon.Stop() == 0);

  // The policy covers the calls safe to repeat, and only them.
  const std::string config = ServiceConfigJson();
  for (const char* method : {"GetConfig", "GetStatus", "ListEntries", "ExportBundle"}) {
    CHECK(absl::StrContains(config, absl::StrCat("\"method\": \"", method, "\"")));
  }
  CHECK_FALSE(absl::StrContains(config, "ImportBundle"));
  CHECK_FALSE(absl::StrContains(config, "\"Tune\""));
  CHECK(absl::StrContains(config, "\"retryableStatusCodes\": [\"UNAVAILABLE\"]"));
}

TEST_CASE("ktuned at debug level logs each GetConfig: op, problem key, source and microseconds", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());  // at debug level
  v1::GetConfigRequest request;
  *request.mutable_problem() = RmsProblem(4096, 4096);
  request.set_policy(v1::HEURISTIC_ON_MISS);
  REQUIRE(daemon.NewClient()->GetConfig(request).ok());
  request.set_policy(v1::CACHED_ONLY);
  REQUIRE_FALSE(daemon.NewClient()->GetConfig(request).ok());
  v1::GetConfigRequest invalid = request;
  *invalid.mutable_problem() = RmsProblem(0, 4096);
  REQUIRE(daemon.NewClient()->GetConfig(invalid).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(daemon.Stop() == 0);
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(daemon.Log(), '\n')) {
    if (absl::StrContains(line, "event=request op=GetConfig")) lines.emplace_back(line);
  }
  REQUIRE(lines.size() == 3);
  CHECK(absl::StrContains(lines[0], "level=debug"));
  CHECK(absl::StrContains(lines[0], "problem=\"rmsnorm.fwd m=4096 n=4096"));
  CHECK(absl::StrContains(lines[0], "policy=HEURISTIC_ON_MISS source=HEURISTIC us="));
  CHECK(absl::StrContains(lines[1], "problem=\"rmsnorm.fwd m=4096 n=4096"));
  CHECK(absl::StrContains(lines[1], "policy=CACHED_ONLY source=NONE us="));
  CHECK(absl::StrContains(lines[2], "problem=\"invalid\" policy=CACHED_ONLY source=NONE us="));

  // At info level there is no such line.
  TempDir quiet_dir;
  DaemonProcess quiet(quiet_dir.path(), quiet_dir.path() + "/cache.db");
  REQUIRE(quiet.Start({"--log-level", "info"}));
  REQUIRE(quiet.NewClient()->GetConfig(request).status().code() == absl::StatusCode::kNotFound);
  CHECK(quiet.Stop() == 0);
  CHECK_FALSE(absl::StrContains(quiet.Log(), "event=request"));
}

}  // namespace
}  // namespace ktune
