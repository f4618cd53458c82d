// The tuning engine end to end on machines without a GPU: a real ktuned whose
// worker stands in a fake device (KTUNE_WORKER_FAKE_DEVICE=1: every candidate
// verifies, timings are made up from the kernel's name) so that the queue,
// the worker's isolation, quarantine, the kernel cache and winner stability
// run for real in CI. tests/gpu repeats what matters on the H200.
#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/daemon_process.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/norm/norm_space.h"
#include "tuner/run/worker.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

constexpr char kFake[] = "KTUNE_WORKER_FAKE_DEVICE=1";

v1::Problem Rms(int64_t m, int64_t n) {
  NormProblem p;
  p.m = m;
  p.n = n;
  v1::Problem out;
  *out.mutable_norm() = NormProblemToProto(p);
  return out;
}

double Metric(DaemonProcess& daemon, const std::string& name) {
  auto status = daemon.NewClient()->GetStatus();
  REQUIRE(status.ok());
  auto it = status->metrics().find(name);
  return it == status->metrics().end() ? 0 : it->second;
}

// The name expression of one candidate of `problem` on the fake device.
std::string SomeCandidate(int64_t m, int64_t n, int index) {
  NormProblem p;
  p.m = m;
  p.n = n;
  const std::vector<NormConfig> space = NormSearchSpace(p, FakeWorkerDevice());
  REQUIRE(static_cast<int>(space.size()) > index + 1);
  auto recipe = NormLaunchRecipe(p, space[index], FakeWorkerDevice());
  REQUIRE(recipe.ok());
  return recipe->kernels[0].name_expression;
}

struct StreamedTune {
  absl::StatusOr<v1::GetConfigResponse> result = absl::UnknownError("unset");
  std::multiset<std::string> candidate_statuses;
  std::vector<std::string> progress;  // progress messages, in order
};

StreamedTune TuneStreamed(DaemonProcess& daemon, const v1::Problem& problem, bool force) {
  StreamedTune out;
  v1::TuneRequest request;
  *request.mutable_problem() = problem;
  request.mutable_options()->set_force(force);
  out.result = daemon.NewClient()->Tune(request, [&](const v1::TuneEvent& e) {
    if (e.has_candidate()) out.candidate_statuses.insert(e.candidate().status());
    if (e.has_progress() && !e.progress().message().empty()) out.progress.push_back(e.progress().message());
  });
  return out;
}

