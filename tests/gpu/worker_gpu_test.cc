// Worker isolation on a real GPU: kernels built only into this test fault
// (an illegal address leaves the CUDA context unusable) or hang; each fails
// alone, its worker is restarted, and the next candidate runs normally.
#include <catch2/catch.hpp>
#include <chrono>

#include "tests/e2e/daemon_process.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_space.h"
#include "tuner/problem_runners.h"
#include "tuner/run/worker.h"

namespace ktune {
namespace {

// Same parameters as ktune::rmsnorm_fwd: (x, w, y, rstd, M, N, eps).
constexpr char kMisbehavingKernels[] = R"(
namespace ktune_test {
// Never written: hang() waits for it forever. A global (not a local volatile,
// which the H200 run of 2026-11-29 showed returning at once) so every read
// really goes to memory.
__device__ volatile int release = 0;
__global__ void fault(const void*, const void*, void*, float*, int, int, float) {
  *reinterpret_cast<volatile int*>(0x8) = 1;  // an illegal address
}
__global__ void hang(const void*, const void*, void*, float*, int, int, float) {
  while (release == 0) __nanosleep(1000);
}
}  // namespace ktune_test
)";

LaunchRecipe Misbehaving(const LaunchRecipe& good, const std::string& kernel) {
  LaunchRecipe r = good;
  r.template_id = "tests/misbehaving";
  r.template_hash.clear();
  r.cubin.clear();
  r.kernels[0].name_expression = "ktune_test::" + kernel;
  r.kernels[0].lowered_name.clear();
  CompileResult c = CompileSource(kMisbehavingKernels, &r);
  INFO(c.log);
  REQUIRE(c.ok);
  return r;
}

TEST_CASE("a faulting or hanging kernel takes down only its worker", "[gpu][worker]") {
  WorkerOptions options;
  options.executable = testing::KtunedPath();
  options.candidate_timeout_s = 3;
  auto worker = WorkerExecutor::Start(options);
  REQUIRE(worker.ok());
  NormProblem problem;
  problem.m = 4096;
  problem.n = 4096;
  REQUIRE((*worker)->Prepare(ProblemOf(problem)).ok());

  auto good = NormLaunchRecipe(problem, HeuristicNormConfig(problem, (*worker)->device()), (*worker)->device());
  REQUIRE(good.ok());
  REQUIRE(Compile(&*good).ok);
  auto verified = (*worker)->Verify(*good);
  REQUIRE(verified.ok());
  REQUIRE(verified->ok);

  const pid_t first = (*worker)->pid();
  auto faulted = (*worker)->Verify(Misbehaving(*good, "fault"));
  REQUIRE_FALSE(faulted.ok());
  INFO(faulted.status().ToString());
  CHECK(faulted.status().code() == absl::StatusCode::kAborted);
  CHECK((*worker)->restarts() == 1);
  CHECK((*worker)->pid() != first);
  auto after_fault = (*worker)->Verify(*good);
  REQUIRE(after_fault.ok());
  CHECK(after_fault->ok);
  MeasureOptions measure;
  auto timed = (*worker)->Time(*good, measure);
  REQUIRE(timed.ok());
  CHECK(timed->median_us > 0);

  const auto start = std::chrono::steady_clock::now();
  auto hung = (*worker)->Verify(Misbehaving(*good, "hang"));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(hung.ok());
  CHECK(hung.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(waited < 60);
  CHECK((*worker)->restarts() == 2);
  auto after_hang = (*worker)->Verify(*good);
  REQUIRE(after_hang.ok());
  CHECK(after_hang->ok);
}

}  // namespace
}  // namespace ktune
