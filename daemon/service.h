// KtuneService: the gRPC face of ktuned. Thin by design: each handler decodes
// and validates its request (wire.h, ValidateNormProblem), answers from the
// entry cache or hands work to the tuning queue, encodes the answer, and maps
// errors in one place (status_mapping.h). Nothing runs on a request that
// fails validation.
//
// Tuning never runs on gRPC's threads: every tune is a job of the TuneQueue
// (one at a time on the GPU, one job per key, interactive before background).
// Thread-safe: gRPC calls the handlers concurrently.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cache/bundle.h"
#include "cache/bundle_merge.h"
#include "cache/store.h"
#include "daemon/auth.h"
#include "daemon/entry_cache.h"
#include "daemon/metrics.h"
#include "daemon/tune_queue.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "tuner/executor.h"
#include "tuner/fingerprint.h"
#include "tuner/kernel_cache.h"
#include "tuner/launch_recipe.h"
#include "tuner/norm_config.h"
#include "tuner/problem.h"
#include "tuner/search_strategy.h"
#include "tuner/tuner.h"

namespace ktune {

struct ServiceOptions {
  int max_queued_tunes = 64;
  // HEURISTIC_ON_MISS answers queue a background tune of the problem.
  bool background_tunes = true;
  SearchKind search = SearchKind::kGrid;
  SearchBudget budget;  // for SearchKind::kCoordinateDescent
  Authorizer auth;      // tokens for TCP callers and for imports
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
  KtuneServiceImpl(Store* store, KernelCache* kernel_cache, std::unique_ptr<CandidateExecutor> executor,
                   std::string compile_only_reason, const ServiceOptions& options = {});
  // Cancels queued tunes and waits for the running one.
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

  bool compile_only() const { return executor_ == nullptr; }
  // The device answers are keyed by: the GPU, or CompileOnlyTarget().
  const DeviceInfo& target() const { return target_; }
  Metrics* metrics() { return &metrics_; }
  // Brings the gauges (queue depth, entries) up to date before a scrape.
  void RefreshGauges();
  // Stops taking tuning jobs (shutdown): queued ones are cancelled.
  void StopTuning() { queue_.Shutdown(); }

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

  // Everything a request's problem resolves to before any work is done.
  struct Resolved {
    v1::Problem proto;                    // the problem as asked
    NormProblem problem;                  // norm problems
    std::optional<v1::GemmProblem> gemm;  // set for GEMM problems (problem unused)
    SoftwareFingerprint software;
    EntryKey key;
  };
  // INVALID_ARGUMENT / UNIMPLEMENTED for problems this daemon cannot serve.
  absl::StatusOr<Resolved> Resolve(const v1::Problem& problem) const;
  // GEMM: a HEURISTIC answer (compiled) from the family that won the bench
  // for such a problem: the skinny kernel for M <= 16, wgmma on sm_90, else
  // mma.sync, each the model's best config (tuner/gemm_tuner.h tunes them all).
  absl::Status AnswerUntunedGemm(const Resolved& r, bool include_cubin, v1::GetConfigResponse* response);
  // NEAREST for a GEMM: `nearest`'s own-template config, its recipe written
  // for r's problem. NOT_FOUND when it cannot serve r (a cuBLASLt algorithm,
  // which the caller would have to check against the new M, or a config the
  // template refuses for it).
  absl::Status AnswerNearestGemm(const Resolved& r, const v1::Entry& nearest, bool include_cubin,
                                 v1::GetConfigResponse* response);
  TuneQueue::Result TuneGemmAndStore(const Resolved& r, int repetitions, const std::atomic<bool>& cancelled,
                                     const TuneQueue::ProgressFn& progress);
  // The candidates quarantined in r's environment, and the callback that
  // quarantines one (store, metric, log).
  std::set<std::string> QuarantinedFor(const Resolved& r);
  std::function<void(const std::string&, const std::string&, const std::string&)> QuarantineFn(const Resolved& r);
  // Counts a finished tune in the metrics; logs a failed one.
  void CountTune(const std::string& key, const absl::Status& status, double tune_seconds, double compile_seconds);

  // The work of ImportBundle, also run by ktuned --import-bundle at start:
  // decodes and validates the whole bundle (INVALID_ARGUMENT "bundle refused,
  // nothing imported: ..."), judges each entry against this daemon's GPU and
  // software (cache/bundle_merge.h; a compile-only daemon stores them as
  // bundled), merges by the policy and writes the plan in one transaction
  // unless dry_run.
  absl::StatusOr<v1::ImportBundleResponse> Import(const v1::ImportBundleRequest& request);

  // The work of DeleteEntries: every problem resolved first (INVALID_ARGUMENT
  // naming it), then each deletion in its own transaction, from the store
  // and from memory.
  absl::StatusOr<v1::DeleteEntriesResponse> Delete(const v1::DeleteEntriesRequest& request);