TEST_CASE("32 concurrent TUNE_ON_MISS callers of one key run one job", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFake}));
  v1::GetConfigRequest request;
  *request.mutable_problem() = Rms(4096, 4096);
  request.set_policy(v1::TUNE_ON_MISS);
  const auto answers = testing::ConcurrentGetConfig(daemon, request, 32);
  for (const auto& a : answers) {
    REQUIRE(a.ok());
    CHECK(a->source() == v1::TUNED);
    CHECK(a->config().SerializeAsString() == answers[0]->config().SerializeAsString());
    CHECK(a->measurement().time_us() == answers[0]->measurement().time_us());
  }
  CHECK(Metric(daemon, "ktune_tunes_total{result=\"ok\"}") == 1);
  // Each caller's answer is counted once it is sent.
  CHECK(Metric(daemon, "ktune_getconfig_total{answer=\"tuned\"}") == 32);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a heuristic answer queues a background tune, after which the same call is TUNED", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFake}));
  auto client = daemon.NewClient();
  v1::GetConfigRequest request;
  *request.mutable_problem() = Rms(1000, 3000);
  request.set_policy(v1::HEURISTIC_ON_MISS);
  auto first = client->GetConfig(request);
  REQUIRE(first.ok());
  CHECK(first->source() == v1::HEURISTIC);
  CHECK(first->tune_queued());
  absl::StatusOr<v1::GetConfigResponse> later = absl::UnknownError("unset");
  for (int i = 0; i < 300; ++i) {
    later = client->GetConfig(request);
    if (later.ok() && later->source() == v1::TUNED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(later.ok());
  CHECK(later->source() == v1::TUNED);
  CHECK_FALSE(later->tune_queued());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a candidate that crashes its worker is quarantined, then the tune and the daemon go on", "[e2e][tuning]") {
  TempDir dir;
  const std::string crashing = SomeCandidate(2048, 4096, 1);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFake, "KTUNE_WORKER_FAULT=crash:" + crashing}));

  StreamedTune first = TuneStreamed(daemon, Rms(2048, 4096), false);
  REQUIRE(first.result.ok());
  CHECK(first.result->source() == v1::TUNED);
  CHECK(first.candidate_statuses.count("fault") == 1);
  CHECK(first.candidate_statuses.count("ok") >= 1);
  CHECK(Metric(daemon, "ktune_quarantined_total{reason=\"fault\"}") == 1);
  CHECK(daemon.Log().find("event=candidate_quarantined") != std::string::npos);

  // The daemon keeps serving, and the quarantine outlives a restart: the
  // candidate is not run again in this environment.
  REQUIRE(daemon.Stop() == 0);
  REQUIRE(daemon.Start({}, {kFake, "KTUNE_WORKER_FAULT=crash:" + crashing}));
  StreamedTune again = TuneStreamed(daemon, Rms(2048, 4096), true);
  REQUIRE(again.result.ok());
  CHECK(again.candidate_statuses.count("quarantined") == 1);
  CHECK(again.candidate_statuses.count("fault") == 0);
  CHECK(again.result->config().SerializeAsString() == first.result->config().SerializeAsString());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a candidate that hangs is cut by the watchdog and quarantined", "[e2e][tuning]") {
  TempDir dir;
  const std::string hanging = SomeCandidate(1024, 2048, 0);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--candidate-timeout", "1"}, {kFake, "KTUNE_WORKER_FAULT=hang:" + hanging}));
  StreamedTune tune = TuneStreamed(daemon, Rms(1024, 2048), false);
  REQUIRE(tune.result.ok());
  CHECK(tune.candidate_statuses.count("timeout") == 1);
  CHECK(Metric(daemon, "ktune_quarantined_total{reason=\"timeout\"}") == 1);
  CHECK(daemon.NewClient()->GetStatus().ok());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("re-tuning compiles nothing, and fresh tunes pick the same winner", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess first(dir.path(), dir.path() + "/one.db");
  REQUIRE(first.Start({}, {kFake}));
  StreamedTune cold = TuneStreamed(first, Rms(8192, 2048), false);
  REQUIRE(cold.result.ok());
  const double compiled = Metric(first, "ktune_candidates_compiled_total");
  CHECK(compiled >= 2);
  StreamedTune warm = TuneStreamed(first, Rms(8192, 2048), true);
  REQUIRE(warm.result.ok());
  CHECK(Metric(first, "ktune_candidates_compiled_total") == compiled);  // nothing new
  CHECK(Metric(first, "ktune_kernel_cache_hits_total") >= compiled);
  REQUIRE(first.Stop() == 0);

  // A second daemon with its own database and the same kernel cache.
  DaemonProcess second(dir.path(), dir.path() + "/two.db");
  REQUIRE(second.Start({}, {kFake}));
  StreamedTune fresh = TuneStreamed(second, Rms(8192, 2048), false);
  REQUIRE(fresh.result.ok());
  CHECK(Metric(second, "ktune_candidates_compiled_total") == 0);
  CHECK(fresh.result->config().SerializeAsString() == cold.result->config().SerializeAsString());
  CHECK(second.Stop() == 0);
}

