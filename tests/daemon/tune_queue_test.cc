// The tuning queue: single flight per key, priorities, a bound, cancellation
// when every waiter has gone, background work, shutdown.
#include "daemon/tune_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace ktune {
namespace {

using Result = TuneQueue::Result;

v1::GetConfigResponse Answer(double time_us) {
  v1::GetConfigResponse r;
  r.set_source(v1::TUNED);
  r.mutable_measurement()->set_time_us(time_us);
  return r;
}

// Work that blocks until `release` is notified, then answers `time_us`.
TuneQueue::Work Blocking(absl::Notification* started, absl::Notification* release, double time_us,
                         std::atomic<int>* runs = nullptr) {
  return [=](int, const std::atomic<bool>&, const TuneQueue::ProgressFn& progress) -> Result {
    if (runs) ++*runs;
    if (started) started->Notify();
    v1::TuneEvent e;
    e.mutable_progress()->set_stage("measured");
    progress(e);
    release->WaitForNotification();
    return Answer(time_us);
  };
}

TuneQueue::Work Instant(double time_us, std::vector<double>* order, absl::Mutex* mu) {
  return [=](int, const std::atomic<bool>&, const TuneQueue::ProgressFn&) -> Result {
    absl::MutexLock lock(mu);
    order->push_back(time_us);
    return Answer(time_us);
  };
}

struct Collector {
  absl::Mutex mu;
  std::vector<Result> results;
  int events = 0;
  TuneQueue::DoneFn done() {
    return [this](const Result& r) {
      absl::MutexLock lock(&mu);
      results.push_back(r);
    };
  }
  TuneQueue::ProgressFn progress() {
    return [this](const v1::TuneEvent&) {
      absl::MutexLock lock(&mu);
      ++events;
    };
  }
  size_t count() {
    absl::MutexLock lock(&mu);
    return results.size();
  }
};

void WaitFor(const std::function<bool()>& condition) {
  for (int i = 0; i < 5000 && !condition(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(condition());
}

TEST_CASE("32 concurrent callers of one key share one job and one answer", "[daemon][queue]") {
  TuneQueue queue(8);
  absl::Notification started, release;
  std::atomic<int> runs{0};
  Collector collector;
  std::vector<std::unique_ptr<TuneQueue::Ticket>> tickets(32);
  std::vector<std::thread> callers;
  for (int i = 0; i < 32; ++i) {
    callers.emplace_back([&, i] {
      auto t = queue.Join("rmsnorm.fwd m=1", JobPriority::kInteractive, Blocking(&started, &release, 42.0, &runs),
                          collector.done(), collector.progress());
      if (t.ok()) tickets[i] = std::move(*t);
    });
  }
  for (auto& t : callers) t.join();
  // Checked here: Catch's assertions are not thread-safe (TSan saw two
  // callers' REQUIREs race on its counters).
  for (const auto& t : tickets) REQUIRE(t != nullptr);
  started.WaitForNotification();
  release.Notify();
  WaitFor([&] { return collector.count() == 32; });
  CHECK(runs == 1);
  for (const Result& r : collector.results) {
    REQUIRE(r.ok());
    CHECK(r->measurement().time_us() == 42.0);
  }
  const TuneQueue::Stats s = queue.stats();
  CHECK(s.jobs_started == 1);
  CHECK(s.jobs_joined == 31);
  CHECK(s.queued == 0);
}

TEST_CASE("interactive jobs run before background ones, each in arrival order", "[daemon][queue]") {
  TuneQueue queue(8);
  absl::Notification started, release;
  Collector first;
  auto blocker = queue.Join("a", JobPriority::kInteractive, Blocking(&started, &release, 1), first.done(), nullptr);
  REQUIRE(blocker.ok());
  started.WaitForNotification();  // the worker is busy: the rest queue up
  absl::Mutex mu;
  std::vector<double> order;
  Collector rest;
  std::vector<std::unique_ptr<TuneQueue::Ticket>> tickets;
  for (auto [key, priority, t] :
       {std::tuple{"b", JobPriority::kBackground, 2.0}, std::tuple{"c", JobPriority::kInteractive, 3.0},
        std::tuple{"d", JobPriority::kBackground, 4.0}, std::tuple{"e", JobPriority::kInteractive, 5.0}}) {
    auto ticket = queue.Join(key, priority, Instant(t, &order, &mu), rest.done(), nullptr);
    REQUIRE(ticket.ok());
    tickets.push_back(std::move(*ticket));
  }
  CHECK(queue.stats().queued == 4);
  release.Notify();
  WaitFor([&] { return rest.count() == 4; });
  CHECK(order == std::vector<double>{3.0, 5.0, 2.0, 4.0});
}

TEST_CASE("a full queue says so and a joined key is not a new job", "[daemon][queue]") {
  TuneQueue queue(2);
  absl::Notification started, release;
  Collector c;
  auto running = queue.Join("run", JobPriority::kInteractive, Blocking(&started, &release, 1), c.done(), nullptr);
  REQUIRE(running.ok());
  started.WaitForNotification();
  auto q1 = queue.Join("q1", JobPriority::kInteractive, Blocking(nullptr, &release, 1), c.done(), nullptr);
  auto q2 = queue.Join("q2", JobPriority::kInteractive, Blocking(nullptr, &release, 1), c.done(), nullptr);
  REQUIRE(q1.ok());
  REQUIRE(q2.ok());
  auto q3 = queue.Join("q3", JobPriority::kInteractive, Blocking(nullptr, &release, 1), c.done(), nullptr);
  REQUIRE_FALSE(q3.ok());
  CHECK(q3.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(q3.status().message().find("queue is full (2 jobs waiting)") != std::string::npos);
  auto again = queue.Join("q1", JobPriority::kInteractive, Blocking(nullptr, &release, 1), c.done(), nullptr);
  REQUIRE(again.ok());  // joining needs no room
  CHECK((*again)->shared());
  CHECK(queue.stats().jobs_rejected == 1);
  release.Notify();
  WaitFor([&] { return c.count() == 4; });
}

TEST_CASE("a queued job is dropped when every waiter leaves, background work is kept", "[daemon][queue]") {
  TuneQueue queue(8);
  absl::Notification started, release;
  Collector c;
  auto running = queue.Join("run", JobPriority::kInteractive, Blocking(&started, &release, 1), c.done(), nullptr);
  REQUIRE(running.ok());
  started.WaitForNotification();

  std::atomic<int> abandoned_runs{0}, background_runs{0};
  absl::Notification never;
  never.Notify();
  {
    auto a = queue.Join("abandoned", JobPriority::kInteractive, Blocking(nullptr, &never, 2, &abandoned_runs), c.done(),
                        nullptr);
    auto b = queue.Join("abandoned", JobPriority::kInteractive, Blocking(nullptr, &never, 2, &abandoned_runs), c.done(),
                        nullptr);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
  }  // both tickets gone
  auto background = queue.Join("background", JobPriority::kBackground, Blocking(nullptr, &never, 3, &background_runs),
                               nullptr, nullptr);
  REQUIRE(background.ok());
  background->reset();  // nobody waits, and it still runs
  CHECK(queue.stats().jobs_cancelled == 1);
  release.Notify();
  WaitFor([&] { return background_runs == 1; });
  CHECK(abandoned_runs == 0);
  CHECK(c.count() == 1);
}

TEST_CASE("a running job is asked to stop when its last waiter leaves", "[daemon][queue]") {
  TuneQueue queue(8);
  absl::Notification started, saw_cancel;
  auto work = [&](int, const std::atomic<bool>& cancelled, const TuneQueue::ProgressFn&) -> Result {
    started.Notify();
    for (int i = 0; i < 10000 && !cancelled; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (cancelled) saw_cancel.Notify();
    return absl::CancelledError("stopped");
  };
  Collector c;
  auto ticket = queue.Join("k", JobPriority::kInteractive, work, c.done(), nullptr);
  REQUIRE(ticket.ok());
  started.WaitForNotification();
  ticket->reset();
  CHECK(saw_cancel.WaitForNotificationWithTimeout(absl::Seconds(5)));
  CHECK(c.count() == 0);  // the caller left: nobody is told
}

TEST_CASE("shutdown cancels queued jobs and refuses new ones", "[daemon][queue]") {
  Collector c;
  absl::Notification started, release;
  {
    TuneQueue queue(8);
    auto running = queue.Join("run", JobPriority::kInteractive, Blocking(&started, &release, 1), c.done(), nullptr);
    REQUIRE(running.ok());
    started.WaitForNotification();
    auto queued = queue.Join("queued", JobPriority::kInteractive, Blocking(nullptr, &release, 2), c.done(), nullptr);
    REQUIRE(queued.ok());
    queue.Shutdown();
    auto late = queue.Join("late", JobPriority::kInteractive, Blocking(nullptr, &release, 3), c.done(), nullptr);
    CHECK(late.status().code() == absl::StatusCode::kUnavailable);
    release.Notify();  // the running job still finishes and answers its waiter
    WaitFor([&] { return c.count() == 2; });
  }
  int cancelled = 0, ok = 0;
  for (const Result& r : c.results) {
    cancelled += r.status().code() == absl::StatusCode::kCancelled;
    ok += r.ok();
  }
  CHECK(cancelled == 1);
  CHECK(ok == 1);
}

TEST_CASE("with a slot per GPU, jobs run at once, one per slot, and a key is still one job", "[daemon][queue]") {
  TuneQueue queue(8, /*slots=*/2);
  absl::Notification a_started, b_started, release;
  std::atomic<int> a_runs{0}, b_runs{0};
  absl::Mutex mu;
  std::set<int> slots;  // the slots the jobs ran on
  auto blocking = [&](absl::Notification* started, std::atomic<int>* runs) {
    return [&, started, runs](int slot, const std::atomic<bool>&, const TuneQueue::ProgressFn&) -> Result {
      {
        absl::MutexLock lock(&mu);
        slots.insert(slot);
      }
      ++*runs;
      started->Notify();
      release.WaitForNotification();
      return Answer(1);
    };
  };
  Collector c;
  auto a = queue.Join("a", JobPriority::kInteractive, blocking(&a_started, &a_runs), c.done(), nullptr);
  auto b = queue.Join("b", JobPriority::kBackground, blocking(&b_started, &b_runs), c.done(), nullptr);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  // Both run before either is released: two tunes at once.
  REQUIRE(a_started.WaitForNotificationWithTimeout(absl::Seconds(5)));
  REQUIRE(b_started.WaitForNotificationWithTimeout(absl::Seconds(5)));
  TuneQueue::Stats s = queue.stats();
  CHECK(s.running == 2);
  REQUIRE(s.slot_keys.size() == 2);
  CHECK(std::set<std::string>(s.slot_keys.begin(), s.slot_keys.end()) == std::set<std::string>{"a", "b"});
  // A third key waits for a slot; a caller of a running key joins its job.
  absl::Notification c_started;
  auto third = queue.Join("c", JobPriority::kInteractive, blocking(&c_started, &a_runs), c.done(), nullptr);
  auto again = queue.Join("a", JobPriority::kInteractive, blocking(&a_started, &a_runs), c.done(), nullptr);
  REQUIRE(third.ok());
  REQUIRE(again.ok());
  CHECK((*again)->shared());
  CHECK(queue.stats().queued == 1);
  release.Notify();
  WaitFor([&] { return c.count() == 4; });
  CHECK(a_runs == 2);  // "a" and "c", not "a" twice
  CHECK(b_runs == 1);
  absl::MutexLock lock(&mu);
  CHECK(slots == std::set<int>{0, 1});
  CHECK(queue.stats().slot_keys == std::vector<std::string>{"", ""});
}

TEST_CASE("a slot takes only jobs of its GPU kind: an idle slot of another kind leaves them queued",
          "[daemon][queue]") {
  // Slot 0 is an H100 (kind 0), slots 1 and 2 are H200s (kind 1).
  TuneQueue queue(8, std::vector<int>{0, 1, 1});
  absl::Notification release;
  absl::Mutex mu;
  std::map<std::string, int> ran_on;  // key -> slot
  auto on_slot = [&](const std::string& key) {
    return [&, key](int slot, const std::atomic<bool>&, const TuneQueue::ProgressFn&) -> Result {
      {
        absl::MutexLock lock(&mu);
        ran_on[key] = slot;
      }
      release.WaitForNotification();
      return Answer(1);
    };
  };
  Collector c;
  // Three H200 jobs: two run at once on the two H200 slots, the third waits
  // although the H100's slot is idle.
  std::vector<absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>>> tickets;
  for (const char* key : {"h200-a", "h200-b", "h200-c"}) {
    tickets.push_back(queue.Join(key, JobPriority::kInteractive, on_slot(key), c.done(), nullptr, /*kind=*/1));
    REQUIRE(tickets.back().ok());
  }
  WaitFor([&] { return queue.stats().running == 2; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(queue.stats().running == 2);
  CHECK(queue.stats().queued == 1);
  CHECK(queue.stats().slot_keys[0].empty());
  // An H100 job takes the H100's slot at once, even behind queued H200 work.
  tickets.push_back(queue.Join("h100", JobPriority::kBackground, on_slot("h100"), c.done(), nullptr, /*kind=*/0));
  REQUIRE(tickets.back().ok());
  WaitFor([&] { return queue.stats().running == 3; });
  CHECK(queue.stats().slot_keys[0] == "h100");
  // A kind no slot has is refused, not queued for ever.
  auto nowhere = queue.Join("b200", JobPriority::kInteractive, on_slot("b200"), c.done(), nullptr, /*kind=*/2);
  CHECK(nowhere.status().code() == absl::StatusCode::kFailedPrecondition);
  release.Notify();
  WaitFor([&] { return c.count() == 4; });
  absl::MutexLock lock(&mu);
  CHECK(ran_on.at("h100") == 0);
  for (const char* key : {"h200-a", "h200-b", "h200-c"}) CHECK(ran_on.at(key) != 0);
}

}  // namespace
}  // namespace ktune
