#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in their own build
# directory and runs each for a bounded time from a copy of its checked-in
# seed corpus. Any crash, sanitizer report, timeout or memory blow-up fails,
# and the input that caused it is printed (base64) so it can be replayed:
#   base64 -d > crash && build-fuzz/tests/fuzz/ktune_NAME_fuzzer crash
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_SECONDS per target
# (default 20), JOBS (default: all cores; targets run that many at a time).
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-20}
jobs=${JOBS:-$(nproc)}
targets=(bundle problem shapes_file model_config)

echo "== building the fuzz targets in $build_dir"
start=$(date +%s)
CXX=${FUZZ_CXX:-clang++} cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCUDAToolkit_ROOT=/usr/local/cuda -DKTUNE_BUILD_FUZZERS=ON -DKTUNE_BUILD_TESTS=OFF \
  -DKTUNE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs" --target ktune_fuzzers
echo "== fuzz targets built in $(( $(date +%s) - start )) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_one() {
  local name=$1 dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp tests/fuzz/corpus/"$name"/* "$dir/corpus/"
  # -timeout: one input may take at most 10 s; -rss_limit_mb also caps any
  # single allocation (malloc_limit_mb defaults to it).
  if "$build_dir/tests/fuzz/ktune_${name}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 \
       -timeout=10 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" \
       >"$dir/log" 2>&1; then
    echo "-- $name: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$') runs)"
    return 0
  fi
  echo "-- $name: FAILED"
  tail -n 60 "$dir/log"
  for f in "$dir"/artifacts/*; do
    [ -e "$f" ] || continue
    echo "-- input $(basename "$f") ($(stat -c %s "$f") bytes, base64):"
    head -c 65536 "$f" | base64 -w 0; echo
  done
  return 1
}

echo "== fuzzing each target for ${seconds} s, ${jobs} at a time"
failed=0
pids=()
names=()
for name in "${targets[@]}"; do
  run_one "$name" >"$work/$name.out" 2>&1 &
  pids+=($!); names+=("$name")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    cat "$work/${names[0]}.out"
    pids=("${pids[@]:1}"); names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  cat "$work/${names[$i]}.out"
done
if [ "$failed" -ne 0 ]; then
  echo "error: a fuzz target failed (see above)" >&2
  exit 1
fi
echo "== fuzzing: no crash"
