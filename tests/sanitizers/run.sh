#!/usr/bin/env bash
# The daemon's, the cache's and the client's unit tests under the sanitizers,
# each in a clang build whose every library is instrumented
# (tests/sanitizers/CMakeLists.txt says which tests each binary holds):
#
#   ASan+UBSan  ktune_unit_tests in the fuzz build (tests/fuzz/run_fuzzers.sh
#               configures it, and has built the tuner, cache and client
#               libraries with ASan+UBSan already: only the daemon library and
#               the tests are compiled here). Any report fails the run.
#   TSan        ktune_locking_tests in a build of its own, of only the
#               libraries it links (not the client's), with halt_on_error:
#               the tuning queue, entry cache, metrics, reactors with fakes,
#               server checks and store tests. Debian's abseil is not built
#               with TSan; tsan_absl_sync.cc makes its locks visible, and a
#               canary proves that first. No suppressions are needed.
#
# Tests that start ktuned ([e2e]) or compile with NVRTC ([slow]; [gpu] runs
# kernels) are left to the plain build's ctest: NVRTC and gRPC are not
# instrumented (under TSan, what a live server passes between threads would
# read as races), and a sanitized ktuned would add minutes of build.
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), TSAN_BUILD_DIR (default
# build-tsan), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
fuzz_dir=${FUZZ_BUILD_DIR:-build-fuzz}
tsan_dir=${TSAN_BUILD_DIR:-build-tsan}
jobs=${JOBS:-$(nproc)}
# --warn NoTests: a selection that matches nothing fails instead of passing.
catch_args=("~[e2e]~[slow]~[gpu]" --warn NoTests)

if [ ! -f "$fuzz_dir/CMakeCache.txt" ]; then
  echo "error: $fuzz_dir is not configured: run tests/fuzz/run_fuzzers.sh first" >&2
  exit 1
fi
echo "== building the ASan+UBSan unit tests in $fuzz_dir"
start=$(date +%s)
cmake -S . -B "$fuzz_dir" -DKTUNE_BUILD_SANITIZER_TESTS=ON >/dev/null
cmake --build "$fuzz_dir" -j "$jobs" --target ktune_unit_tests
echo "== ASan+UBSan unit tests built in $(( $(date +%s) - start )) s"
start=$(date +%s)
# UB aborts already (-fno-sanitize-recover); the stack says where.
# From the build folder, as ctest runs tests: a test that finds its data
# through __FILE__ sees a path relative to it where ccache (base_dir) made one.
(cd "$fuzz_dir" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  tests/sanitizers/ktune_unit_tests "${catch_args[@]}")
echo "== ASan+UBSan unit tests passed in $(( $(date +%s) - start )) s"

echo "== building the TSan locking tests in $tsan_dir"
start=$(date +%s)
CXX=${TSAN_CXX:-clang++} cmake -S . -B "$tsan_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DKTUNE_TSAN=ON -DKTUNE_BUILD_SANITIZER_TESTS=ON \
  -DKTUNE_BUILD_TESTS=OFF -DKTUNE_BUILD_BENCH=OFF >/dev/null
cmake --build "$tsan_dir" -j "$jobs" --target ktune_locking_tests
echo "== TSan locking tests built in $(( $(date +%s) - start )) s"
start=$(date +%s)
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# TSan must see abseil's locks (tsan_absl_sync.cc), and a race past them.
canary=$tsan_dir/tests/sanitizers/ktune_tsan_canary
"$canary" >/dev/null || { echo "error: TSan reports a race in $canary where there is none" >&2; exit 1; }
if "$canary" race >/dev/null 2>&1; then echo "error: TSan misses the race of '$canary race'" >&2; exit 1; fi
(cd "$tsan_dir" && tests/sanitizers/ktune_locking_tests "${catch_args[@]}")
echo "== TSan locking tests passed in $(( $(date +%s) - start )) s"
