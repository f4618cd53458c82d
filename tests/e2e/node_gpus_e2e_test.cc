// One ktuned over every GPU of a node (daemon/gpus.h): a worker per GPU, tune
// jobs spread over them. The fake worker device stands in for the GPUs
// (KTUNE_WORKER_FAKE_DEVICE_COUNT=N: N fake GPUs; KTUNE_WORKER_FAKE_DEVICE_NAME=A,B
// gives them kinds), with a delay
// per run (KTUNE_WORKER_FAKE_DELAY_MS) so a tune's wall time is the GPU's,
// not the daemon's. The real several-GPU measurement is on the GPU machine.
#include <catch2/catch.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/prewarm.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_space.h"
#include "tuner/run/worker.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::kFakeDeviceEnv;
using testing::RmsProblem;
using testing::RunCommand;
using testing::TempDir;

std::vector<PrewarmProblem> Problems(int count, int64_t n) {
  std::vector<PrewarmProblem> out;
  for (int i = 0; i < count; ++i) {
    PrewarmProblem p;
    p.problem = RmsProblem(64 * (i + 1), n);
    p.key = absl::StrCat("rmsnorm.fwd m=", 64 * (i + 1), " n=", n);
    out.push_back(std::move(p));
  }
  return out;
}

// A prewarm of `problems` on a fresh database over `gpus` fake GPUs; the
// most GPUs GetStatus saw busy at once while it ran, in *max_busy.
PrewarmReport TimedPrewarm(const TempDir& dir, const std::string& db, int gpus, int delay_ms,
                           const std::vector<PrewarmProblem>& problems, int* max_busy) {
  DaemonProcess daemon(dir.path(), dir.path() + "/" + db);
  REQUIRE(daemon.Start({"--log-level", "info"}, {kFakeDeviceEnv, absl::StrCat("KTUNE_WORKER_FAKE_DEVICE_COUNT=", gpus),
                                                 absl::StrCat("KTUNE_WORKER_FAKE_DELAY_MS=", delay_ms)}));
  auto status = daemon.NewClient()->GetStatus();
  REQUIRE(status.ok());
  REQUIRE(status->gpus_size() == gpus);
  std::atomic<bool> done{false};
  std::atomic<int> busy_seen{0};
  std::thread poller([&] {
    std::unique_ptr<Client> client = daemon.NewClient();
    while (!done) {
      if (auto s = client->GetStatus(); s.ok()) {
        int busy = 0;
        for (const v1::GpuStatus& g : s->gpus()) busy += g.busy() ? 1 : 0;
        busy_seen = std::max(busy_seen.load(), busy);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  PrewarmOptions options;
  options.call_timeout_s = 120;
  PrewarmReport report = Prewarm(problems, {daemon.address()}, options, nullptr);
  done = true;
  poller.join();
  *max_busy = busy_seen;
  CHECK(report.complete());
  CHECK(report.count(PrewarmOutcome::kTuned) == static_cast<int>(problems.size()));
  REQUIRE(report.servers.size() == 1);
  CHECK(report.servers[0].gpus == gpus);
  CHECK(daemon.Stop() == 0);
  return report;
}

TEST_CASE("two fake GPUs run two tunes at once and finish a prewarm in about half the time of one", "[e2e][gpus]") {
  TempDir dir;
  const std::vector<PrewarmProblem> problems = Problems(12, 1024);
  int busy = 0;
  // Fills the kernel cache (dir/kernels, shared by the three daemons): the
  // timed runs compile nothing, so their wall time is the fake GPUs'.
  TimedPrewarm(dir, "warm.db", 1, 0, {problems.front()}, &busy);
  const PrewarmReport one = TimedPrewarm(dir, "one.db", 1, 6, problems, &busy);
  CHECK(busy == 1);
  const PrewarmReport two = TimedPrewarm(dir, "two.db", 2, 6, problems, &busy);
  CHECK(busy == 2);  // both workers tuned at the same time
  INFO("one GPU " << one.seconds << " s, two GPUs " << two.seconds << " s");
  CHECK(two.seconds < 0.75 * one.seconds);
}

// The GPU (ordinal) whose worker restarted, and every worker's pid.
struct Workers {
  std::vector<int> pids;
  std::vector<int> restarts;
};

Workers WorkersOf(DaemonProcess& daemon) {
  auto status = daemon.NewClient()->GetStatus();
  REQUIRE(status.ok());
  Workers w;
  for (const v1::GpuStatus& g : status->gpus()) {
    w.pids.push_back(g.worker_pid());
    w.restarts.push_back(g.worker_restarts());
  }
  return w;
}

TEST_CASE("a fault on one GPU's worker restarts that worker only and quarantines the candidate for the GPU kind",
          "[e2e][gpus]") {
  TempDir dir;
  NormProblem p;
  p.m = 2048;
  p.n = 4096;
  const std::vector<NormConfig> space = NormSearchSpace(p, FakeWorkerDevice());
  REQUIRE(space.size() > 2);
  auto recipe = NormLaunchRecipe(p, space[1], FakeWorkerDevice());
  REQUIRE(recipe.ok());
  const std::string crash = "KTUNE_WORKER_FAULT=crash:" + recipe->kernels[0].name_expression;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFakeDeviceEnv, "KTUNE_WORKER_FAKE_DEVICE_COUNT=2", crash}));
  const Workers before = WorkersOf(daemon);
  REQUIRE(before.pids.size() == 2);
  CHECK(before.restarts == std::vector<int>{0, 0});

  v1::TuneRequest tune;
  *tune.mutable_problem() = RmsProblem(2048, 4096);
  std::multiset<std::string> statuses;
  auto first = daemon.NewClient()->Tune(tune, [&](const v1::TuneEvent& e) {
    if (e.has_candidate()) statuses.insert(e.candidate().status());
  });
  REQUIRE(first.ok());
  CHECK(statuses.count("fault") == 1);
  const Workers after = WorkersOf(daemon);
  // One worker restarted (a new pid), the other untouched.
  REQUIRE(after.pids.size() == 2);
  const int faulted = after.restarts[0] == 1 ? 0 : 1;
  CHECK(after.restarts[faulted] == 1);
  CHECK(after.restarts[1 - faulted] == 0);
  CHECK(after.pids[faulted] != before.pids[faulted]);
  CHECK(after.pids[1 - faulted] == before.pids[1 - faulted]);
  auto status = daemon.NewClient()->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->metrics().at(absl::StrCat("ktune_worker_restarts_total{device=\"", faulted, "\"}")) == 1);
  CHECK(status->metrics().at(absl::StrCat("ktune_worker_restarts_total{device=\"", 1 - faulted, "\"}")) == 0);
  CHECK(daemon.Log().find("event=candidate_quarantined") != std::string::npos);
  CHECK(daemon.Log().find(absl::StrCat(" gpu=", faulted, " reason=fault")) != std::string::npos);

  // Two tunes at once, one per GPU, each with the same candidate (its kernel
  // does not depend on M): it is quarantined on both, so neither faults.
  std::multiset<std::string> again_a, again_b;
  v1::TuneRequest forced = tune;
  forced.mutable_options()->set_force(true);
  v1::TuneRequest other;
  *other.mutable_problem() = RmsProblem(1024, 4096);
  // Catch's assertions are not thread-safe: the threads keep their results.
  absl::StatusOr<v1::GetConfigResponse> result_a = absl::UnknownError("unset"), result_b = result_a;
  std::thread a([&] {
    result_a = daemon.NewClient()->Tune(forced, [&](const v1::TuneEvent& e) {
      if (e.has_candidate()) again_a.insert(e.candidate().status());
    });
  });
  std::thread b([&] {
    result_b = daemon.NewClient()->Tune(other, [&](const v1::TuneEvent& e) {
      if (e.has_candidate()) again_b.insert(e.candidate().status());
    });
  });
  a.join();
  b.join();
  CHECK(result_a.ok());
  CHECK(result_b.ok());
  CHECK(again_a.count("quarantined") == 1);
  CHECK(again_b.count("quarantined") == 1);
  CHECK(again_a.count("fault") + again_b.count("fault") == 0);
  CHECK(WorkersOf(daemon).restarts == after.restarts);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("ktune status lists every GPU, busy or idle", "[e2e][gpus]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--gpus", "0,2"}, {kFakeDeviceEnv, "KTUNE_WORKER_FAKE_DEVICE_COUNT=3"}));
  auto out = RunCommand(std::string(KTUNE_CLI_PATH) + " --server " + daemon.address() + " status", dir.path());
  REQUIRE(out.exit_code == 0);
  CHECK(out.out.find("gpu 0        ktune fake device (tests only) (sm_90, 132 SMs, driver 13000) idle, worker ") !=
        std::string::npos);
  CHECK(out.out.find("gpu 2        ktune fake device") != std::string::npos);
  CHECK(out.out.find("gpu 1 ") == std::string::npos);
  CHECK(daemon.Stop() == 0);
}

