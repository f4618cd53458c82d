// Tuning jobs, for every op alike (tuner/op.h): a request joins the job of its
// key (single flight, TuneQueue), the job runs its op's Tune on the worker,
// stores the winner as an entry (its recipe re-derived from the winning config
// and checked to be the one measured) and answers it. Candidates that fault or
// hang are quarantined in the store for the environment and never run there
// again.
//
// A worker per GPU: the queue has a slot per GPU, and a job runs on its
// slot's executor, so a node of N GPUs runs N tunes at once. A job is for its
// problem's GPU kind (Resolved::kind) and runs only on a GPU of that kind; an
// answer and a quarantine (keyed by the kind's fingerprint) hold for every
// GPU of the kind: a key is tuned once per node.
//
// Thread-safe. Jobs run on the queue's slot threads, at most one per GPU;
// Join may be called from any thread. The destructor cancels queued jobs and
// waits for the running ones.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/store.h"
#include "daemon/answers.h"
#include "daemon/fleet_sync.h"
#include "daemon/gpus.h"
#include "daemon/service_metrics.h"
#include "daemon/tune_queue.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/run/executor.h"

namespace ktune {

struct TuneJobOptions {
  int max_queued_tunes = 64;
  OpSearch search;  // for ops that search their space (norms)
};

class TuneJobs {
 public:
  // `gpus` run candidates, a job at a time each (REQUIRES: none null, each of
  // a kind of `answers`); none makes every Join
  // FAILED_PRECONDITION (compile-only, for `compile_only_reason`). Nothing
  // else is owned; all must outlive this. `fleet` (not configured: no fleet)
  // is asked before a tune, locks the key across the fleet and is given the
  // winner.
  TuneJobs(Store* store, KernelCache* kernel_cache, std::vector<GpuExecutor> gpus, std::string compile_only_reason,
           Answers* answers, FleetSync* fleet, ServiceMetrics* metrics, const TuneJobOptions& options);
  ~TuneJobs();

  bool compile_only() const { return gpus_.empty(); }
  // Every GPU, busy or idle, in ordinal order.
  std::vector<GpuState> Gpus();
  const std::string& compile_only_reason() const { return compile_only_reason_; }

  // Joins (or creates) the tuning job of `r`: FAILED_PRECONDITION when
  // compile-only, RESOURCE_EXHAUSTED when the queue is full. Unless `force`,
  // a key stored meanwhile is answered, not tuned again.
  absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> Join(const Resolved& r, JobPriority priority, int repetitions,
                                                          bool force, TuneQueue::DoneFn done,
                                                          TuneQueue::ProgressFn progress);

  TuneQueue::Stats stats() { return queue_.stats(); }
  // Stops taking jobs (shutdown): queued ones are cancelled.
  void Shutdown() { queue_.Shutdown(); }

 private:
  // The work of one job: the fleet's entry if it has one; else, holding
  // the key's fleet lock, tunes on the GPU, stores and publishes the
  // winner, answers it. A key another daemon is tuning is left to it by a
  // background job nobody waits for, and waited for by any other.
  TuneQueue::Result TuneAndStore(const GpuExecutor& gpu, const Resolved& r, JobPriority priority, int repetitions,
                                 bool force, const std::atomic<bool>& cancelled, const TuneQueue::ProgressFn& progress);
  // The candidates quarantined in r's environment, and the callback that
  // quarantines one (store, metric, log).
  std::set<std::string> QuarantinedFor(const Resolved& r);
  std::function<void(const std::string&, const std::string&, const std::string&)> QuarantineFn(const Resolved& r,
                                                                                               int ordinal);

  Store* const store_;
  KernelCache* const kernel_cache_;
  const std::vector<GpuExecutor> gpus_;  // slot i runs on gpus_[i]
  const std::string compile_only_reason_;
  Answers* const answers_;
  FleetSync* const fleet_;
  ServiceMetrics* const metrics_;
  absl::Mutex tuning_mu_;
  std::vector<std::string> tuning_ ABSL_GUARDED_BY(tuning_mu_);  // per slot: the problem key running
  const TuneJobOptions options_;
  TuneQueue queue_;  // last: its worker uses everything above until it is joined
};

}  // namespace ktune
