#include "tuner/run/executor.h"

#include <utility>

namespace ktune {
namespace {

class RunnerExecutor final : public CandidateExecutor {
 public:
  RunnerExecutor(const DeviceInfo& device, ProblemRunnerFactory factory)
      : device_(device), factory_(std::move(factory)) {}

  const DeviceInfo& device() const override { return device_; }

  absl::Status Prepare(const v1::Problem& problem) override {
    runner_.reset();  // free the previous problem's buffers first
    absl::StatusOr<std::unique_ptr<ProblemRunner>> runner = factory_(problem);
    if (!runner.ok()) return runner.status();
    runner_ = *std::move(runner);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override {
    if (!runner_) return absl::FailedPreconditionError("LibraryCandidates before Prepare");
    return runner_->LibraryCandidates(max);
  }

  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override {
    if (!runner_) return absl::FailedPreconditionError("Verify before Prepare");
    return runner_->Verify(recipe);
  }

  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override {
    if (!runner_) return absl::FailedPreconditionError("Time before Prepare");
    return runner_->Time(recipe, options);
  }

 private:
  const DeviceInfo device_;
  // Declared before the runner so that what the factory holds (the
  // libraries a runner calls) outlives it: members die in reverse order.
  const ProblemRunnerFactory factory_;
  std::unique_ptr<ProblemRunner> runner_;
};

}  // namespace

std::unique_ptr<CandidateExecutor> NewRunnerExecutor(const DeviceInfo& device, ProblemRunnerFactory factory) {
  return std::make_unique<RunnerExecutor>(device, std::move(factory));
}

}  // namespace ktune