// How many tunes the log says started on GPU `gpu`.
int TuneStartsOn(const std::string& log, int gpu) {
  int count = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("event=tune_start ") != std::string::npos && absl::EndsWith(line, absl::StrCat(" gpu=", gpu)))
      ++count;
  }
  return count;
}

TEST_CASE("one ktuned serves GPUs of two kinds: answers per kind, a tune runs on a GPU of the kind asked for",
          "[e2e][gpus]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(
      daemon.Start({}, {kFakeDeviceEnv, "KTUNE_WORKER_FAKE_DEVICE_COUNT=3", "KTUNE_WORKER_FAKE_DEVICE_NAME=A,B,A"}));
  const std::string kA = "ktune fake device (tests only) A", kB = "ktune fake device (tests only) B";
  auto status = daemon.NewClient()->GetStatus();
  REQUIRE(status.ok());
  // Every GPU has a worker; the kinds are listed in GPU order, the first GPU's first.
  REQUIRE(status->gpus_size() == 3);
  CHECK(status->gpus(1).device().name() == kB);
  REQUIRE(status->devices_size() == 2);
  CHECK(status->devices(0).name() == kA);
  CHECK(status->devices(1).name() == kB);

  // No selector: the first kind. A tune for kind B runs on GPU 1, the only B.
  v1::TuneRequest tune_a;
  *tune_a.mutable_problem() = RmsProblem(256, 1024);
  auto tuned_a = daemon.NewClient()->Tune(tune_a, nullptr);
  REQUIRE(tuned_a.ok());
  CHECK(tuned_a->device().name() == kA);
  v1::TuneRequest tune_b = tune_a;
  tune_b.mutable_device()->set_name(kB);
  auto tuned_b = daemon.NewClient()->Tune(tune_b, nullptr);
  REQUIRE(tuned_b.ok());
  CHECK(tuned_b->device().name() == kB);
  // A's tune took whichever A slot woke first (GPU 0 or 2); B's only GPU 1.
  const std::string log = daemon.Log();
  CHECK(TuneStartsOn(log, 1) == 1);
  CHECK(TuneStartsOn(log, 0) + TuneStartsOn(log, 2) == 1);

  // Each kind has its own entry: GPU 2 is an A, so it is answered by A's.
  v1::GetConfigRequest get;
  *get.mutable_problem() = RmsProblem(256, 1024);
  get.set_policy(v1::CACHED_ONLY);
  get.mutable_device()->set_gpu(2);
  auto on_gpu2 = daemon.NewClient()->GetConfig(get);
  REQUIRE(on_gpu2.ok());
  CHECK(on_gpu2->source() == v1::TUNED);
  CHECK(on_gpu2->device().name() == kA);
  CHECK(on_gpu2->measurement().time_us() == tuned_a->measurement().time_us());
  get.mutable_device()->set_name(kB);
  auto on_b = daemon.NewClient()->GetConfig(get);
  REQUIRE(on_b.ok());
  CHECK(on_b->device().name() == kB);

  // A kind this node does not have is an error that names the ones it has.
  get.mutable_device()->set_name("NVIDIA B200");
  auto unknown = daemon.NewClient()->GetConfig(get);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(unknown.status().message()).find(kB) != std::string::npos);
  get.mutable_device()->set_gpu(7);
  auto no_gpu = daemon.NewClient()->GetConfig(get);
  CHECK(no_gpu.status().code() == absl::StatusCode::kInvalidArgument);

  // The CLI selects a kind by name or by GPU ordinal.
  const std::string cli = std::string(KTUNE_CLI_PATH) + " --server " + daemon.address();
  auto by_gpu = RunCommand(cli + " get rmsnorm.fwd --m 256 --n 1024 --policy cached --gpu 1", dir.path());
  CHECK(by_gpu.exit_code == 0);
  CHECK(by_gpu.out.find(kB) != std::string::npos);
  auto status_out = RunCommand(cli + " status", dir.path());
  CHECK(status_out.out.find("gpu kinds") != std::string::npos);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a prewarm covers every GPU kind of a server", "[e2e][gpus]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFakeDeviceEnv, "KTUNE_WORKER_FAKE_DEVICE_COUNT=2", "KTUNE_WORKER_FAKE_DEVICE_NAME=A,B"}));
  PrewarmOptions options;
  options.call_timeout_s = 120;
  const std::vector<PrewarmProblem> problems = Problems(2, 1024);
  PrewarmReport report = Prewarm(problems, {daemon.address()}, options, nullptr);
  CHECK(report.complete());
  // Each problem once per kind.
  CHECK(report.count(PrewarmOutcome::kTuned) == 4);
  REQUIRE(report.servers.size() == 1);
  const std::string& kinds = report.servers[0].kind;
  CHECK(kinds.find("ktune fake device (tests only) A") < kinds.find(" + "));
  CHECK(kinds.find("ktune fake device (tests only) B") > kinds.find(" + "));
  v1::GetConfigRequest get;
  *get.mutable_problem() = RmsProblem(128, 1024);
  get.set_policy(v1::CACHED_ONLY);
  get.mutable_device()->set_name("ktune fake device (tests only) B");
  auto b = daemon.NewClient()->GetConfig(get);
  REQUIRE(b.ok());
  CHECK(b->source() == v1::TUNED);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("bad --gpus exits 2 with what is wrong, and leaves no database", "[e2e][gpus]") {
  TempDir dir;
  const std::string ktuned = testing::KtunedPath() + " --listen unix:" + dir.path() + "/s.sock --db " + dir.path() +
                             "/cache.db --kernel-cache-dir " + dir.path() + "/k ";
  auto bad = RunCommand(ktuned + "--gpus two", dir.path());
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--gpus two: expected all, a count (4) or GPU ordinals (0,2,5)") != std::string::npos);
  auto missing = RunCommand("env KTUNE_WORKER_FAKE_DEVICE=1 KTUNE_WORKER_FAKE_DEVICE_COUNT=2 " + ktuned + "--gpus 1,4",
                            dir.path());
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("--gpus 1,4: no GPU 4 on this node, which has 2 GPU(s)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/cache.db"));
}

}  // namespace
}  // namespace ktune
