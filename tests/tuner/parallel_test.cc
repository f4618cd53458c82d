// The one thread pool of tuner/: every task runs once, and ranges cover
// their items once, in contiguous slices.
#include "tuner/core/parallel.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <utility>
#include <vector>

namespace ktune {
namespace {

TEST_CASE("ParallelFor runs every task exactly once, whatever the threads", "[tuner][parallel]") {
  for (int threads : {0, 1, 3, 64}) {
    INFO("threads " << threads);
    std::vector<std::atomic<int>> runs(100);
    ParallelFor(100, threads, [&](int i) { ++runs[i]; });
    for (const std::atomic<int>& r : runs) CHECK(r == 1);
  }
  int none = 0;
  ParallelFor(0, 4, [&](int) { ++none; });
  CHECK(none == 0);
}

TEST_CASE("ParallelForRanges covers every item once in at most RangeSlices slices", "[tuner][parallel]") {
  CHECK(RangeSlices(10, 100) == 1);  // below one slice's worth: the caller's thread alone
  CHECK(RangeSlices(0, 100) == 1);
  CHECK(RangeSlices(int64_t{1} << 40, 1) == HardwareThreads());
  const int64_t count = 1000;
  std::vector<std::atomic<int>> seen(count);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ParallelForRanges(count, 10, [&](int slice, int64_t begin, int64_t end) {
    CHECK(slice >= 0);
    CHECK(slice < RangeSlices(count, 10));
    for (int64_t i = begin; i < end; ++i) ++seen[i];
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(begin, end);
  });
  for (const std::atomic<int>& s : seen) CHECK(s == 1);
  CHECK(static_cast<int>(ranges.size()) <= RangeSlices(count, 10));
}

}  // namespace
}  // namespace ktune
