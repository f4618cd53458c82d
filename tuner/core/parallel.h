// The one way tuner/ spreads work over the machine's cores: NVRTC compiles
// (CompileAll), and the host-side fills and checks of the runners
// (norm_runner.cc, gemm_runner.cc). Threads are started per call and joined
// before it returns; the calling thread works too. Exceptions are not used.
// Thread-safe: calls are independent.
#pragma once

#include <cstdint>
#include <functional>

namespace ktune {

// The machine's cores, at least 1.
int HardwareThreads();

// Calls fn(i) once for every i in [0, tasks), on up to `threads` threads
// (0 = HardwareThreads()), each taking the next unclaimed i: for tasks of
// uneven cost (compiles). fn must be safe to call concurrently.
void ParallelFor(int tasks, int threads, const std::function<void(int)>& fn);

// How many slices ParallelForRanges splits `count` items into: one per
// `min_per_thread` items (below that threads cost more than they save), at
// least 1, at most HardwareThreads().
int RangeSlices(int64_t count, int64_t min_per_thread);

// Splits [0, count) into RangeSlices(count, min_per_thread) contiguous
// slices of ceil(count / slices) items (the last may be shorter; slices past
// the end are skipped) and calls fn(slice, begin, end) for each, one thread
// per slice: for loops over equal items (fills, compares).
void ParallelForRanges(int64_t count, int64_t min_per_thread,
                       const std::function<void(int slice, int64_t begin, int64_t end)>& fn);

}  // namespace ktune
