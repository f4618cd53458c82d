#include "daemon/service_metrics.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/safe_text.h"
#include "tuner/run/candidate.h"

namespace ktune {
namespace {

// The counters and gauges ktuned exports (the one histogram is declared in
// the constructor, with its buckets). /metrics lists families by name.
struct MetricDeclaration {
  const char* name;
  Metrics::Kind kind;
  const char* help;
};
constexpr MetricDeclaration kDeclared[] = {
    {"ktune_getconfig_total", Metrics::Kind::kCounter,
     "GetConfig answers by how they were obtained (hit, heuristic, nearest, tuned, not_found, refused, cancelled, "
     "error)"},
    {"ktune_build_info", Metrics::Kind::kGauge, "Always 1; the labels say what this ktuned is built from"},
    {"ktune_compile_only", Metrics::Kind::kGauge,
     "1 when this ktuned has no usable GPU (serves cached and heuristic answers, cannot tune)"},
    {"ktune_tunes_total", Metrics::Kind::kCounter, "Tuning jobs finished, by result"},
    {"ktune_tune_seconds_total", Metrics::Kind::kCounter, "Wall time spent in tuning jobs"},
    {"ktune_compile_seconds_total", Metrics::Kind::kCounter,
     "NVRTC compile time summed over candidates (all compile threads)"},
    {"ktune_run_seconds_total", Metrics::Kind::kCounter, "Wall time verifying and timing candidates on the GPU"},
    {"ktune_kernel_cache_hits_total", Metrics::Kind::kCounter,
     "Candidates whose cubin came from the compiled-kernel cache"},
    {"ktune_candidates_compiled_total", Metrics::Kind::kCounter, "Candidates compiled by NVRTC"},
    {"ktune_quarantined_total", Metrics::Kind::kCounter, "Candidates quarantined after a fault or a hang, by reason"},
    {"ktune_candidates_total", Metrics::Kind::kCounter,
     "Candidates that finished, by outcome (ok, compile_error, wrong_answer, launch_error)"},
    {"ktune_tune_jobs_joined_total", Metrics::Kind::kCounter,
     "Tune requests that shared an already queued or running job of their key"},
    {"ktune_tune_jobs_rejected_total", Metrics::Kind::kCounter, "Tune requests refused because the queue was full"},
    {"ktune_tune_jobs_cancelled_total", Metrics::Kind::kCounter,
     "Tuning jobs dropped because every caller waiting for them went away"},
    {"ktune_tune_queue_depth", Metrics::Kind::kGauge, "Tuning jobs waiting"},
    {"ktune_tunes_running", Metrics::Kind::kGauge, "Tuning jobs running"},
    {"ktune_entries", Metrics::Kind::kGauge, "Tuned entries stored, by op"},
    {"ktune_fleet_store_configured", Metrics::Kind::kGauge, "1 when ktuned has a fleet store (--fleet-store)"},
    {"ktune_fleet_store_reachable", Metrics::Kind::kGauge, "1 while the fleet store answers"},
    {"ktune_gpu_busy", Metrics::Kind::kGauge, "1 while the GPU (label device: its ordinal) runs a tune"},
    {"ktune_worker_restarts_total", Metrics::Kind::kCounter,
     "Restarts of the GPU's worker process (label device: its ordinal) after a fault or hang"},
    {"ktune_fleet_publish_queue_depth", Metrics::Kind::kGauge, "Entries waiting to be published to the fleet store"},
    {"ktune_fleet_published_total", Metrics::Kind::kCounter, "Entries published to the fleet store"},
    {"ktune_fleet_publishes_dropped_total", Metrics::Kind::kCounter,
     "Publishes lost: the queue was full, or the fleet store refused the row"},
    {"ktune_fleet_lookups_total", Metrics::Kind::kCounter,
     "Fleet store lookups by result (hit: imported and served; miss; unavailable; refused by the import check)"},
};

}  // namespace

ServiceMetrics::ServiceMetrics(const OpRegistry& ops, bool compile_only) : ops_(ops) {
  for (const MetricDeclaration& m : kDeclared) metrics_.Declare(m.name, m.kind, m.help);
  metrics_.DeclareHistogram(
      "ktune_getconfig_seconds", "GetConfig latency in the daemon (decoded request to answer), by answer",
      {25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 1, 10, 60, 300, 1800});

  // Every label value a family can take is exported from the start, at 0.
  static constexpr std::array<const char*, kAnswerKinds> kAnswerNames = {
      "hit", "heuristic", "nearest", "tuned", "not_found", "refused", "cancelled", "error"};
  for (int i = 0; i < kAnswerKinds; ++i) {
    answer_metrics_[i] = {metrics_.Get("ktune_getconfig_total", {{"answer", kAnswerNames[i]}}),
                          metrics_.GetHistogram("ktune_getconfig_seconds", {{"answer", kAnswerNames[i]}})};
  }
  for (const char* result : {"ok", "failed", "cancelled"}) metrics_.Get("ktune_tunes_total", {{"result", result}});
  for (CandidateStatus status : {CandidateStatus::kOk, CandidateStatus::kCompileError, CandidateStatus::kWrongAnswer,
                                 CandidateStatus::kLaunchError, CandidateStatus::kFault, CandidateStatus::kTimeout,
                                 CandidateStatus::kQuarantined}) {
    metrics_.Get("ktune_candidates_total", {{"status", CandidateStatusName(status)}});
  }
  for (const char* reason : {"fault", "timeout"}) metrics_.Get("ktune_quarantined_total", {{"reason", reason}});
  for (const std::string& op : ops_.entry_ops()) metrics_.Get("ktune_entries", {{"op", op}});
  metrics_.Get("ktune_build_info", {{"version", KTUNE_VERSION}, {"nvrtc", absl::StrCat(NvrtcVersion())}})->Set(1);
  metrics_.Get("ktune_compile_only")->Set(compile_only ? 1 : 0);
}

void ServiceMetrics::CountAnswer(GetConfigAnswer answer, std::chrono::steady_clock::time_point start) {
  const AnswerMetrics& m = answer_metrics_[static_cast<int>(answer)];
  m.total->Add(1);
  m.seconds->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void ServiceMetrics::CountTune(const std::string& key, const absl::StatusOr<OpTuneResult>& result) {
  if (!result.ok()) {
    metrics_.Add("ktune_tunes_total", 1, "result", absl::IsCancelled(result.status()) ? "cancelled" : "failed");
    spdlog::error("event=tune_failed key=\"{}\" error=\"{}\"", key, SafeText(result.status().message(), 1024));
    return;
  }
  metrics_.Add("ktune_tunes_total", 1, "result", "ok");
  metrics_.Add("ktune_tune_seconds_total", result->tune_seconds);
  metrics_.Add("ktune_compile_seconds_total", result->compile_seconds);
  metrics_.Add("ktune_run_seconds_total", result->run_seconds);
  metrics_.Add("ktune_kernel_cache_hits_total", result->kernel_cache_hits);
  metrics_.Add("ktune_candidates_compiled_total", result->compiled);
  for (const std::string& status : result->candidate_statuses) {
    metrics_.Add("ktune_candidates_total", 1, "status", status);
  }
}

void ServiceMetrics::CountQuarantine(const std::string& reason) {
  metrics_.Add("ktune_quarantined_total", 1, "reason", reason);
}

void ServiceMetrics::AddCompileSeconds(double seconds) { metrics_.Add("ktune_compile_seconds_total", seconds); }

void ServiceMetrics::RefreshGpuGauges(const std::vector<GpuState>& gpus) {
  for (const GpuState& g : gpus) {
    const std::string device = absl::StrCat(g.ordinal);
    metrics_.Set("ktune_gpu_busy", g.tuning.empty() ? 0 : 1, "device", device);
    metrics_.Set("ktune_worker_restarts_total", g.worker_restarts, "device", device);
  }
}

void ServiceMetrics::RefreshGauges(const TuneQueue::Stats& s, Store* store) {
  metrics_.Set("ktune_tune_queue_depth", s.queued);
  metrics_.Set("ktune_tunes_running", s.running);
  metrics_.Set("ktune_tune_jobs_joined_total", static_cast<double>(s.jobs_joined));
  metrics_.Set("ktune_tune_jobs_rejected_total", static_cast<double>(s.jobs_rejected));
  metrics_.Set("ktune_tune_jobs_cancelled_total", static_cast<double>(s.jobs_cancelled));
  if (absl::StatusOr<std::map<std::string, int64_t>> counts = store->CountByOp(); counts.ok()) {
    // An op with no entries (left) reads 0, not its last count.
    for (const std::string& op : ops_.entry_ops()) {
      if (counts->count(op) == 0) metrics_.Set("ktune_entries", 0, "op", op);
    }
    for (const auto& [op, n] : *counts) metrics_.Set("ktune_entries", static_cast<double>(n), "op", op);
  }
}

}  // namespace ktune
