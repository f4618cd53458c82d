#include "tuner/run/measure.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

constexpr int kMinRepetitions = 20;
constexpr int kMaxRotation = 64;
constexpr int kL2Multiple = 3;  // one sweep over the input sets moves >= 3x L2

// The q-quantile of sorted samples, linearly interpolated between the two
// nearest ranks (numpy's default), so small sample counts still resolve p10/p90.
double Quantile(const std::vector<float>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (static_cast<double>(sorted[hi]) - sorted[lo]) * frac;
}

absl::Status CheckSamples(const std::vector<float>& samples_ms) {
  for (float ms : samples_ms) {
    if (!std::isfinite(ms) || ms < 0) {
      return absl::InternalError(absl::StrCat("Measure: event timing returned ", ms, " ms"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RotationCount(const DeviceInfo& device, int64_t bytes_per_set) {
  if (bytes_per_set <= 0 || device.l2_bytes <= 0) return 1;
  const int64_t target = int64_t{kL2Multiple} * device.l2_bytes;
  const int64_t sets = (target + bytes_per_set - 1) / bytes_per_set;
  return static_cast<int>(std::clamp<int64_t>(sets, 1, kMaxRotation));
}

Timing Summarize(std::vector<float> samples_ms) {
  Timing t;
  t.repetitions = static_cast<int>(samples_ms.size());
  if (samples_ms.empty()) return t;
  std::sort(samples_ms.begin(), samples_ms.end());
  t.median_us = Quantile(samples_ms, 0.5) * 1000.0;
  t.p10_us = Quantile(samples_ms, 0.1) * 1000.0;
  t.p90_us = Quantile(samples_ms, 0.9) * 1000.0;
  t.spread = t.median_us > 0 ? (t.p90_us - t.p10_us) / t.median_us : 0.0;
  return t;
}

absl::StatusOr<Timing> Measure(Device* device, const std::function<absl::Status(int)>& launch, int rotation,
                               const MeasureOptions& options) {
  if (rotation < 1) return absl::InvalidArgumentError("Measure: rotation must be >= 1");
  if (options.repetitions < kMinRepetitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("Measure: repetitions must be >= ", kMinRepetitions, ", got ", options.repetitions));
  }
  // Warm-up: module load, first-touch and clock ramp stay out of the samples.
  // At least one full sweep, so every input set has been touched once.
  const int warmup = std::max(options.warmup, rotation);
  for (int i = 0; i < warmup; ++i) {
    if (absl::Status s = launch(i % rotation); !s.ok()) return s;
  }
  if (absl::Status s = device->Synchronize(); !s.ok()) return s;
  absl::StatusOr<std::vector<float>> samples =
      device->TimeEach([&](int i) { return launch(i % rotation); }, options.repetitions);
  if (!samples.ok()) return samples.status();
  if (absl::Status s = CheckSamples(*samples); !s.ok()) return s;
  Timing by_events = Summarize(*std::move(samples));
  if (!(by_events.median_us < options.replay_below_us)) return by_events;

  const int length = ReplayLength(by_events.median_us, rotation);
  absl::StatusOr<std::vector<float>> replays =
      device->TimeReplays([&](int i) { return launch(i % rotation); }, length, options.repetitions);
  if (!replays.ok()) {
    // A fault leaves the context unusable: the caller must see it. Anything
    // else (no graphs here, a launch the capture missed) leaves the events'.
    if (absl::IsAborted(replays.status())) return replays.status();
    return by_events;
  }
  if (absl::Status s = CheckSamples(*replays); !s.ok()) return s;
  Timing by_replay = Summarize(*std::move(replays));
  by_replay.launches_per_sample = length;
  return by_replay;
}

int ReplayLength(double event_median_us, int rotation) {
  rotation = std::max(rotation, 1);
  const double per_launch = std::max(event_median_us, 0.5);
  const int sweeps = static_cast<int>(std::ceil(kReplayTargetUs / per_launch / rotation));
  const int max_sweeps = std::max(1, kMaxReplayLength / rotation);
  return rotation * std::clamp(sweeps, 1, max_sweeps);
}

double TieWindowUs(double variability, double median_us) {
  return std::clamp(variability, kMinTieWindow, kMaxTieWindow) * median_us;
}

}  // namespace ktune
