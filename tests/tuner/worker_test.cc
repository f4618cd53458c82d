// The worker process and its daemon-side executor: crashes and hangs of a
// candidate are contained, reported, and the next candidate runs. Uses the
// worker's fake device (no GPU here); tests/gpu proves the same on the H200
// with kernels that really fault.
#include "tuner/run/worker.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "tests/tuner/gemm_test_problems.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_tuner.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/problem_runners.h"

namespace ktune {
namespace {

LaunchRecipe Candidate(const std::string& expression) {
  LaunchRecipe r;
  r.template_id = "norm/rmsnorm_fwd";
  r.template_hash = std::string(64, 'a');
  r.arch = "sm_90";
  KernelLaunch k;
  k.name_expression = expression;
  k.lowered_name = "_Z" + expression;
  k.grid = {1, 1, 1};
  k.block = {32, 1, 1};
  r.kernels.push_back(k);
  r.cubin =
      "\x7f"
      "ELF fake cubin";
  return r;
}

NormProblem Problem() {
  NormProblem p;
  p.m = 64;
  p.n = 128;
  return p;
}

WorkerOptions FakeWorker(std::vector<std::string> env = {}) {
  WorkerOptions o;
  o.executable = KTUNED_PATH;
  o.extra_env = std::move(env);
  o.extra_env.push_back("KTUNE_WORKER_FAKE_DEVICE=1");
  o.candidate_timeout_s = 2;
  return o;
}

TEST_CASE("a worker runs candidates out of process", "[tuner][worker]") {
  auto worker = WorkerExecutor::Start(FakeWorker());
  REQUIRE(worker.ok());
  CHECK((*worker)->device().name == "ktune fake device (tests only)");
  CHECK((*worker)->pid() > 0);
  REQUIRE((*worker)->Prepare(ProblemOf(Problem())).ok());
  auto v = (*worker)->Verify(Candidate("good<1>"));
  REQUIRE(v.ok());
  CHECK(v->ok);
  MeasureOptions options;
  options.repetitions = 25;
  auto t = (*worker)->Time(Candidate("good<1>"), options);
  REQUIRE(t.ok());
  CHECK(t->median_us > 0);
  CHECK(t->repetitions == 25);
  CHECK((*worker)->restarts() == 0);
}

TEST_CASE("a candidate that crashes the worker fails alone", "[tuner][worker]") {
  auto worker = WorkerExecutor::Start(FakeWorker({"KTUNE_WORKER_FAULT=crash:bad"}));
  REQUIRE(worker.ok());
  REQUIRE((*worker)->Prepare(ProblemOf(Problem())).ok());
  const pid_t first_pid = (*worker)->pid();
  auto crashed = (*worker)->Verify(Candidate("bad<7>"));
  REQUIRE_FALSE(crashed.ok());
  CHECK(crashed.status().code() == absl::StatusCode::kAborted);
  CHECK(crashed.status().message().find("signal 6") != std::string::npos);
  CHECK((*worker)->restarts() == 1);
  CHECK((*worker)->pid() != first_pid);
  // The restarted worker has the problem prepared again and carries on.
  auto next = (*worker)->Verify(Candidate("good<2>"));
  REQUIRE(next.ok());
  CHECK(next->ok);
  auto timed_crash = (*worker)->Time(Candidate("bad<8>"), MeasureOptions());
  CHECK(timed_crash.status().code() == absl::StatusCode::kAborted);
  CHECK((*worker)->restarts() == 2);
}

TEST_CASE("a candidate that hangs is cut by the watchdog", "[tuner][worker]") {
  auto worker = WorkerExecutor::Start(FakeWorker({"KTUNE_WORKER_FAULT=hang:slow"}));
  REQUIRE(worker.ok());
  REQUIRE((*worker)->Prepare(ProblemOf(Problem())).ok());
  const auto start = std::chrono::steady_clock::now();
  auto hung = (*worker)->Verify(Candidate("slow<1>"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(hung.ok());
  CHECK(hung.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(hung.status().message().find("watchdog") != std::string::npos);
  CHECK(waited >= 1.5);
  CHECK(waited < 20);
  auto next = (*worker)->Verify(Candidate("good<3>"));
  REQUIRE(next.ok());
  CHECK(next->ok);
  CHECK((*worker)->restarts() == 1);
}

TEST_CASE("a worker without a GPU says why it cannot run", "[tuner][worker]") {
  WorkerOptions o;
  o.executable = KTUNED_PATH;
  auto worker = WorkerExecutor::Start(o);
  if (worker.ok()) {
    CHECK_FALSE((*worker)->device().name.empty());  // a machine with a GPU
  } else {
    CHECK(worker.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(worker.status().message().find("libcuda") != std::string::npos);
  }
  WorkerOptions missing;
  missing.executable = "/nonexistent/ktuned";
  auto none = WorkerExecutor::Start(missing);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("a worker prepares GEMM problems, lists library (cuBLASLt) candidates and runs both kinds",
          "[tuner][worker][gemm]") {
  auto worker = WorkerExecutor::Start(FakeWorker());
  REQUIRE(worker.ok());
  REQUIRE((*worker)->Prepare(ProblemOf(LinearGemm(256, 256, 256))).ok());
  auto lt = (*worker)->LibraryCandidates(8);
  REQUIRE(lt.ok());
  REQUIRE(lt->size() == 3);  // what the fake device's cuBLASLt offers
  for (const LaunchRecipe& r : *lt) {
    CHECK(r.template_id == kCublasLtTemplateId);
    CHECK(r.cublaslt_algo.size() == 64);
    CHECK(r.kernels.empty());
    auto v = (*worker)->Verify(r);
    REQUIRE(v.ok());
    CHECK(v->ok);
    auto t = (*worker)->Time(r, MeasureOptions());
    REQUIRE(t.ok());
    CHECK(t->median_us > 0);
  }
  auto v = (*worker)->Verify(Candidate("ktune::gemm_mma<1>"));
  REQUIRE(v.ok());
  CHECK(v->ok);
  // A norm problem after a GEMM one: the worker switches back, and no
  // library serves norms.
  REQUIRE((*worker)->Prepare(ProblemOf(Problem())).ok());
  auto none = (*worker)->LibraryCandidates(8);
  REQUIRE(none.ok());
  CHECK(none->empty());
}

TEST_CASE("TuneGemm over a worker: a crashing candidate fails alone and both sources compete",
          "[tuner][worker][gemm][nvrtc]") {
  const v1::GemmProblem p = LinearGemm(256, 256, 256);
  // The fake device is an sm_90: the wgmma template serves this M = 256
  // problem, so it (not mma.sync) is the template source.
  const std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(p, FakeWorkerDevice());
  REQUIRE(space.size() >= 3);
  auto victim = WgmmaLaunchRecipe(p, space[1], FakeWorkerDevice());
  REQUIRE(victim.ok());
  // The crash hook matches a substring of the name expression: the full one.
  auto worker = WorkerExecutor::Start(FakeWorker({"KTUNE_WORKER_FAULT=crash:" + victim->kernels[0].name_expression}));
  REQUIRE(worker.ok());
  GemmTuneOptions options;
  options.measure.repetitions = 20;
  options.final_measure.repetitions = 20;
  auto r = TuneGemm(p, worker->get(), options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->template_candidates == static_cast<int>(space.size()));
  CHECK(r->cublaslt_candidates == 3);
  int failed = 0, ok = 0;
  for (const GemmCandidateOutcome& o : r->outcomes) {
    INFO(o.name << ": " << o.status);
    CHECK(o.name.rfind("mma_sync", 0) != 0);  // not tried where wgmma serves M > 16
    if (o.status == "ok") {
      ++ok;
    } else {
      ++failed;
      CHECK(o.name == "wgmma " + ToString(space[1]));
      CHECK_THAT(o.status, Catch::StartsWith("fault: "));  // a crash: quarantined by the caller
    }
  }
  CHECK(failed == 1);
  CHECK(ok == r->template_candidates + r->cublaslt_candidates - 1);
  CHECK((*worker)->restarts() == 1);
  // cuBLASLt's default and the best template were measured with the finalists.
  REQUIRE(r->cublaslt_default.has_value());
  REQUIRE(r->best_template.has_value());
  CHECK(r->winner_timing.median_us <= r->cublaslt_default->median_us * 1.03);
}

TEST_CASE("TuneGemm tries mma.sync beside wgmma for M <= 16 only, B as [K, N] included",
          "[tuner][worker][gemm][nvrtc]") {
  auto worker = WorkerExecutor::Start(FakeWorker());
  REQUIRE(worker.ok());
  GemmTuneOptions options;
  options.measure.repetitions = 20;
  options.final_measure.repetitions = 20;
  v1::GemmProblem kn = LinearGemm(256, 256, 256);
  kn.set_b_layout(v1::ROW_MAJOR);  // B as [K, N]: wgmma serves it, mma.sync is not tried
  v1::GemmProblem decode = LinearGemm(256, 256, 256);
  decode.set_m(8);  // M <= 16: mma.sync beside the skinny template and wgmma
  const v1::GemmProblem problems[] = {kn, decode};
  for (int i = 0; i < 2; ++i) {
    const v1::GemmProblem& p = problems[i];
    INFO(GemmCanonicalKey(p));
    auto r = TuneGemm(p, worker->get(), options);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    int mma_sync = 0;
    int wgmma = 0;
    for (const GemmCandidateOutcome& o : r->outcomes) {
      mma_sync += o.name.rfind("mma_sync", 0) == 0;
      wgmma += o.name.rfind("wgmma", 0) == 0;
    }
    CHECK(wgmma == static_cast<int>(WgmmaSearchSpace(p, FakeWorkerDevice()).size()));
    if (i == 0) {  // kn
      CHECK(wgmma > 0);
      CHECK(mma_sync == 0);
    } else {
      CHECK(mma_sync == static_cast<int>(GemmSearchSpace(p, FakeWorkerDevice()).size()));
      CHECK(mma_sync > 0);
    }
  }
}

TEST_CASE("a worker's hello says how many GPUs its driver sees, and extra_env overrides the daemon's",
          "[tuner][worker]") {
  {
    auto one = WorkerExecutor::Start(FakeWorker());
    REQUIRE(one.ok());
    CHECK((*one)->device_count() == 1);
  }
  // The daemon's own value is replaced, not shadowed (getenv reads the first).
  setenv("KTUNE_WORKER_FAKE_DEVICE_COUNT", "5", 1);
  auto three = WorkerExecutor::Start(FakeWorker({"KTUNE_WORKER_FAKE_DEVICE_COUNT=3"}));
  unsetenv("KTUNE_WORKER_FAKE_DEVICE_COUNT");
  REQUIRE(three.ok());
  CHECK((*three)->device_count() == 3);
}

TEST_CASE("a fake node of mixed GPUs names one kind per ordinal", "[tuner][worker]") {
  auto gpu1 = WorkerExecutor::Start(FakeWorker({"KTUNE_WORKER_FAKE_DEVICE_NAME=A,B", "CUDA_VISIBLE_DEVICES=1"}));
  REQUIRE(gpu1.ok());
  CHECK((*gpu1)->device().name == "ktune fake device (tests only) B");
  auto gpu0 = WorkerExecutor::Start(FakeWorker({"KTUNE_WORKER_FAKE_DEVICE_NAME=A,B", "CUDA_VISIBLE_DEVICES=0"}));
  REQUIRE(gpu0.ok());
  CHECK((*gpu0)->device().name == "ktune fake device (tests only) A");
}

}  // namespace
}  // namespace ktune