TEST_CASE("a backward tune also tunes its reduce kernel and answers the geometry it chose", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFake}));
  NormProblem p;
  p.m = 8192;
  p.n = 2048;
  p.pass = NormPass::kBackward;
  v1::Problem problem;
  *problem.mutable_norm() = NormProblemToProto(p);
  StreamedTune tuned = TuneStreamed(daemon, problem, false);
  INFO(tuned.result.status().ToString());
  REQUIRE(tuned.result.ok());
  // The answer's reduce kernel has the chosen (or, for 0, the derived) rows.
  absl::StatusOr<NormConfig> config = NormConfigFromProto(tuned.result->config().norm());
  REQUIRE(config.ok());
  NormConfig derived = *config;
  derived.reduce_rows = 0;
  // The winner's fused kernel with each neighbouring reduce geometry was measured.
  int reduce_variants = 0;
  for (const std::string& m : tuned.progress) reduce_variants += m.find("(reduce kernel)") != std::string::npos;
  CHECK(reduce_variants == static_cast<int>(ReduceRowsCandidates(p, derived).size()));
  CHECK(reduce_variants >= 1);
  auto derived_recipe = NormLaunchRecipe(p, derived, FakeWorkerDevice());
  REQUIRE(derived_recipe.ok());
  const v1::LaunchRecipe& answer = tuned.result->recipe();
  REQUIRE(answer.kernels_size() == 2);
  const uint32_t want =
      config->reduce_rows > 0 ? static_cast<uint32_t>(config->reduce_rows) : derived_recipe->kernels[1].block[1];
  CHECK(answer.kernels(1).block(1) == want);

  // The log says where the tune's time went: preparing, verifying, timing,
  // the last two within the time spent running candidates.
  const std::string log = daemon.Log();
  const size_t done = log.find("event=tune_done key=\"rmsnorm.bwd");
  REQUIRE(done != std::string::npos);
  const std::string line = log.substr(done, log.find('\n', done) - done);
  INFO(line);
  auto seconds = [&](const std::string& name) {
    const size_t at = line.find(" " + name + "=");
    REQUIRE(at != std::string::npos);
    return std::stod(line.substr(at + name.size() + 2));
  };
  const double run = seconds("run_seconds"), verify = seconds("verify_seconds"), time = seconds("time_seconds");
  CHECK(seconds("prepare_seconds") >= 0);
  CHECK(verify > 0);
  CHECK(time > 0);
  CHECK(verify + time <= run + 0.01);  // the log rounds run to 10 ms, the phases to 1

  // `ktune tune --candidates` prints each candidate's outcome as it streams
  // in: every config of the space, and the finalists again when they are
  // re-measured.
  const std::string cli = std::string(KTUNE_CLI_PATH) + " --server " + daemon.address() + " ";
  auto shown = RunCommand(cli + "tune rmsnorm.bwd --m 8192 --n 2048 --force --candidates", dir.path());
  INFO(shown.err);
  REQUIRE(shown.exit_code == 0);
  std::set<std::string> configs;  // the config field of each line
  int not_ok = 0;
  for (const absl::string_view line : absl::StrSplit(shown.err, '\n')) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');  // candidate, config, status, us
    if (fields.size() != 4 || fields[0] != "candidate") continue;
    configs.insert(fields[1]);
    not_ok += fields[2] != "ok" || !(std::stod(fields[3]) > 0);
  }
  const std::vector<NormConfig> space = NormSearchSpace(p, FakeWorkerDevice());
  CHECK(configs.size() == space.size());
  CHECK(not_ok == 0);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("GEMM: tuned over both sources in the worker, stored, kept across a restart, exported and imported",
          "[e2e][tuning][gemm]") {
  TempDir dir;
  DaemonProcess a(dir.path(), dir.path() + "/a.db");
  REQUIRE(a.Start({}, {kFake}));
  v1::GetConfigRequest request;
  v1::GemmProblem* g = request.mutable_problem()->mutable_gemm();
  g->set_m(256);
  g->set_n(512);
  g->set_k(1024);
  g->set_a_dtype(v1::BF16);
  g->set_b_dtype(v1::BF16);
  g->set_b_layout(v1::COL_MAJOR);
  g->set_epilogue(v1::EPILOGUE_BIAS);
  request.set_policy(v1::TUNE_ON_MISS);
  request.set_include_cubin(true);
  auto tuned = a.NewClient()->GetConfig(request);
  INFO(tuned.status().ToString());
  REQUIRE(tuned.ok());
  CHECK(tuned->source() == v1::TUNED);
  CHECK(tuned->measurement().throughput_unit() == "TFLOP/s");
  CHECK_FALSE(tuned->measurement().sustained());  // 10-20 us: interleaved finals decide
  // Either source may win on the fake device; the recipe is that source's.
  if (tuned->config().gemm().has_cublaslt()) {
    CHECK(tuned->recipe().template_id() == "cublaslt");
    CHECK(tuned->recipe().kernels_size() == 0);
    CHECK(tuned->recipe().cublaslt_algo() == tuned->config().gemm().cublaslt().algo());
  } else {
    // One of our templates: the one the config names.
    const v1::GemmConfig& c = tuned->config().gemm();
    REQUIRE((c.has_mma_sync() || c.has_wgmma() || c.has_skinny()));
    CHECK(tuned->recipe().template_id() == (c.has_wgmma()    ? "gemm/gemm_wgmma"
                                            : c.has_skinny() ? "gemm/gemm_skinny"
                                                             : "gemm/gemm_mma"));
    REQUIRE(tuned->recipe().kernels_size() == 1);
    CHECK_FALSE(tuned->recipe().cubin().empty());
  }
  request.set_policy(v1::CACHED_ONLY);
  request.set_include_cubin(false);
  auto hit = a.NewClient()->GetConfig(request);
  REQUIRE(hit.ok());
  CHECK(hit->config().SerializeAsString() == tuned->config().SerializeAsString());
  // A forced re-tune finds every template candidate in the kernel cache.
  const double compiled = Metric(a, "ktune_candidates_compiled_total");
  CHECK(compiled >= 1);
  v1::TuneRequest retune;
  *retune.mutable_problem() = request.problem();
  retune.mutable_options()->set_force(true);
  REQUIRE(a.NewClient()->Tune(retune, nullptr).ok());
  CHECK(Metric(a, "ktune_candidates_compiled_total") == compiled);
  CHECK(Metric(a, "ktune_kernel_cache_hits_total") >= compiled);
  REQUIRE(a.Stop() == 0);

  REQUIRE(a.Start({}, {kFake}));  // the entry survives a restart
  auto kept = a.NewClient()->GetConfig(request);
  REQUIRE(kept.ok());
  CHECK(kept->source() == v1::TUNED);
  v1::ExportBundleRequest only_gemm;
  only_gemm.set_op("gemm");
  auto exported = a.NewClient()->ExportBundle(only_gemm);
  REQUIRE(exported.ok());
  CHECK(exported->entries() == 1);
  TempDir dir_b;  // its own directory: its own socket
  DaemonProcess b(dir_b.path(), dir_b.path() + "/b.db");
  REQUIRE(b.Start({}, {kFake}));
  auto imported = b.NewClient()->ImportBundle(exported->bundle());
  INFO(imported.status().ToString());
  REQUIRE(imported.ok());
  auto on_b = b.NewClient()->GetConfig(request);
  REQUIRE(on_b.ok());
  CHECK(on_b->config().SerializeAsString() == tuned->config().SerializeAsString());
  CHECK(a.Stop() == 0);
  CHECK(b.Stop() == 0);
}

