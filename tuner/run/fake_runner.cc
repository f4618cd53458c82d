#include "tuner/run/fake_runner.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "tuner/gpu/cublaslt.h"

namespace ktune {
namespace {

constexpr double kFakeFlopsPerUs = 500e6;  // the fake device's rate: 500 TFLOP/s

class FakeRunner final : public ProblemRunner {
 public:
  FakeRunner(const DeviceInfo& device, const FakeWork& work)
      : arch_(Arch(device)), work_us_(work.flops / kFakeFlopsPerUs), library_candidates_(work.library_candidates) {}

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
    // 10-20 us, or for long work its time at the fake rate, up to 10% more.
    t.median_us = std::max(1.0, work_us_ / 10) * (10.0 + static_cast<double>(h % 1000) / 100.0);
    t.p10_us = t.median_us * 0.99;
    t.p90_us = t.median_us * 1.01;
    t.spread = 0.02;
    t.repetitions = options.repetitions;
    return t;
  }

  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override {
    std::vector<LaunchRecipe> out;
    for (int i = 0; i < std::min(max, library_candidates_); ++i) {
      CublasLtAlgo a;
      a.data = std::string(64, static_cast<char>('a' + i));
      out.push_back(CublasLtRecipe(a, 130100));
      out.back().arch = arch_;
    }
    return out;
  }

 private:
  const std::string arch_;
  const double work_us_;
  const int library_candidates_;
};

}  // namespace

std::unique_ptr<ProblemRunner> NewFakeRunner(const DeviceInfo& device, const FakeWork& work) {
  return std::make_unique<FakeRunner>(device, work);
}

}  // namespace ktune
