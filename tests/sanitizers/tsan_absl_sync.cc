// ThreadSanitizer and Debian's abseil. libabsl_synchronization is not built
// with TSan, so what absl::Mutex and absl::Notification do to the
// happens-before order is invisible to it, and every member that an
// absl::Mutex guards reads as a race: 138 reports over the locking tests,
// each between two accesses of instrumented code (ktune's, or library
// headers inlined into it). A suppression cannot tell those
// from real races, so the TSan build links this file into its tests and wraps
// (ld --wrap, tests/sanitizers/CMakeLists.txt) each synchronization call that
// ktune makes, telling TSan what the call does through its annotation API.
// Calls made inside abseil or gRPC are not wrapped: what they guard is not
// instrumented. For the same reason an object that a live gRPC server passes
// between ktune's threads carries no edge that TSan sees, which is why the
// TSan run keeps to tests with fakes and no server (run.sh).
//
// Await is the one call that is not passed through: absl evaluates a
// waiter's condition in whichever thread unlocks the mutex, inside its
// Unlock, which TSan would see after that thread's release and report as a
// race with the next holder. Here the waiter evaluates its own condition,
// holding the lock, and sleeps between tries: slower, with the same contract
// (it returns holding the lock, the condition true).
//
// A synchronization call that ktune starts to use and this file does not wrap
// shows up as races on what it guards: add it here and to the --wrap list.
#include <sanitizer/tsan_interface.h>

#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

// absl's mangled names: _ZN (or _ZNK for const members), then the inline
// namespace that CMake reads from absl/base/options.h (KTUNE_ABSL_NS, e.g.
// 4absl7debian3), then the member.
#define KTUNE_CAT3_(a, b, c) a##b##c
#define KTUNE_CAT3(a, b, c) KTUNE_CAT3_(a, b, c)
#define KTUNE_REAL(z, name) KTUNE_CAT3(__real_, z, KTUNE_CAT3(KTUNE_ABSL_NS, name, ))
#define KTUNE_WRAP(z, name) KTUNE_CAT3(__wrap_, z, KTUNE_CAT3(KTUNE_ABSL_NS, name, ))

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;

extern "C" {
void KTUNE_REAL(_ZN, 5Mutex4LockEv)(Mutex* mu);
void KTUNE_REAL(_ZN, 5Mutex6UnlockEv)(Mutex* mu);
void KTUNE_REAL(_ZN, 5Mutex10ReaderLockEv)(Mutex* mu);
void KTUNE_REAL(_ZN, 5Mutex12ReaderUnlockEv)(Mutex* mu);
bool KTUNE_REAL(_ZN, 5Mutex7TryLockEv)(Mutex* mu);
void KTUNE_REAL(_ZN, 5MutexD1Ev)(Mutex* mu);
void KTUNE_REAL(_ZN, 5MutexD2Ev)(Mutex* mu);
void KTUNE_REAL(_ZN, 7CondVar4WaitEPNS0_5MutexE)(CondVar* cv, Mutex* mu);
bool KTUNE_REAL(_ZN, 7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE)(CondVar* cv, Mutex* mu, Duration t);
void KTUNE_REAL(_ZN, 12Notification6NotifyEv)(Notification* n);
void KTUNE_REAL(_ZNK, 12Notification19WaitForNotificationEv)(const Notification* n);
bool KTUNE_REAL(_ZNK, 12Notification30WaitForNotificationWithTimeoutENS0_8DurationE)(const Notification* n, Duration t);

void KTUNE_WRAP(_ZN, 5Mutex4LockEv)(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, 0);
  KTUNE_REAL(_ZN, 5Mutex4LockEv)(mu);
  __tsan_mutex_post_lock(mu, 0, 0);
}

void KTUNE_WRAP(_ZN, 5Mutex6UnlockEv)(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  KTUNE_REAL(_ZN, 5Mutex6UnlockEv)(mu);
  __tsan_mutex_post_unlock(mu, 0);
}

