// The measurement protocol without a GPU: percentiles, the rotation count,
// and Measure's warm-up / rotation / repetition sequence against a fake Device.
#include "tuner/run/measure.h"

#include <catch2/catch.hpp>
#include <vector>

namespace ktune {
namespace {

TEST_CASE("Summarize reports median, p10, p90 and spread in microseconds", "[tuner][measure]") {
  SECTION("ten samples, unsorted") {
    const Timing t = Summarize({7, 1, 10, 3, 5, 2, 9, 4, 8, 6});  // ms
    CHECK(t.repetitions == 10);
    CHECK(t.median_us == Approx(5500));
    CHECK(t.p10_us == Approx(1900));  // rank 0.9 between 1 and 2 ms
    CHECK(t.p90_us == Approx(9100));  // rank 8.1 between 9 and 10 ms
    CHECK(t.spread == Approx((9100.0 - 1900.0) / 5500.0));
  }
  SECTION("odd count: the middle sample") {
    const Timing t = Summarize({0.030f, 0.010f, 0.020f});
    CHECK(t.median_us == Approx(20));
    CHECK(t.p10_us == Approx(12));
    CHECK(t.p90_us == Approx(28));
  }
  SECTION("one sample has no spread") {
    const Timing t = Summarize({0.25f});
    CHECK(t.median_us == Approx(250));
    CHECK(t.p10_us == Approx(250));
    CHECK(t.p90_us == Approx(250));
    CHECK(t.spread == 0);
  }
  SECTION("no samples") {
    const Timing t = Summarize({});
    CHECK(t.repetitions == 0);
    CHECK(t.median_us == 0);
  }
}

TEST_CASE("RotationCount moves at least three times the L2 per sweep", "[tuner][measure]") {
  DeviceInfo d;
  d.l2_bytes = 50 << 20;
  CHECK(RotationCount(d, int64_t{1} << 30) == 1);    // one set is 20x L2
  CHECK(RotationCount(d, int64_t{150} << 20) == 1);  // exactly 3x
  CHECK(RotationCount(d, int64_t{64} << 20) == 3);   // ceil(150 / 64)
  CHECK(RotationCount(d, int64_t{32} << 20) == 5);   // ceil(150 / 32)
  CHECK(RotationCount(d, 1024) == 64);               // capped
  CHECK(RotationCount(d, 0) == 1);
  d.l2_bytes = 0;
  CHECK(RotationCount(d, 1024) == 1);  // unknown L2: nothing to defeat
}

// Records the sets launched and answers TimeEach with fixed samples.
class FakeDevice : public Device {
 public:
  const DeviceInfo& info() const override { return info_; }
  absl::StatusOr<DevicePtr> Alloc(size_t) override { return DevicePtr{0}; }
  void Free(DevicePtr) override {}
  absl::Status CopyToDevice(DevicePtr, const void*, size_t) override { return absl::OkStatus(); }
  absl::Status CopyToHost(void*, DevicePtr, size_t) override { return absl::OkStatus(); }
  absl::Status Fill(DevicePtr, uint8_t, size_t) override { return absl::OkStatus(); }
  absl::StatusOr<LoadedKernel> LoadKernel(const std::string&, const std::string&) override { return LoadedKernel{}; }
  void UnloadKernel(const LoadedKernel&) override {}
  absl::Status Launch(const LoadedKernel&, const KernelLaunch&, void**) override { return absl::OkStatus(); }
  absl::Status Synchronize() override {
    ++syncs;
    return absl::OkStatus();
  }
  void* stream() const override { return nullptr; }
  absl::StatusOr<std::vector<float>> TimeEach(const std::function<absl::Status(int)>& launch,
                                              int repetitions) override {
    timed_from = static_cast<int>(launched.size());
    std::vector<float> ms;
    for (int i = 0; i < repetitions; ++i) {
      if (absl::Status s = launch(i); !s.ok()) return s;
      ms.push_back(sample_ms);
    }
    return ms;
  }

  // Unless `replay_status` is an error: records the capture (the launches made
  // inside it) and answers each replay with replay_ms / per_replay.
  absl::StatusOr<std::vector<float>> TimeReplays(const std::function<absl::Status(int)>& launch, int per_replay,
                                                 int repetitions) override {
    ++replays;
    if (!replay_status.ok()) return replay_status;
    captured.clear();
    for (int i = 0; i < per_replay; ++i) {
      const size_t before = launched.size();
      if (absl::Status s = launch(i); !s.ok()) return s;
      for (size_t j = before; j < launched.size(); ++j) captured.push_back(launched[j]);
    }
    return std::vector<float>(static_cast<size_t>(repetitions), replay_ms / static_cast<float>(per_replay));
  }

