// The daemon's counters, gauges and histograms: what GetStatus, `ktune status`
// and the Prometheus endpoint (--metrics-listen) report. Names follow
// Prometheus conventions (`_total` for counters, base units); a sample is a
// family name plus an optional label set, e.g.
// ktune_candidates_total{status="wrong_answer"}.
//
// Hot paths (every GetConfig) resolve their samples once (Get, GetHistogram)
// and update them through the returned handle: one atomic operation, no lock,
// no string work. Resolving a sample creates it at zero, so a label value a
// caller resolves up front is exported as 0 before its first event (a rate()
// over it is then defined from the start). Rare updates may use Add / Set by
// name, which take the registry's lock.
// Thread-safe; handles stay valid for the Metrics' lifetime.
#pragma once

#include <atomic>
#include <cstdint>
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
  enum class Kind { kCounter, kGauge, kHistogram };
  // Label name -> value pairs, in the order they are rendered.
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // One counter or gauge sample.
  class Sample {
   public:
    void Add(double delta);
    void Set(double value) { value_.store(value, std::memory_order_relaxed); }
    double value() const { return value_.load(std::memory_order_relaxed); }

   private:
    std::atomic<double> value_{0};
  };

  // One histogram sample: counts per bucket and the sum of observations.
  class Histogram {
   public:
    explicit Histogram(const std::vector<double>* bounds);
    void Observe(double value);
    // Cumulative counts, one per bound and a last one for +Inf (= the count).
    std::vector<uint64_t> Cumulative() const;
    double sum() const { return sum_.value(); }

   private:
    const std::vector<double>* const bounds_;          // the family's, ascending
    std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, the last is +Inf
    Sample sum_;
  };

  // Declares a family; samples of undeclared families are a programming error
  // (logged, and the update goes to a sample nobody exports).
  void Declare(const std::string& family, Kind kind, const std::string& help);
  // A histogram family with these bucket upper bounds (ascending; +Inf is implied).
  void DeclareHistogram(const std::string& family, const std::string& help, std::vector<double> bounds);

  // The sample of `family` with `labels`, created at zero if new.
  Sample* Get(const std::string& family, const Labels& labels = {});
  Histogram* GetHistogram(const std::string& family, const Labels& labels = {});

  void Add(const std::string& family, double value, const std::string& label_name = "",
           const std::string& label_value = "");
  void Set(const std::string& family, double value, const std::string& label_name = "",
           const std::string& label_value = "");

  // Every sample as "family" or "family{label=\"value\"}" -> value; a
  // histogram as its family_count and family_sum samples.
  std::map<std::string, double> Snapshot();
  // The Prometheus text exposition format (version 0.0.4).
  std::string RenderPrometheus();

 private:
  struct Family {
    Kind kind = Kind::kCounter;
    std::string help;
    std::vector<double> bounds;  // histograms
    // Rendered label set (`a="x",b="y"`, or "") -> sample.
    std::map<std::string, std::unique_ptr<Sample>> samples;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  static std::string LabelKey(const Labels& labels);

  absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  // Where updates of undeclared families go.
  const std::vector<double> no_bounds_{};
  Sample undeclared_;
  Histogram undeclared_histogram_{&no_bounds_};
};

// Serves `metrics->RenderPrometheus()` at GET /metrics on host:port (plain
// HTTP: bind it to loopback or a cluster-internal address; ktuned refuses
// anything else without --metrics-allow-remote).
//
// Bounded so that no client can stall it: a connection that has sent nothing
// is never handed to a worker (TCP_DEFER_ACCEPT, and one that the kernel
// passes on idle is closed at once), reads and writes time out, a kept-alive
// connection is closed after a short idle time, and at most
// kMaxMetricsConnections are queued or served at once (more are closed on
// accept).
inline constexpr int kMaxMetricsConnections = 32;

class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Binds and starts serving on a thread. INVALID_ARGUMENT for a bad address,
  // UNAVAILABLE if the port cannot be bound.
  absl::Status Start(const std::string& host_port, Metrics* metrics, std::function<void()> refresh);
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ktune
