#include "tuner/problem_runners.h"

#include "tuner/builtin_ops.h"

namespace ktune {

absl::StatusOr<std::unique_ptr<ProblemRunner>> NewProblemRunner(const v1::Problem& problem, Device* device,
                                                                uint64_t seed, RunnerLibraries* libraries) {
  absl::StatusOr<const Op*> op = BuiltinOps().ForProblem(problem);
  if (!op.ok()) return op.status();
  return (*op)->NewRunner(problem, device, seed, libraries);
}

absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeProblemRunner(const v1::Problem& problem,
                                                                    const DeviceInfo& device) {
  absl::StatusOr<const Op*> op = BuiltinOps().ForProblem(problem);
  if (!op.ok()) return op.status();
  return (*op)->NewFakeRunner(problem, device);
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