  DeviceInfo info_;
  std::vector<int> launched;
  int timed_from = -1;
  int syncs = 0;
  float sample_ms = 0.01f;
  absl::Status replay_status = absl::UnimplementedError("no graphs");
  int replays = 0;
  std::vector<int> captured;
  float replay_ms = 0.1f;
};

TEST_CASE("Measure warms up, rotates input sets and times every repetition", "[tuner][measure]") {
  FakeDevice device;
  auto launch = [&](int set) {
    device.launched.push_back(set);
    return absl::OkStatus();
  };
  MeasureOptions options;
  options.warmup = 2;
  options.repetitions = 20;

  absl::StatusOr<Timing> t = Measure(&device, launch, 3, options);
  REQUIRE(t.ok());
  CHECK(t->repetitions == 20);
  CHECK(t->median_us == Approx(10));
  // Warm-up covers every set at least once (3 > warmup 2), then 20 timed.
  REQUIRE(device.timed_from == 3);
  REQUIRE(device.launched.size() == 23);
  CHECK(std::vector<int>(device.launched.begin(), device.launched.begin() + 3) == std::vector<int>{0, 1, 2});
  for (int i = 0; i < 20; ++i) CHECK(device.launched[3 + i] == i % 3);
  CHECK(device.syncs >= 1);
}

TEST_CASE("Measure refuses too few repetitions and passes launch errors on", "[tuner][measure]") {
  FakeDevice device;
  MeasureOptions options;
  options.repetitions = 5;
  CHECK(Measure(
            &device, [](int) { return absl::OkStatus(); }, 1, options)
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
  options.repetitions = 20;
  CHECK(Measure(
            &device, [](int) { return absl::OkStatus(); }, 0, options)
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(Measure(
            &device, [](int) { return absl::AbortedError("fault"); }, 1, options)
            .status()
            .code() == absl::StatusCode::kAborted);
  device.sample_ms = -1;
  CHECK_FALSE(Measure(
                  &device, [](int) { return absl::OkStatus(); }, 1, options)
                  .ok());
}

TEST_CASE("a latency-bound kernel is timed from graph replays of whole sweeps over the sets", "[tuner][measure]") {
  FakeDevice device;
  device.replay_status = absl::OkStatus();
  device.sample_ms = 0.007f;  // 7 us by events: under the 20 us threshold
  device.replay_ms = 0.1f;    // each replay of the graph: 100 us
  auto launch = [&](int set) {
    device.launched.push_back(set);
    return absl::OkStatus();
  };
  MeasureOptions options;
  options.repetitions = 20;

  absl::StatusOr<Timing> t = Measure(&device, launch, 3, options);
  REQUIRE(t.ok());
  CHECK(device.replays == 1);
  // ceil(400 us / 7 us / 3 sets) = 20 sweeps of 3 sets: 60 launches a replay.
  CHECK(ReplayLength(7.0, 3) == 60);
  CHECK(t->launches_per_sample == 60);
  CHECK(t->median_us == Approx(100.0 / 60));  // the replay's time per launch, not the events' 7 us
  CHECK(t->repetitions == 20);
  REQUIRE(device.captured.size() == 60);
  for (int i = 0; i < 60; ++i) CHECK(device.captured[static_cast<size_t>(i)] == i % 3);

  SECTION("above the threshold, or with replays turned off, events stand") {
    device.sample_ms = 0.025f;
    absl::StatusOr<Timing> slow = Measure(&device, launch, 3, options);
    REQUIRE(slow.ok());
    CHECK(slow->median_us == Approx(25));
    CHECK(slow->launches_per_sample == 1);
    device.sample_ms = 0.007f;
    options.replay_below_us = 0;
    absl::StatusOr<Timing> off = Measure(&device, launch, 3, options);
    REQUIRE(off.ok());
    CHECK(off->median_us == Approx(7));
    CHECK(device.replays == 1);  // neither measurement asked for replays
  }
  SECTION("a device that cannot replay, or a capture that missed a launch, leaves the events' timing") {
    for (absl::Status why : {absl::UnimplementedError("no graphs"), absl::FailedPreconditionError("2 nodes")}) {
      device.replay_status = why;
      absl::StatusOr<Timing> events = Measure(&device, launch, 3, options);
      REQUIRE(events.ok());
      CHECK(events->median_us == Approx(7));
      CHECK(events->launches_per_sample == 1);
    }
  }
  SECTION("a fault while replaying is returned") {
    device.replay_status = absl::AbortedError("illegal address");
    CHECK(Measure(&device, launch, 3, options).status().code() == absl::StatusCode::kAborted);
  }
}

TEST_CASE("a replay is whole sweeps over the sets, about 400 us of events' time", "[tuner][measure]") {
  CHECK(ReplayLength(4.0, 1) == 100);
  CHECK(ReplayLength(4.0, 64) == 128);  // 400 / 4 / 64 rounds up to 2 sweeps
  CHECK(ReplayLength(19.0, 64) == 64);  // at least one sweep
  CHECK(ReplayLength(0.0, 1) == 800);   // a zero median reads as 0.5 us
  CHECK(ReplayLength(0.1, 1) == 800);
  CHECK(ReplayLength(0.5, 3) == 801);      // 267 sweeps of 3
  CHECK(ReplayLength(2.0, 2000) == 2000);  // a sweep longer than the cap is still one sweep
  CHECK(ReplayLength(2.0, 0) == 200);      // no rotation reads as one set
}

TEST_CASE("the tie window is the best's variability, held between 1% and 3% of its median", "[tuner][measure]") {
  CHECK(TieWindowUs(0.02, 100) == Approx(2.0));   // inside the bounds: as measured
  CHECK(TieWindowUs(0.001, 100) == Approx(1.0));  // a steady best still ties within 1%
  CHECK(TieWindowUs(0.10, 100) == Approx(3.0));   // a noisy one no wider than 3%
  CHECK(TieWindowUs(0.10, 40) == Approx(1.2));    // in microseconds of the median given
}

}  // namespace
}  // namespace ktune
