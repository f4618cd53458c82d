// KtuneService: the gRPC face of ktuned. Thin by design: each handler checks
// the caller (Authorizer), decodes and validates its request, hands the work
// to one of the pieces below, encodes the answer, and maps errors in one
// place (status_mapping.h). Nothing runs on a request that fails validation,
// and nothing here knows an op: problems are resolved through the registry
// (tuner/op.h).
//
//   answers.h         GetConfig's answers: resolve, hit, nearest, heuristic, code
//   tune_jobs.h       tuning jobs: single flight, the op's Tune, store, quarantine
//   bundle_service.h  listing, export, import, delete
//   service_metrics.h the metric families and their updates
//
// Tuning never runs on gRPC's threads: every tune is a job of the TuneQueue
// (one at a time per GPU, one job per key, interactive before background).
// Thread-safe: gRPC calls the handlers concurrently.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "daemon/answers.h"
#include "daemon/auth.h"
#include "daemon/bundle_service.h"
#include "daemon/fleet_sync.h"
#include "daemon/service_metrics.h"
#include "daemon/tune_jobs.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/op.h"
#include "tuner/run/executor.h"

namespace ktune {

struct ServiceOptions {
  int max_queued_tunes = 64;
  // HEURISTIC_ON_MISS answers queue a background tune of the problem.
  bool background_tunes = true;
  OpSearch search;     // for ops that search their space (norms)
  Authorizer auth;     // tokens for TCP callers and for imports
  FleetOptions fleet;  // the fleet store (--fleet-store); none when its URL is ""
};

// GetConfig is a raw method (bytes in, bytes out): a stored entry's answer is
// serialized once, when the entry is read from the store (ServedEntry), and
// every hit sends those bytes. Copying and serializing the answer per call
// cost a hit as much as the rest of the handler
// (bench/results/2026-12-02-load-3a30df0.md).
// Why: bench/results/decisions/getconfig-hit-path.md
using KtuneServiceBase = v1::KtuneService::WithRawCallbackMethod_GetConfig<v1::KtuneService::CallbackService>;

class KtuneServiceImpl final : public KtuneServiceBase {
 public:
  // `executor` runs candidates (a worker process in ktuned). It may be null:
  // the daemon is then compile-only, for the reason given. `kernel_cache` may
  // be null (nothing is kept between tunes); neither store nor cache is owned.
  // The ops served are the store's (Store::ops(): BuiltinOps() in ktuned).
  KtuneServiceImpl(Store* store, KernelCache* kernel_cache, std::unique_ptr<CandidateExecutor> executor,
                   std::string compile_only_reason, const ServiceOptions& options = {});
  // A node's GPUs (daemon/gpus.h), a worker each, of any kinds: answers are
  // per kind (daemon/device_kinds.h). Empty: compile-only, as above.
  KtuneServiceImpl(Store* store, KernelCache* kernel_cache, std::vector<GpuExecutor> gpus,
                   std::string compile_only_reason, const ServiceOptions& options = {});
  // Cancels queued tunes and waits for the running ones.
  ~KtuneServiceImpl() override;

  // A v1::GetConfigRequest in, a v1::GetConfigResponse out.
  grpc::ServerUnaryReactor* GetConfig(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<v1::TuneEvent>* Tune(grpc::CallbackServerContext* context,
                                                const v1::TuneRequest* request) override;
  grpc::ServerUnaryReactor* ListEntries(grpc::CallbackServerContext* context, const v1::ListEntriesRequest* request,
                                        v1::ListEntriesResponse* response) override;
  grpc::ServerUnaryReactor* ExportBundle(grpc::CallbackServerContext* context, const v1::ExportBundleRequest* request,
                                         v1::ExportBundleResponse* response) override;
  grpc::ServerUnaryReactor* ImportBundle(grpc::CallbackServerContext* context, const v1::ImportBundleRequest* request,
                                         v1::ImportBundleResponse* response) override;
  grpc::ServerReadReactor<v1::ImportBundleRequest>* ImportBundleStream(grpc::CallbackServerContext* context,
                                                                       v1::ImportBundleResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context, const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  grpc::ServerWriteReactor<v1::ExportBundleChunk>* ExportBundleStream(grpc::CallbackServerContext* context,
                                                                      const v1::ExportBundleRequest* request) override;
  grpc::ServerUnaryReactor* DeleteEntries(grpc::CallbackServerContext* context, const v1::DeleteEntriesRequest* request,
                                          v1::DeleteEntriesResponse* response) override;

  bool compile_only() const { return jobs_.compile_only(); }
  // The devices answers are keyed by: the GPU kinds, the first GPU's first,
  // or CompileOnlyTarget() alone.
  const std::vector<DeviceKind>& kinds() const { return answers_.kinds(); }
  Metrics* metrics() { return metrics_.metrics(); }
  // Brings the gauges (queue depth, entries) up to date before a scrape.
  void RefreshGauges() {
    metrics_.RefreshGauges(jobs_.stats(), store_);
    metrics_.RefreshGpuGauges(jobs_.Gpus());
    fleet_.RefreshGauges();
  }
  // Waits up to `timeout` for queued fleet publishes to be sent (shutdown).
  bool FlushFleet(absl::Duration timeout) { return fleet_.Flush(timeout); }
  // Stops taking tuning jobs (shutdown): queued ones are cancelled.
  void StopTuning() { jobs_.Shutdown(); }
  // ImportBundle's work (BundleService::Import), also run by ktuned
  // --import-bundle at start.
  absl::StatusOr<v1::ImportBundleResponse> Import(const v1::ImportBundleRequest& request) {
    return bundles_.Import(request);
  }

  // Where a GetConfig's answer goes, and what it was.
  struct GetConfigReply {
    grpc::ByteBuffer* wire;                      // what gRPC sends
    v1::Source source = v1::SOURCE_UNSPECIFIED;  // of a sent answer (for the debug log)
    bool pending = false;                        // left to a tune: written later, by the tune's thread
    // When set (debug logging), the problem's canonical key once resolved;
    // left empty for a problem that does not resolve.
    std::string* problem_key = nullptr;
  };
  // GetConfig itself, on a parsed request; GetConfig adds the debug log line
  // around it.
  grpc::ServerUnaryReactor* ServeGetConfig(grpc::CallbackServerContext* context, const v1::GetConfigRequest& request,
                                           GetConfigReply* reply);

 private:
  Store* const store_;
  const ServiceOptions options_;
  const std::chrono::steady_clock::time_point started_;
  ServiceMetrics metrics_;
  Answers answers_;
  BundleService bundles_;
  FleetSync fleet_;  // its listener imports through bundles_
  TuneJobs jobs_;    // last: its queue's worker uses everything above until it is joined
};

}  // namespace ktune
