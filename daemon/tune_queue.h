// The tuning queue: one tune at a time per GPU, one job per cache key.
//
// Every way a tune is asked for (GetConfig with TUNE_ON_MISS, the Tune stream,
// a background tune queued by a heuristic answer) goes through Join(): a
// caller whose key already has a job becomes one more waiter of that job
// (single flight), so 32 concurrent callers of one key run one tune and all
// get its answer. Jobs wait in a bounded queue ordered by priority (an
// interactive caller before background and prewarm work), then by arrival.
// A queued job whose every waiter has gone is dropped; a running one is asked
// to stop (its cancel flag). Background jobs have no waiters and are kept.
//
// Jobs run on slot threads, one per GPU worker of the node: each thread
// takes the next job (priority, then arrival) when its slot is free, so N
// GPUs run N tunes at once, and the job learns its slot (which worker to
// use). A job is for one GPU kind (its key's device) and a slot is of its
// GPU's kind: a slot takes only jobs of its kind, so a node of H100s and
// H200s tunes an H200 problem on an H200.
//
// Thread-safe. Callbacks (progress, done) are called from the slot threads
// without the queue's lock held.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

enum class JobPriority { kInteractive = 0, kBackground = 1 };

class TuneQueue {
 public:
  using Result = absl::StatusOr<v1::GetConfigResponse>;
  using ProgressFn = std::function<void(const v1::TuneEvent&)>;
  using DoneFn = std::function<void(const Result&)>;
  // The work of one job, run on slot `slot` (in [0, slots)). It should poll
  // `cancelled` between candidates and return CANCELLED once it is set;
  // `progress` fans out to every waiter.
  using Work = std::function<Result(int slot, const std::atomic<bool>& cancelled, const ProgressFn& progress)>;

  struct Stats {
    int queued = 0;
    int running = 0;
    int64_t jobs_started = 0;
    int64_t jobs_joined = 0;     // callers that shared an existing job
    int64_t jobs_cancelled = 0;  // dropped or stopped because every waiter left
    int64_t jobs_rejected = 0;   // queue full
    // Per slot: the key of the job it runs, "" when idle.
    std::vector<std::string> slot_keys;
  };

  // `max_queued` bounds the jobs waiting (not counting those running);
  // `slots` (>= 1) jobs run at once, all of kind 0.
  explicit TuneQueue(int max_queued, int slots = 1);
  // A slot per item of `slot_kinds` (none: one slot of kind 0), slot i
  // taking the jobs of kind slot_kinds[i].
  TuneQueue(int max_queued, std::vector<int> slot_kinds);
  // Cancels queued jobs (their waiters get CANCELLED), waits for the running ones.
  ~TuneQueue();

  class Ticket;
  // Becomes a waiter of `key`'s job, creating it with `work` if there is none.
  // `done` is called once with the job's result; `progress` (may be null) with
  // each event from now on. A null `done` with kBackground queues work nobody
  // waits for. RESOURCE_EXHAUSTED when the queue is full; UNAVAILABLE after
  // Shutdown(); FAILED_PRECONDITION when no slot is of `kind`. A key is of
  // one kind (REQUIRES: every Join of a key passes the same `kind`).
  absl::StatusOr<std::unique_ptr<Ticket>> Join(const std::string& key, JobPriority priority, Work work, DoneFn done,
                                               ProgressFn progress, int kind = 0);

  // Refuses new jobs and cancels queued ones. Idempotent.
  void Shutdown();

  Stats stats();

  // True while the job of `key` (queued or running) has a caller waiting for
  // it: background work that a caller joined is waited for too.
  bool HasWaiters(const std::string& key);

 private:
  struct Waiter {
    uint64_t id;
    DoneFn done;
    ProgressFn progress;
  };
  struct Job {
    std::string key;
    int kind = 0;  // only slots of this kind take it
    JobPriority priority;
    uint64_t sequence;  // arrival order
    Work work;
    std::vector<Waiter> waiters;
    bool keep_without_waiters = false;  // background work
    bool running = false;
    std::atomic<bool> cancelled{false};
  };

  void Leave(const std::shared_ptr<Job>& job, uint64_t waiter_id);
  void RunLoop(int slot);
  // Picks the next job of `kind`: lowest priority value, then earliest sequence.
  std::shared_ptr<Job> PopLocked(int kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int QueuedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_queued_;
  const std::vector<int> slot_kinds_;  // slot -> the kind of jobs it takes
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);  // queued or running
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> slot_keys_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> slots_;

 public:
  // A caller's place in a job. Destroying it (or Cancel()) leaves the job;
  // the job is cancelled when no waiter is left and it is not background work.
  class Ticket {
   public:
    ~Ticket() { Cancel(); }
    void Cancel() {
      if (queue_ != nullptr) queue_->Leave(job_, id_);
      queue_ = nullptr;
    }
    // True if this caller joined a job that already existed.
    bool shared() const { return shared_; }

   private:
    friend class TuneQueue;
    Ticket(TuneQueue* queue, std::shared_ptr<Job> job, uint64_t id, bool shared)
        : queue_(queue), job_(std::move(job)), id_(id), shared_(shared) {}
    TuneQueue* queue_;
    std::shared_ptr<Job> job_;
    uint64_t id_;
    bool shared_;
  };
};

}  // namespace ktune