TEST_CASE("GEMM: a large problem's answer is picked and stored by the sustained finals", "[e2e][tuning][gemm]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/d.db");
  REQUIRE(daemon.Start({}, {kFake}));
  v1::GetConfigRequest request;
  // K not a whole number of 16-byte rows: no template serves it, so the
  // fake cuBLASLt algorithms compete alone and nothing is compiled. At the
  // fake device's 500 TFLOP/s it takes over 2 ms.
  *request.mutable_problem()->mutable_gemm() = Fp8Gemm(8192, 8192, 8200);
  request.set_policy(v1::TUNE_ON_MISS);
  auto tuned = daemon.NewClient()->GetConfig(request);
  INFO(tuned.status().ToString());
  REQUIRE(tuned.ok());
  CHECK(tuned->source() == v1::TUNED);
  CHECK(tuned->config().gemm().has_cublaslt());
  CHECK(tuned->measurement().sustained());
  CHECK(tuned->measurement().time_us() > 2000);
  // Stored so: the cached answer says the same.
  request.set_policy(v1::CACHED_ONLY);
  auto hit = daemon.NewClient()->GetConfig(request);
  REQUIRE(hit.ok());
  CHECK(hit->measurement().sustained());
  CHECK(hit->measurement().time_us() == tuned->measurement().time_us());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("GEMM: a candidate that crashes its worker is quarantined and not run again after a restart",
          "[e2e][tuning][gemm]") {
  TempDir dir;
  v1::Problem problem;
  v1::GemmProblem* g = problem.mutable_gemm();
  g->set_m(128);
  g->set_n(256);
  g->set_k(512);
  g->set_a_dtype(v1::BF16);
  g->set_b_dtype(v1::BF16);
  g->set_b_layout(v1::COL_MAJOR);
  // On the fake sm_90 the wgmma template is this problem's template source.
  const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(*g, FakeWorkerDevice());
  REQUIRE(space.size() >= 2);
  auto victim = WgmmaLaunchRecipe(*g, space[1], FakeWorkerDevice());
  REQUIRE(victim.ok());
  const std::string crash = "KTUNE_WORKER_FAULT=crash:" + victim->kernels[0].name_expression;
  const std::string victim_line = "wgmma " + ToString(space[1]) + ": ";
  auto said = [&](const StreamedTune& t, const std::string& status) {
    int n = 0;
    for (const std::string& m : t.progress) n += m.rfind(victim_line + status, 0) == 0;
    return n;
  };
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFake, crash}));
  StreamedTune first = TuneStreamed(daemon, problem, false);
  INFO(first.result.status().ToString());
  REQUIRE(first.result.ok());
  CHECK(first.result->source() == v1::TUNED);
  CHECK(said(first, "fault") == 1);
  CHECK(Metric(daemon, "ktune_quarantined_total{reason=\"fault\"}") == 1);
  REQUIRE(daemon.Stop() == 0);

  REQUIRE(daemon.Start({}, {kFake, crash}));
  StreamedTune again = TuneStreamed(daemon, problem, true);
  REQUIRE(again.result.ok());
  CHECK(said(again, "quarantined") == 1);
  CHECK(said(again, "fault") == 0);
  CHECK(Metric(daemon, "ktune_quarantined_total{reason=\"fault\"}") == 0);  // nothing new this run
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("coordinate descent measures fewer candidates than the grid", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess grid(dir.path(), dir.path() + "/grid.db");
  REQUIRE(grid.Start({}, {kFake}));
  REQUIRE(TuneStreamed(grid, Rms(16384, 4096), false).result.ok());
  const double grid_runs = Metric(grid, "ktune_candidates_total{status=\"ok\"}");
  REQUIRE(grid.Stop() == 0);

  DaemonProcess descent(dir.path(), dir.path() + "/descent.db");
  REQUIRE(descent.Start({"--search", "descent", "--search-max-candidates", "8"}, {kFake}));
  StreamedTune tune = TuneStreamed(descent, Rms(16384, 4096), false);
  REQUIRE(tune.result.ok());
  const double descent_runs = Metric(descent, "ktune_candidates_total{status=\"ok\"}");
  CHECK(descent_runs <= 8);
  CHECK(descent_runs < grid_runs);
  CHECK(descent.Stop() == 0);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("a full queue says so, and tunes every caller abandoned are dropped or stopped", "[e2e][tuning]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  // Every RMSNorm forward candidate hangs until the 2 s watchdog: tunes are slow.
  REQUIRE(daemon.Start({"--max-queued-tunes", "1", "--candidate-timeout", "2"},
                       {kFake, "KTUNE_WORKER_FAULT=hang:ktune::rmsnorm_fwd"}));
  auto ask = [&](int64_t m, double timeout_s) {
    v1::GetConfigRequest request;
    *request.mutable_problem() = Rms(m, 1024);
    request.set_policy(v1::TUNE_ON_MISS);
    return Client::Create(daemon.address(), timeout_s)->GetConfig(request);
  };
  absl::StatusOr<v1::GetConfigResponse> first = absl::UnknownError("unset");
  absl::StatusOr<v1::GetConfigResponse> second = absl::UnknownError("unset");
  // Each step waits for the daemon to report the state it needs (fixed sleeps
  // raced on a loaded 2-core CI machine).
  auto await_metric = [&](const std::string& name, double value) {
    for (int i = 0; i < 200 && Metric(daemon, name) != value; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    CHECK(Metric(daemon, name) == value);  // CHECK: a throw here would leave a thread joinable
  };
  std::thread running([&] { first = ask(1000, 3); });  // the job that runs
  await_metric("ktune_tunes_running", 1);
  std::thread queued([&] { second = ask(2000, 2); });  // the one queued behind it
  await_metric("ktune_tune_queue_depth", 1);
  auto refused = ask(3000, 5);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.status().message().find("queue is full") != std::string::npos);
  running.join();
  queued.join();
  CHECK(first.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(second.status().code() == absl::StatusCode::kDeadlineExceeded);

  // Both callers left: the queued job was dropped and the running one stops
  // at its next candidate.
  double cancelled_tunes = 0;
  for (int i = 0; i < 100 && cancelled_tunes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancelled_tunes = Metric(daemon, "ktune_tunes_total{result=\"cancelled\"}");
  }
  CHECK(cancelled_tunes == 1);
  CHECK(Metric(daemon, "ktune_tune_jobs_cancelled_total") == 2);
  CHECK(Metric(daemon, "ktune_tune_jobs_rejected_total") == 1);
  CHECK(Metric(daemon, "ktune_tunes_total{result=\"ok\"}") == 0);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
