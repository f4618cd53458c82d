// The daemon's counters and gauges: what GetStatus, `ktune status` and the
// Prometheus endpoint (--metrics-listen) report. Names follow Prometheus
// conventions (`_total` for counters, base units); a sample is a family name
// plus an optional label set, e.g. ktune_candidates_total{status="wrong_answer"}.
// Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ktune {

class Metrics {
 public:
  enum class Kind { kCounter, kGauge };

  // Declares a family; samples of undeclared families are a programming error.
  void Declare(const std::string& family, Kind kind, const std::string& help);
  void Add(const std::string& family, double value, const std::string& label_name = "",
           const std::string& label_value = "");
  void Set(const std::string& family, double value, const std::string& label_name = "",
           const std::string& label_value = "");

  // Every sample as "family" or "family{label=\"value\"}" -> value.
  std::map<std::string, double> Snapshot();
  // The Prometheus text exposition format (version 0.0.4).
  std::string RenderPrometheus();

 private:
  struct Family {
    Kind kind;
    std::string help;
    std::map<std::string, double> samples;  // "" or `label="value"` -> value
  };
  static std::string LabelKey(const std::string& name, const std::string& value);
  void Update(const std::string& family, const std::string& label_name,
              const std::string& label_value, const std::function<void(double&)>& change);

  absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

// Serves `metrics->RenderPrometheus()` at GET /metrics on host:port (plain
// HTTP: bind it to loopback or a cluster-internal address).
class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Binds and starts serving on a thread. INVALID_ARGUMENT for a bad address,
  // UNAVAILABLE if the port cannot be bound.
  absl::Status Start(const std::string& host_port, Metrics* metrics,
                     std::function<void()> refresh);
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ktune
