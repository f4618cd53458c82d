#include "tuner/problem_runners.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "spdlog/spdlog.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_runner.h"
#include "tuner/norm/norm_runner.h"

namespace ktune {
namespace {

constexpr double kFakeFlopsPerUs = 500e6;  // the fake device's GEMM rate: 500 TFLOP/s

class FakeRunner final : public ProblemRunner {
 public:
  FakeRunner(const DeviceInfo& device, bool gemm, double gemm_us)
      : arch_(Arch(device)), gemm_(gemm), gemm_us_(gemm_us) {}

  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override {
    VerifyResult v;
    v.ok = !recipe.cubin.empty() || !recipe.cublaslt_algo.empty();
    v.detail = v.ok ? "" : "no cubin";
    return v;
  }

  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    size_t h = std::hash<std::string>()(recipe.cublaslt_algo);
    for (const KernelLaunch& k : recipe.kernels) h = h * 31 + std::hash<std::string>()(k.name_expression);
    Timing t;
    // 10-20 us, or for a GEMM long at the fake rate its time up to 10% more:
    // large GEMMs get the tuner's sustained finals on this device too.
    t.median_us = std::max(1.0, gemm_ ? gemm_us_ / 10 : 1.0) * (10.0 + static_cast<double>(h % 1000) / 100.0);
    t.p10_us = t.median_us * 0.99;
    t.p90_us = t.median_us * 1.01;
    t.spread = 0.02;
    t.repetitions = options.repetitions;
    return t;
  }

  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override {
    std::vector<LaunchRecipe> out;
    for (int i = 0; gemm_ && i < std::min(max, 3); ++i) {
      CublasLtAlgo a;
      a.data = std::string(64, static_cast<char>('a' + i));
      out.push_back(CublasLtRecipe(a, 130100));
      out.back().arch = arch_;
    }
    return out;
  }

 private:
  const std::string arch_;
  const bool gemm_;
  const double gemm_us_;  // the GEMM's time at the fake rate
};

}  // namespace

CublasLt* RunnerLibraries::cublaslt() {
  if (!cublaslt_tried_) {  // opened once, on the first GEMM; without it, templates only
    cublaslt_tried_ = true;
    absl::StatusOr<std::unique_ptr<CublasLt>> lt = CublasLt::Open();
    if (lt.ok()) {
      cublaslt_ = *std::move(lt);
    } else {
      spdlog::warn("event=cublaslt_unavailable reason=\"{}\"", std::string(lt.status().message()));
    }
  }
  return cublaslt_.get();
}

absl::StatusOr<std::unique_ptr<ProblemRunner>> NewProblemRunner(const v1::Problem& problem, Device* device,
                                                                uint64_t seed, RunnerLibraries* libraries) {
  switch (problem.kind_case()) {
    case v1::Problem::kNorm:
      return NormProblemRunner(problem.norm(), device, seed);
    case v1::Problem::kGemm:
      return GemmProblemRunner(problem.gemm(), device, libraries->cublaslt(), seed);
    case v1::Problem::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("problem: no norm or GEMM problem set");
}

absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeProblemRunner(const v1::Problem& problem,
                                                                    const DeviceInfo& device) {
  switch (problem.kind_case()) {
    case v1::Problem::kNorm: {
      absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
      if (!norm.ok()) return norm.status();
      return std::unique_ptr<ProblemRunner>(std::make_unique<FakeRunner>(device, /*gemm=*/false, 0.0));
    }
    case v1::Problem::kGemm: {
      if (absl::Status s = ValidateGemmProblem(problem.gemm()); !s.ok()) return s;
      return std::unique_ptr<ProblemRunner>(
          std::make_unique<FakeRunner>(device, /*gemm=*/true, GemmFlops(problem.gemm()) / kFakeFlopsPerUs));
    }
    case v1::Problem::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("problem: no norm or GEMM problem set");
}

std::unique_ptr<CandidateExecutor> NewInProcessExecutor(Device* device, uint64_t seed) {
  auto libraries = std::make_shared<RunnerLibraries>();
  return NewRunnerExecutor(device->info(), [device, seed, libraries](const v1::Problem& problem) {
    return NewProblemRunner(problem, device, seed, libraries.get());
  });
}

WorkerRunners BuiltinWorkerRunners() {
  WorkerRunners runners;
  runners.real = [](Device* device) -> ProblemRunnerFactory {
    auto libraries = std::make_shared<RunnerLibraries>();
    return [device, libraries](const v1::Problem& problem) {
      return NewProblemRunner(problem, device, /*seed=*/1, libraries.get());
    };
  };
  runners.fake = [](const DeviceInfo& fake_device) -> ProblemRunnerFactory {
    return [fake_device](const v1::Problem& problem) { return NewFakeProblemRunner(problem, fake_device); };
  };
  return runners;
}

}  // namespace ktune