void KTUNE_WRAP(_ZN, 5Mutex10ReaderLockEv)(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_read_lock);
  KTUNE_REAL(_ZN, 5Mutex10ReaderLockEv)(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_read_lock, 0);
}

void KTUNE_WRAP(_ZN, 5Mutex12ReaderUnlockEv)(Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, __tsan_mutex_read_lock);
  KTUNE_REAL(_ZN, 5Mutex12ReaderUnlockEv)(mu);
  __tsan_mutex_post_unlock(mu, __tsan_mutex_read_lock);
}

bool KTUNE_WRAP(_ZN, 5Mutex7TryLockEv)(Mutex* mu) {
  __tsan_mutex_pre_lock(mu, __tsan_mutex_try_lock);
  const bool locked = KTUNE_REAL(_ZN, 5Mutex7TryLockEv)(mu);
  __tsan_mutex_post_lock(mu, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed), 0);
  return locked;
}

void KTUNE_WRAP(_ZN, 5MutexD1Ev)(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  KTUNE_REAL(_ZN, 5MutexD1Ev)(mu);
}

void KTUNE_WRAP(_ZN, 5MutexD2Ev)(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  KTUNE_REAL(_ZN, 5MutexD2Ev)(mu);
}

// REQUIRES: mu held. The waiter tests its own condition; see the top.
void KTUNE_WRAP(_ZN, 5Mutex5AwaitERKNS0_9ConditionE)(Mutex* mu, const Condition& cond) {
  while (!cond.Eval()) {
    KTUNE_WRAP(_ZN, 5Mutex6UnlockEv)(mu);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    KTUNE_WRAP(_ZN, 5Mutex4LockEv)(mu);
  }
}

bool KTUNE_WRAP(_ZN, 5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE)(Mutex* mu, const Condition& cond,
                                                                               Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!cond.Eval()) {
    if (absl::Now() >= deadline) return false;
    KTUNE_WRAP(_ZN, 5Mutex6UnlockEv)(mu);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    KTUNE_WRAP(_ZN, 5Mutex4LockEv)(mu);
  }
  return true;
}

// A wait unlocks mu and locks it again before it returns.
void KTUNE_WRAP(_ZN, 7CondVar4WaitEPNS0_5MutexE)(CondVar* cv, Mutex* mu) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  KTUNE_REAL(_ZN, 7CondVar4WaitEPNS0_5MutexE)(cv, mu);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
}

bool KTUNE_WRAP(_ZN, 7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE)(CondVar* cv, Mutex* mu, Duration t) {
  __tsan_mutex_pre_unlock(mu, 0);
  __tsan_mutex_post_unlock(mu, 0);
  const bool timed_out = KTUNE_REAL(_ZN, 7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE)(cv, mu, t);
  __tsan_mutex_pre_lock(mu, 0);
  __tsan_mutex_post_lock(mu, 0, 0);
  return timed_out;
}

// What the notifier did before Notify() happens before what a waiter does
// after its wait returns true. (HasBeenNotified() is inline and reads an
// atomic that only abseil writes: TSan cannot see that edge; ktune does not
// call it.)
void KTUNE_WRAP(_ZN, 12Notification6NotifyEv)(Notification* n) {
  __tsan_release(n);
  KTUNE_REAL(_ZN, 12Notification6NotifyEv)(n);
}

void KTUNE_WRAP(_ZNK, 12Notification19WaitForNotificationEv)(const Notification* n) {
  KTUNE_REAL(_ZNK, 12Notification19WaitForNotificationEv)(n);
  __tsan_acquire(const_cast<Notification*>(n));
}

bool KTUNE_WRAP(_ZNK, 12Notification30WaitForNotificationWithTimeoutENS0_8DurationE)(const Notification* n,
                                                                                     Duration t) {
  const bool notified = KTUNE_REAL(_ZNK, 12Notification30WaitForNotificationWithTimeoutENS0_8DurationE)(n, t);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
}  // extern "C"
