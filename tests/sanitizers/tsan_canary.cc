// Proof that the TSan build sees what absl::Mutex and absl::Notification
// order (tsan_absl_sync.cc), run by tests/sanitizers/run.sh before the
// locking tests: with no argument every access is ordered and TSan must stay
// silent; with "race" two threads guard one counter by two different mutexes
// and TSan must report it. A build where either fails checks nothing.
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

int counter = 0;  // guarded by a, or by b too in the racy run
int payload = 0;  // published through a Notification
int ready = 0;    // guarded by a, awaited
absl::Mutex a, b;

void Count(absl::Mutex* mu) {
  for (int i = 0; i < 1000; ++i) {
    absl::MutexLock lock(mu);
    ++counter;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool race = argc > 1 && std::strcmp(argv[1], "race") == 0;
  std::thread t1(Count, &a), t2(Count, race ? &b : &a);
  t1.join();
  t2.join();

  absl::Notification published;
  std::thread writer([&] {
    payload = 1;
    published.Notify();
  });
  published.WaitForNotification();
  const int seen = payload;
  writer.join();

  std::thread setter([] {
    absl::MutexLock lock(&a);
    ready = 1;
  });
  {
    absl::MutexLock lock(&a);
    a.Await(absl::Condition(
        +[](int* r) { return *r == 1; }, &ready));
  }
  setter.join();
  std::printf("counter %d, payload %d\n", counter, seen);
  return 0;
}
