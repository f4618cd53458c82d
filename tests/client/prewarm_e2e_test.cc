// `ktune prewarm` end to end against real ktuned daemons on Unix sockets, on
// the fake device (KTUNE_WORKER_FAKE_DEVICE=1: candidates verify and get
// made-up timings) so that it tunes in CI. Both fake daemons report the same
// device, so they are one GPU kind and share one work queue.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "client/prewarm.h"
#include "client/shapes_file.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

constexpr char kFake[] = "KTUNE_WORKER_FAKE_DEVICE=1";

// 16 RMSNorm problems and one GEMM (tuned like them, over both GEMM sources).
constexpr char kShapes[] = R"(
problems:
  - {op: rmsnorm.fwd, n: 1024, m: [100, 200, 300, 400, 500, 600, 700, 800,
                                   900, 1000, 1100, 1200, 1300, 1400, 1500, 1600]}
  - {op: gemm, m: 64, n: 64, k: 64}
)";
constexpr int kNorms = 16;
constexpr int kProblems = kNorms + 1;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  REQUIRE(out.good());
}

// The pid of this process's child that serves `address`. DaemonProcess keeps
// its pid to itself; the daemon is our direct child with the address in its
// command line (its worker is the daemon's child, not ours).
pid_t ChildServing(const std::string& address) {
  DIR* proc = opendir("/proc");
  REQUIRE(proc != nullptr);
  pid_t found = -1;
  while (dirent* e = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != getpid()) continue;
    std::ifstream cmdline(absl::StrCat("/proc/", pid, "/cmdline"));
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    for (char& c : args) c = c == '\0' ? ' ' : c;
    if (args.find(" " + address + " ") != std::string::npos) found = pid;
  }
  closedir(proc);
  return found;
}

