#include "daemon/tune_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ktune {

TuneQueue::TuneQueue(int max_queued, int slots)
    : TuneQueue(max_queued, std::vector<int>(static_cast<size_t>(std::max(1, slots)), 0)) {}

TuneQueue::TuneQueue(int max_queued, std::vector<int> slot_kinds)
    : max_queued_(max_queued), slot_kinds_(slot_kinds.empty() ? std::vector<int>{0} : std::move(slot_kinds)) {
  {
    absl::MutexLock lock(&mu_);
    slot_keys_.assign(slot_kinds_.size(), "");
  }
  for (size_t slot = 0; slot < slot_kinds_.size(); ++slot) {
    slots_.emplace_back([this, slot] { RunLoop(static_cast<int>(slot)); });
  }
}

TuneQueue::~TuneQueue() {
  Shutdown();
  for (std::thread& t : slots_) t.join();
}

int TuneQueue::QueuedLocked() const {
  int queued = 0;
  for (const auto& [key, job] : jobs_) queued += job->running ? 0 : 1;
  return queued;
}

absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> TuneQueue::Join(const std::string& key, JobPriority priority,
                                                                   Work work, DoneFn done, ProgressFn progress,
                                                                   int kind) {
  if (std::find(slot_kinds_.begin(), slot_kinds_.end(), kind) == slot_kinds_.end()) {
    // A job no slot would ever take: refused rather than queued for ever.
    return absl::FailedPreconditionError(absl::StrCat("no GPU of kind ", kind, " tunes here"));
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("ktuned is shutting down: no new tuning jobs");
  const uint64_t waiter_id = ++next_waiter_;
  auto it = jobs_.find(key);
  if (it != jobs_.end()) {
    std::shared_ptr<Job> job = it->second;
    if (done) {
      job->waiters.push_back({waiter_id, std::move(done), std::move(progress)});
    } else {
      job->keep_without_waiters = true;
    }
    if (priority < job->priority) job->priority = priority;  // an interactive caller arrived
    ++stats_.jobs_joined;
    return std::unique_ptr<Ticket>(new Ticket(this, job, waiter_id, /*shared=*/true));
  }
  if (QueuedLocked() >= max_queued_) {
    ++stats_.jobs_rejected;
    return absl::ResourceExhaustedError(
        absl::StrCat("the tuning queue is full (", max_queued_,
                     " jobs waiting); retry later, ask with HEURISTIC_ON_MISS, or raise --max-queued-tunes"));
  }
  auto job = std::make_shared<Job>();
  job->key = key;
  job->kind = kind;
  job->priority = priority;
  job->sequence = ++next_sequence_;
  job->work = std::move(work);
  if (done) {
    job->waiters.push_back({waiter_id, std::move(done), std::move(progress)});
  } else {
    job->keep_without_waiters = true;
  }
  jobs_.emplace(key, job);
  return std::unique_ptr<Ticket>(new Ticket(this, job, waiter_id, /*shared=*/false));
}

void TuneQueue::Leave(const std::shared_ptr<Job>& job, uint64_t waiter_id) {
  DoneFn cancelled_done;
  {
    absl::MutexLock lock(&mu_);
    auto& waiters = job->waiters;
    for (auto it = waiters.begin(); it != waiters.end(); ++it) {
      if (it->id == waiter_id) {
        waiters.erase(it);
        break;
      }
    }
    if (!waiters.empty() || job->keep_without_waiters) return;
    auto found = jobs_.find(job->key);
    if (found == jobs_.end() || found->second != job) return;  // already finished
    ++stats_.jobs_cancelled;
    if (job->running) {
      job->cancelled = true;  // the work stops at its next check
    } else {
      jobs_.erase(found);
    }
  }
}

std::shared_ptr<TuneQueue::Job> TuneQueue::PopLocked(int kind) {
  std::shared_ptr<Job> best;
  for (const auto& [key, job] : jobs_) {
    if (job->running || job->kind != kind) continue;
    if (!best || job->priority < best->priority ||
        (job->priority == best->priority && job->sequence < best->sequence)) {
      best = job;
    }
  }
  return best;
}

void TuneQueue::RunLoop(int slot) {
  // A slot takes only jobs of its GPU's kind.
  struct Ready {
    TuneQueue* queue;
    int kind;
    bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return queue->shutdown_ || queue->PopLocked(kind) != nullptr;
    }
  };
  const int kind = slot_kinds_[static_cast<size_t>(slot)];
  Ready ready{this, kind};
  while (true) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&ready));
      if (shutdown_) {
        // Queued jobs are cancelled below by Shutdown(); nothing runs any more.
        return;
      }
      job = PopLocked(kind);
      job->running = true;
      ++stats_.jobs_started;
      slot_keys_[static_cast<size_t>(slot)] = job->key;
    }
    auto fan_out = [this, job](const v1::TuneEvent& event) {
      std::vector<ProgressFn> sinks;
      {
        absl::MutexLock lock(&mu_);
        for (const Waiter& w : job->waiters) {
          if (w.progress) sinks.push_back(w.progress);
        }
      }
      for (const ProgressFn& sink : sinks) sink(event);
    };
    Result result = job->work(slot, job->cancelled, fan_out);
    std::vector<Waiter> waiters;
    {
      absl::MutexLock lock(&mu_);
      waiters.swap(job->waiters);
      jobs_.erase(job->key);
      slot_keys_[static_cast<size_t>(slot)].clear();
    }
    for (const Waiter& w : waiters) w.done(result);
  }
}

void TuneQueue::Shutdown() {
  std::vector<std::shared_ptr<Job>> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second->running) {
        it->second->cancelled = true;
        ++it;
      } else {
        dropped.push_back(it->second);
        jobs_.erase(it++);
      }
    }
  }
  const Result cancelled = absl::CancelledError("ktuned is shutting down; the tune was not run");
  for (const auto& job : dropped) {
    std::vector<Waiter> waiters;
    {
      absl::MutexLock lock(&mu_);
      waiters.swap(job->waiters);
    }
    for (const Waiter& w : waiters) w.done(cancelled);
  }
}

bool TuneQueue::HasWaiters(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(key);
  return it != jobs_.end() && !it->second->waiters.empty();
}

TuneQueue::Stats TuneQueue::stats() {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.queued = QueuedLocked();
  s.running = static_cast<int>(jobs_.size()) - s.queued;
  s.slot_keys = slot_keys_;
  return s;
}

}  // namespace ktune
