// The service's metric families (Prometheus names, help, every label value
// exported from the start at 0) and the few calls that update them: one
// answer of GetConfig (CountAnswer: two atomic updates through handles
// resolved at construction, the hit path's whole cost), one finished tune
// (CountTune), one quarantined candidate, and the gauges refreshed before a
// scrape or a GetStatus (RefreshGauges). The values are read by /metrics,
// GetStatus.metrics and `ktune status`.
// Thread-safe: Metrics is; nothing else is held.
#pragma once

#include <array>
#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "cache/store.h"
#include "daemon/gpus.h"
#include "daemon/metrics.h"
#include "daemon/tune_queue.h"
#include "tuner/op.h"

namespace ktune {

// How a GetConfig was answered: its label answer="..." on
// ktune_getconfig_total and ktune_getconfig_seconds.
enum class GetConfigAnswer { kHit, kHeuristic, kNearest, kTuned, kNotFound, kRefused, kCancelled, kError };

class ServiceMetrics {
 public:
  // Declares every family; ktune_entries has one label value per entry op of
  // `ops` (not owned, outliving this).
  ServiceMetrics(const OpRegistry& ops, bool compile_only);

  Metrics* metrics() { return &metrics_; }

  // Counts one answer and observes its latency since `start`.
  void CountAnswer(GetConfigAnswer answer, std::chrono::steady_clock::time_point start);
  // A finished tune: its result's counters when ok, else the failure (also
  // logged, with `key`).
  void CountTune(const std::string& key, const absl::StatusOr<OpTuneResult>& result);
  void CountQuarantine(const std::string& reason);
  void AddCompileSeconds(double seconds);
  // The queue's gauges and counters, and the entries per op the store counts.
  void RefreshGauges(const TuneQueue::Stats& queue, Store* store);
  // Per GPU (label device="ORDINAL"): busy or idle, worker restarts.
  void RefreshGpuGauges(const std::vector<GpuState>& gpus);

 private:
  static constexpr int kAnswerKinds = 8;
  struct AnswerMetrics {
    Metrics::Sample* total = nullptr;
    Metrics::Histogram* seconds = nullptr;
  };

  const OpRegistry& ops_;
  Metrics metrics_;
  std::array<AnswerMetrics, kAnswerKinds> answer_metrics_;  // by GetConfigAnswer
};

}  // namespace ktune