 private:
  // The answer a stored entry gives (source TUNED, no code): the recipe this
  // build writes for its problem and config on this device, after checking
  // that the stored recipe is that recipe (CompareRecipe); INVALID_ARGUMENT
  // naming the field when it is not (the entry is then not served). A
  // function of the entry alone while the daemon runs, so EntryCache keeps it.
  absl::StatusOr<v1::GetConfigResponse> EntryAnswer(const v1::Entry& entry) const;
  // Serves `served`'s answer into `response`, with its code when asked for.
  absl::Status AnswerFromEntry(const ServedEntry& served, bool include_cubin, v1::GetConfigResponse* response);
  // Answers `config` for the problem (source HEURISTIC or NEAREST), compiled
  // once per process.
  absl::Status AnswerUntuned(const Resolved& resolved, const NormConfig& config, v1::Source source, bool include_cubin,
                             v1::GetConfigResponse* response);
  // The work of one tuning job: tunes on the GPU, stores the winner, answers it.
  TuneQueue::Result TuneAndStore(const Resolved& resolved, int repetitions, bool force,
                                 const std::atomic<bool>& cancelled, const TuneQueue::ProgressFn& progress);
  // Joins (or creates) the tuning job of `resolved`.
  absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> JoinTune(const Resolved& resolved, JobPriority priority,
                                                              int repetitions, bool force, TuneQueue::DoneFn done,
                                                              TuneQueue::ProgressFn progress);
  // The recipe this build writes for (problem, config) on this device
  // (TemplateRecipe), compiled (lowered names; the cubin is kept in it too,
  // and sent when the caller asked for it).
  absl::StatusOr<LaunchRecipe> ServedRecipe(const v1::Problem& problem, const v1::Config& config);
  // Fills recipe->cubin and its kernels' lowered names: memoised, else from
  // the kernel cache, else compiled. Only code is memoised, keyed by what
  // determines it (CompileKey); the recipe's geometry is left as it is, so an
  // answer never depends on what was asked before.
  absl::Status AttachCode(LaunchRecipe* recipe);
  // Remembers a compiled recipe's code (a tune's winner).
  void RememberCode(const LaunchRecipe& recipe);
  // The software this binary tunes each op with (BuildSoftware of any of the
  // op's problems: it depends on the op alone), by op name.
  static std::map<std::string, SoftwareFingerprint> OpSoftware();
  // Their keys: an entry of this daemon's device under another one is stale
  // (kept, listed, never served).
  static std::map<std::string, std::string> CurrentSoftware(
      const std::map<std::string, SoftwareFingerprint>& op_software);
  EntryFilter::Stale StaleFilter() const;
  // INVALID_ARGUMENT unless `op` is "" or an op this daemon serves.
  absl::Status CheckOpFilter(const std::string& op) const;
  // What an export takes: the store's filter, and the device name, which is
  // inside each entry and so filtered after reading.
  struct ExportSelection {
    EntryFilter filter;
    std::string device_name;
  };
  absl::StatusOr<ExportSelection> SelectForExport(const v1::ExportBundleRequest& request) const;
  // Encodes the next page after `*after` (moved on) into `encoder`; `*done`
  // once no entry is left.
  absl::Status ExportPage(const ExportSelection& selection, std::optional<EntryKey>* after, size_t max_bytes,
                          BundleEncoder* encoder, bool* done);
  void DeclareMetrics();
  // How a GetConfig was answered: its label answer="..." on
  // ktune_getconfig_total and ktune_getconfig_seconds.
  enum class Answer { kHit, kHeuristic, kNearest, kTuned, kNotFound, kRefused, kCancelled, kError };
  static constexpr int kAnswerKinds = 8;
  // Counts one answer and observes its latency since `start`: two atomic
  // updates through handles resolved at construction (the hit path's cost).
  void CountAnswer(Answer answer, std::chrono::steady_clock::time_point start);
  void ObserveAnswer(Answer answer, std::chrono::steady_clock::time_point start);
  // What an import is judged against: this GPU and the software fingerprint
  // of each op here, or no GPU when compile-only.
  MergeTarget ImportTarget() const;

  Store* const store_;
  KernelCache* const kernel_cache_;
  EntryCache entries_;
  const std::unique_ptr<CandidateExecutor> executor_;
  const std::string compile_only_reason_;
  const DeviceInfo target_;
  const std::string target_key_;                                  // DeviceKey(target_), on every request's key
  const std::map<std::string, SoftwareFingerprint> op_software_;  // OpSoftware()
  const std::map<std::string, std::string> current_software_;     // their keys
  const ServiceOptions options_;
  const std::chrono::steady_clock::time_point started_;
  Metrics metrics_;
  struct AnswerMetrics {
    Metrics::Sample* total = nullptr;
    Metrics::Histogram* seconds = nullptr;
  };
  std::array<AnswerMetrics, kAnswerKinds> answer_metrics_;  // by Answer

  // What compiling one program gives: the cubin and, per name expression in
  // the recipe's order, its lowered name.
  struct CompiledCode {
    std::string cubin;
    std::vector<std::string> lowered_names;
  };
  absl::Mutex compiled_mu_;
  // template id + hash + arch + options + name expressions -> its code.
  absl::flat_hash_map<std::string, CompiledCode> compiled_ ABSL_GUARDED_BY(compiled_mu_);

  TuneQueue queue_;  // last: its worker uses everything above until it is joined
};

}  // namespace ktune
