#include "tuner/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace ktune {

int HardwareThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void ParallelFor(int tasks, int threads, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  if (threads <= 0) threads = HardwareThreads();
  threads = std::min(threads, tasks);
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < tasks; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();  // the calling thread works too
  for (std::thread& t : pool) t.join();
}

int RangeSlices(int64_t count, int64_t min_per_thread) {
  return static_cast<int>(
      std::clamp<int64_t>(count / std::max<int64_t>(min_per_thread, 1), 1, static_cast<int64_t>(HardwareThreads())));
}

void ParallelForRanges(int64_t count, int64_t min_per_thread,
                       const std::function<void(int slice, int64_t begin, int64_t end)>& fn) {
  const int slices = RangeSlices(count, min_per_thread);
  if (slices == 1) {
    fn(0, 0, count);
    return;
  }
  const int64_t per = (count + slices - 1) / slices;
  std::vector<std::thread> pool;
  for (int t = 0; t < slices; ++t) {
    const int64_t begin = t * per;
    const int64_t end = std::min(count, begin + per);
    if (begin >= end) break;
    pool.emplace_back(fn, t, begin, end);
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace ktune
