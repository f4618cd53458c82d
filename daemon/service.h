// KtuneService: the gRPC face of ktuned. Thin by design: each handler decodes
// and validates its request (wire.h, ValidateNormProblem), calls the entry
// cache or the tuner, encodes the answer, and maps errors in one place
// (status_mapping.h). Nothing runs on a request that fails validation.
//
// Tuning runs on its own threads, never on gRPC's callback threads, and one
// tune at a time owns the GPU (gpu_mu_), so measurements never overlap.
// Thread-safe: gRPC calls the handlers concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cache/store.h"
#include "daemon/entry_cache.h"
#include "ktune/v1/ktune.grpc.pb.h"
#include "tuner/device.h"
#include "tuner/fingerprint.h"
#include "tuner/launch_recipe.h"
#include "tuner/problem.h"

namespace ktune {

class KtuneServiceImpl final : public v1::KtuneService::CallbackService {
 public:
  // `device` may be null: the daemon is then compile-only, for the reason given.
  KtuneServiceImpl(Store* store, std::unique_ptr<Device> device, std::string compile_only_reason);
  // Waits for running tunes to finish.
  ~KtuneServiceImpl() override;

  grpc::ServerUnaryReactor* GetConfig(grpc::CallbackServerContext* context,
                                      const v1::GetConfigRequest* request,
                                      v1::GetConfigResponse* response) override;
  grpc::ServerWriteReactor<v1::TuneEvent>* Tune(grpc::CallbackServerContext* context,
                                                const v1::TuneRequest* request) override;
  grpc::ServerUnaryReactor* ListEntries(grpc::CallbackServerContext* context,
                                        const v1::ListEntriesRequest* request,
                                        v1::ListEntriesResponse* response) override;
  grpc::ServerUnaryReactor* ExportBundle(grpc::CallbackServerContext* context,
                                         const v1::ExportBundleRequest* request,
                                         v1::ExportBundleResponse* response) override;
  grpc::ServerUnaryReactor* ImportBundle(grpc::CallbackServerContext* context,
                                         const v1::ImportBundleRequest* request,
                                         v1::ImportBundleResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;

  bool compile_only() const { return device_ == nullptr; }
  // The device answers are keyed by: the GPU, or CompileOnlyTarget().
  const DeviceInfo& target() const { return target_; }

  // Everything a request's problem resolves to before any work is done.
  struct Resolved {
    NormProblem problem;
    SoftwareFingerprint software;
    EntryKey key;
  };
  // INVALID_ARGUMENT / UNIMPLEMENTED for problems this daemon cannot serve.
  absl::StatusOr<Resolved> Resolve(const v1::Problem& problem) const;

 private:
  using ProgressSink = std::function<void(const v1::TuneEvent&)>;

  // Answers from a stored entry (source TUNED).
  void AnswerFromEntry(const v1::Entry& entry, bool include_cubin,
                       v1::GetConfigResponse* response);
  // Compiles (once per process) and answers the heuristic config.
  absl::Status AnswerHeuristic(const Resolved& resolved, bool include_cubin,
                               v1::GetConfigResponse* response);
  // Tunes on the GPU, stores the winner, answers it. Blocks; one tune at a
  // time. Unless `force`, a key stored while this call waited for the GPU is
  // answered from the store instead of tuned again.
  absl::Status TuneAndStore(const Resolved& resolved, int repetitions, bool force,
                            bool include_cubin, const ProgressSink& progress,
                            v1::GetConfigResponse* response);
  // Runs `work` on a tracked thread (joined by the destructor).
  void RunDetached(std::function<void()> work);
  // The cubin for a stored entry's recipe: recompiled from the embedded
  // template (deterministic) and memoized.
  absl::StatusOr<std::string> CubinFor(const v1::LaunchRecipe& recipe);

  Store* const store_;
  EntryCache entries_;
  const std::unique_ptr<Device> device_;
  const std::string compile_only_reason_;
  const DeviceInfo target_;
  const std::chrono::steady_clock::time_point started_;

  absl::Mutex gpu_mu_;  // held for the whole of one tune

  absl::Mutex cubin_mu_;
  // name expression + options + arch -> compiled recipe (lowered names, cubin).
  absl::flat_hash_map<std::string, LaunchRecipe> compiled_ ABSL_GUARDED_BY(cubin_mu_);

  absl::Mutex threads_mu_;
  int running_threads_ ABSL_GUARDED_BY(threads_mu_) = 0;
};

}  // namespace ktune
