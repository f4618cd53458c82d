#!/usr/bin/env bash
# Everything bench/ measures, in one call on the GPU machine:
#   ../shared/device/pack.sh .gpu build/daemon/ktuned build/client/ktune \
#       build/bench/ktune_get_latency build/tests/ktune_gpu_tests
#   run (carry .gpu): bash bench/run_h200.sh [--ops rmsnorm] [--shapes 4096x4096] ...
# Arguments go to bench/norm_bench.py. Set SKIP_GPU_TESTS=1 to leave the
# [gpu] tests out. Full results go to $OUT (or /tmp/ktune-bench); short tables
# print last.
set -uo pipefail
out=${OUT:-/tmp/ktune-bench}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
bin=$PWD/.gpu/bin
work=$(mktemp -d)
sock="unix:$work/ktuned.sock"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1

gpu_rc=skipped
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
  echo "== gpu tests"
  "$bin/ktune_gpu_tests" 2>&1 | tee "$out/gpu_tests.log" | tail -n 30
  gpu_rc=${PIPESTATUS[0]}
fi

"$bin/ktuned" --listen "$sock" --db "$work/cache.db" --log-level info 2>"$out/ktuned.log" &
pid=$!
for _ in $(seq 200); do "$bin/ktune" --server "$sock" status >/dev/null 2>&1 && break; sleep 0.1; done
"$bin/ktune" --server "$sock" status | tee "$out/status.txt"

echo "== norm bench"
PYTHONUNBUFFERED=1 python3 bench/norm_bench.py --ktune "$bin/ktune" --server "$sock" \
  --out "$out/norm_bench.json" --workdir "$work" "$@" 2>&1 | tee "$out/norm_bench.txt"

echo "== GetConfig latency on a cache hit (Unix socket)"
"$bin/ktune_get_latency" --server "$sock" --m 4096 --n 4096 --calls 20000 | tee "$out/latency.txt"
"$bin/ktune" --server "$sock" ls | tee "$out/ls.txt"
kill -TERM "$pid"; wait "$pid"; echo "ktuned exit: $?"
grep -E "tune_done" "$out/ktuned.log" | sed 's/.*key=/key=/' | tail -n 12
echo "gpu tests exit: $gpu_rc"
