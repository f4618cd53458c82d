// The one measurement protocol, shared by the tuner and bench/:
// warm-up; input sets rotated so that their total exceeds the L2 several times
// (the cache does not flatter small shapes); CUDA events around each launch,
// or, for a kernel of a few microseconds, around replays of a CUDA graph of
// many launches; the median of many repetitions, and the spread stored with it.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/gpu/device.h"

namespace ktune {

struct MeasureOptions {
  int warmup = 5;
  int repetitions = 30;  // >= 20
  // Below this median by events (microseconds), the samples are taken again
  // from graph replays (Device::TimeReplays): events around one launch of a
  // latency-bound kernel time the host's enqueue, the same for every
  // candidate (a 1.4 us kernel read 7.1 us, so the tie-break picked the
  // winner; bench/results/2026-12-07-norm-issue34-h100-03cafc9.md). 0: events only.
  double replay_below_us = 20.0;
};

struct Timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double spread = 0;  // (p90 - p10) / median
  // Combined passes only (CombinePasses): (max - min) / median of the passes'
  // medians, how far the statistic itself moved between passes; 0 otherwise.
  double pass_range = 0;
  int repetitions = 0;
  // Launches each sample spans: 1 by events, the graph's length by replay.
  int launches_per_sample = 1;
};

// How many input sets of `bytes_per_set` to rotate through so that one sweep
// moves at least three times the device's L2 (at least 1, at most 64).
int RotationCount(const DeviceInfo& device, int64_t bytes_per_set);

// Runs `launch(set)` warmup times, then `repetitions` times each timed by
// events, with set = repetition % rotation. `launch` enqueues one kernel run.
// A median under options.replay_below_us is measured again from graph
// replays of whole sweeps over the sets (ReplayLength launches each) and
// those samples are returned, unless the device cannot replay or the capture
// misses a launch (then the events' stand); a fault is returned either way.
absl::StatusOr<Timing> Measure(Device* device, const std::function<absl::Status(int)>& launch, int rotation,
                               const MeasureOptions& options);

// Launches per graph replay for a kernel whose events read `event_median_us`:
// whole sweeps over `rotation` sets, about kReplayTargetUs of events' time
// (so well over it of kernels: events read high), at most kMaxReplayLength.
inline constexpr double kReplayTargetUs = 400.0;
inline constexpr int kMaxReplayLength = 1024;
int ReplayLength(double event_median_us, int rotation);

// Median and percentiles of samples in milliseconds, reported in microseconds.
Timing Summarize(std::vector<float> samples_ms);

// Candidates whose medians are within the tie window of the best are a tie:
// the norm tuner gives it to the earliest in its space's order (so one
// machine keeps giving the same winner), the GEMM tuner to cuBLASLt's
// default (PickGemmWinner). The window is the best's measured variability
// (its spread, or its pass range over combined passes) bounded below by 1%
// and above by 3%: per-launch event timings of a 20 us kernel can spread
// 10%, and a window that wide would pick a kernel measurably slower than
// the best by its median, which is far more precise.
inline constexpr double kMinTieWindow = 0.01;
inline constexpr double kMaxTieWindow = 0.03;

// The tie window in microseconds around a best of `median_us` whose
// variability (a fraction of the median) is `variability`.
double TieWindowUs(double variability, double median_us);

}  // namespace ktune