// SIGKILLs a daemon as it is handed its first problem to tune. The loss is
// then certain to be seen, as that server's thread calls the dead daemon
// next. (Both threads wait for the queue together, and the first tune takes
// NVRTC compiles, so the daemon's thread is handed a problem long before the
// other could drain all of them.)
// (Killing after a daemon's n-th result instead raced: a fast survivor could
// drain the queue first, and a server nobody calls again is never lost.)
class KillOnFirstTune final : public PrewarmObserver {
 public:
  KillOnFirstTune(std::string address, pid_t pid) : address_(std::move(address)), pid_(pid) {}
  void OnTuneStart(const std::string& server, const PrewarmProblem& problem) override {
    if (server != address_ || killed_) return;
    REQUIRE(kill(pid_, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);  // gone before its thread calls it
    killed_ = true;
  }
  void OnServerLost(const std::string& server, const std::string& error, int left) override {
    lost_.push_back(server);
    servers_left_ = left;
  }
  bool killed() const { return killed_; }
  const std::vector<std::string>& lost() const { return lost_; }
  int servers_left() const { return servers_left_; }

 private:
  const std::string address_;
  const pid_t pid_;
  bool killed_ = false;
  std::vector<std::string> lost_;
  int servers_left_ = -1;
};

bool StoredOn(DaemonProcess& daemon, const PrewarmProblem& p) {
  v1::GetConfigRequest request;
  *request.mutable_problem() = p.problem;
  request.set_policy(v1::CACHED_ONLY);
  auto r = daemon.NewClient()->GetConfig(request);
  return r.ok() && r->source() == v1::TUNED;
}

TEST_CASE("prewarm over two daemons finishes on the survivor when one is killed, then a resume tunes nothing",
          "[e2e][prewarm]") {
  TempDir dir_a, dir_b, scratch;
  DaemonProcess a(dir_a.path(), dir_a.path() + "/cache.db");
  DaemonProcess b(dir_b.path(), dir_b.path() + "/cache.db");
  REQUIRE(a.Start({}, {kFake}));
  REQUIRE(b.Start({}, {kFake}));
  const std::string shapes_path = scratch.path() + "/shapes.yaml";
  WriteFile(shapes_path, kShapes);
  auto problems = LoadShapesFile(shapes_path);
  REQUIRE(problems.ok());
  REQUIRE(problems->size() == kProblems);

  // b already holds two tuned entries (tuned directly, before the prewarm):
  // the resume pass must count them as done on this GPU kind.
  constexpr int kOnBBefore = 2;
  for (int i = 0; i < kOnBBefore; ++i) {
    v1::TuneRequest tune;
    *tune.mutable_problem() = (*problems)[i].problem;
    auto tuned = b.NewClient()->Tune(tune, nullptr);
    REQUIRE(tuned.ok());
  }

  const pid_t b_pid = ChildServing(b.address());
  REQUIRE(b_pid > 0);
  KillOnFirstTune killer(b.address(), b_pid);
  PrewarmOptions options;
  options.call_timeout_s = 120;
  const PrewarmReport report = Prewarm(*problems, {a.address(), b.address()}, options, &killer);

  REQUIRE(killer.killed());
  CHECK(killer.lost() == std::vector<std::string>{b.address()});
  CHECK(killer.servers_left() == 1);
  CHECK(report.kinds.size() == 1);
  CHECK(report.complete());
  CHECK(report.count(PrewarmOutcome::kAlreadyTuned) == kOnBBefore);
  CHECK(report.count(PrewarmOutcome::kTuned) == kProblems - kOnBBefore);
  CHECK(report.count(PrewarmOutcome::kNotServed) == 0);
  CHECK(report.count(PrewarmOutcome::kFailed) == 0);
  CHECK(report.count(PrewarmOutcome::kNotDone) == 0);
  REQUIRE(report.servers.size() == 2);
  CHECK(report.servers[0].state == PrewarmServerReport::State::kUsed);
  CHECK(report.servers[1].state == PrewarmServerReport::State::kLost);
  CHECK(report.servers[1].counts.at(PrewarmOutcome::kAlreadyTuned) == kOnBBefore);
  CHECK(report.servers[1].counts.count(PrewarmOutcome::kTuned) == 0);
  // The problem b was handed when it died went back to the queue: a tuned it.
  CHECK(report.servers[0].counts.at(PrewarmOutcome::kTuned) == kProblems - kOnBBefore);
  // Each problem is stored where the report says it was tuned.
  int on_a = 0;
  for (const PrewarmProblem& p : *problems) on_a += StoredOn(a, p) ? 1 : 0;
  CHECK(on_a == kProblems - kOnBBefore);

  // b comes back with its database (its two entries). A
  // resume over both, through the CLI, finds every problem on one or the
  // other and tunes nothing.
  REQUIRE(b.Start({}, {kFake}));
  const std::string servers_path = scratch.path() + "/servers.txt";
  WriteFile(servers_path, "# the cluster\n" + a.address() + "\n\n" + b.address() + "\n");
  const auto resume =
      RunCommand(absl::StrCat(KTUNE_CLI_PATH, " prewarm ", shapes_path, " --servers-file ", servers_path, " --json"),
                 scratch.path());
  INFO(resume.err);
  REQUIRE(resume.exit_code == 0);
  const auto summary = nlohmann::json::parse(resume.out);
  CHECK(summary["complete"] == true);
  CHECK(summary["tuned"] == 0);
  CHECK(summary["skipped_already"] == kProblems);
  CHECK(summary["not_served"] == 0);
  CHECK(summary["failed"] == 0);
  CHECK(summary["servers"][0]["skipped_already"].get<int>() + summary["servers"][1]["skipped_already"].get<int>() ==
        kProblems);
  CHECK(summary["not_served_problems"].empty());
  CHECK(a.Stop() == 0);
  CHECK(b.Stop() == 0);
}

TEST_CASE("compile-only and unreachable servers are reported and not used", "[e2e][prewarm]") {
  TempDir dir_gpu, dir_cpu, scratch;
  DaemonProcess gpu(dir_gpu.path(), dir_gpu.path() + "/cache.db");
  DaemonProcess cpu(dir_cpu.path(), dir_cpu.path() + "/cache.db");
  REQUIRE(gpu.Start({}, {kFake}));
  REQUIRE(cpu.Start({}, {"CUDA_VISIBLE_DEVICES="}));  // compile-only, even on a GPU machine
  const std::string shapes = scratch.path() + "/shapes.json";
  WriteFile(shapes, R"({"problems": [{"op": "rmsnorm.fwd", "m": [7, 9], "n": 256}]})");
  const std::string missing = "unix:" + scratch.path() + "/nobody.sock";

  const auto run = RunCommand(absl::StrCat(KTUNE_CLI_PATH, " prewarm ", shapes, " --json --servers ", cpu.address(),
                                           ",", missing, ",", gpu.address()),
                              scratch.path());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto summary = nlohmann::json::parse(run.out);
  CHECK(summary["tuned"] == 2);
  CHECK(summary["servers"][0]["state"] == "compile_only");
  CHECK(summary["servers"][1]["state"] == "unreachable");
  CHECK(summary["servers"][2]["state"] == "used");
  CHECK(summary["servers"][2]["tuned"] == 2);

  // Without a usable server nothing is done: exit 1, and the reason on stderr.
  const auto none = RunCommand(
      absl::StrCat(KTUNE_CLI_PATH, " prewarm ", shapes, " --servers ", cpu.address(), ",", missing), scratch.path());
  CHECK(none.exit_code == 1);
  CHECK(none.err.find("no usable server") != std::string::npos);
  CHECK(gpu.Stop() == 0);
  CHECK(cpu.Stop() == 0);
}

TEST_CASE("prewarm usage errors exit 2 with one clear message", "[e2e][prewarm]") {
  TempDir scratch;
  const std::string bad = scratch.path() + "/bad.yaml";
  WriteFile(bad, "- {op: rmsnorm.fwd, m: 8, n: 64}\n- {op: rmsnorm.fwd, m: 8, n: -1}\n");
  const std::string good = scratch.path() + "/good.yaml";
  WriteFile(good, "- {op: rmsnorm.fwd, m: 8, n: 64}\n");
  const std::string model = scratch.path() + "/config.json";
  WriteFile(model, R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "rms_norm_eps": 1e-6})");
  // The server does not exist: a usage error must be reported before any call.
  const std::string cli = absl::StrCat(KTUNE_CLI_PATH, " --server unix:", scratch.path(), "/none.sock prewarm ");
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {bad, bad + ":2: problems[1].n: must be a positive integer, got -1"},
      {scratch.path() + "/missing.yaml", "cannot read the shapes file"},
      {good + " --shard 2/2", "--shard: i must be in [0, 1], got 2"},
      {good + " --shard 0/0", "--shard: n must be >= 1"},
      {good + " --tokens 1,2", "--tokens needs --from-model"},
      {"--from-model " + model + " --tokens 1,x", "--tokens: 'x' is not an integer"},
      {"--from-model " + model + " --dtype fp64", "--dtype: unknown dtype 'fp64'"},
      {"--from-model " + model + " " + good, "give either a shapes file or --from-model"},
      {"", "give either a shapes file or --from-model"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const auto r = RunCommand(cli + c.args, scratch.path());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.err.find("cannot reach") == std::string::npos);
    CHECK(r.out.empty());
  }
  // --dry-run lists without contacting anyone.
  const auto dry = RunCommand(cli + "--from-model " + model + " --tokens 1,16 --backward --dry-run", scratch.path());
  CHECK(dry.exit_code == 0);
  CHECK(dry.out.find("rmsnorm.bwd m=16 n=64") != std::string::npos);
  CHECK(dry.out.find("gemm m=16") != std::string::npos);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("prewarm tunes each problem once per GPU kind", "[e2e][prewarm]") {
  TempDir dir_a1, dir_a2, dir_b, scratch;
  DaemonProcess a1(dir_a1.path(), dir_a1.path() + "/cache.db");
  DaemonProcess a2(dir_a2.path(), dir_a2.path() + "/cache.db");
  DaemonProcess b(dir_b.path(), dir_b.path() + "/cache.db");
  REQUIRE(a1.Start({}, {kFake, "KTUNE_WORKER_FAKE_DEVICE_NAME=A"}));
  REQUIRE(a2.Start({}, {kFake, "KTUNE_WORKER_FAKE_DEVICE_NAME=A"}));
  REQUIRE(b.Start({}, {kFake, "KTUNE_WORKER_FAKE_DEVICE_NAME=B"}));
  const std::string shapes = scratch.path() + "/shapes.yaml";
  WriteFile(shapes, "- {op: rmsnorm.fwd, n: 512, m: [10, 20, 30, 40]}\n");
  auto problems = LoadShapesFile(shapes);
  REQUIRE(problems.ok());

  PrewarmOptions options;
  options.call_timeout_s = 120;
  const PrewarmReport report = Prewarm(*problems, {a1.address(), a2.address(), b.address()}, options, nullptr);
  CHECK(report.complete());
  CHECK(report.kinds.size() == 2);
  CHECK(report.count(PrewarmOutcome::kTuned) == 8);  // 4 problems x 2 kinds
  // Kind B has one daemon: it holds everything. Kind A's two share the work
  // and hold every problem exactly once between them.
  int on_a = 0;
  for (const PrewarmProblem& p : *problems) {
    CHECK(StoredOn(b, p));
    on_a += (StoredOn(a1, p) ? 1 : 0) + (StoredOn(a2, p) ? 1 : 0);
  }
  CHECK(on_a == 4);
  CHECK(a1.Stop() == 0);
  CHECK(a2.Stop() == 0);
  CHECK(b.Stop() == 0);
}

}  // namespace
}  // namespace ktune
