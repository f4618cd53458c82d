#include "tuner/executor.h"

namespace ktune {
namespace {

class InProcessExecutor final : public CandidateExecutor {
 public:
  InProcessExecutor(Device* device, uint64_t seed) : device_(device), seed_(seed) {}

  const DeviceInfo& device() const override { return device_->info(); }

  absl::Status Prepare(const NormProblem& problem) override {
    runner_.reset();  // free the previous problem's buffers first
    absl::StatusOr<std::unique_ptr<NormRunner>> runner = NormRunner::Create(problem, device_, seed_);
    if (!runner.ok()) return runner.status();
    runner_ = *std::move(runner);
    return absl::OkStatus();
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
  Device* const device_;
  const uint64_t seed_;
  std::unique_ptr<NormRunner> runner_;
};

}  // namespace

std::unique_ptr<CandidateExecutor> NewInProcessExecutor(Device* device, uint64_t seed) {
  return std::make_unique<InProcessExecutor>(device, seed);
}

}  // namespace ktune
