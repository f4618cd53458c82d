#!/usr/bin/env bash
# Everything bench/ measures, in one call on the GPU machine. Build and pack here:
#   ../shared/device/pack.sh .gpu build/daemon/ktuned build/client/ktune \
#       build/bench/ktune_get_latency build/bench/ktune_gemm_bench build/tests/ktune_gpu_tests \
#       && strip --strip-debug .gpu/bin/*
# then run (carry .gpu):  [VARS] bash bench/run_h200.sh [norm_bench.py args]
#   GPU_TESTS='[gpu]~[perf]~[perf-fwd]'  Catch2 filter for ktune_gpu_tests ("" skips them)
#   NORM=1      bench/norm_bench.py with the arguments given (peers in the same run;
#               --shapes cliff --peers "" checks issue 3's non-power-of-two N alone)
#   TUNING=0    bench/tuning_bench.py (cold/warm tunes, stable winners, descent)
#   LATENCY=1   GetConfig latency on a cache hit
#   GEMM=0      bench/gemm_bench.py: ktune_gemm_bench (both GEMM sources tuned in process)
#               beside torch.matmul / torch._scaled_mm (GEMM_SHAPES=MxNxK,..., GEMM_DTYPE=bf16|fp8,
#               GEMM_ROUNDS=5: timings of ktune's answer and of torch, alternated after each
#               shape's tune; 0 compares the tune's own figure with one torch timing)
# Full results go to $OUT (or /tmp/ktune-bench); short tables print last.
set -uo pipefail
out=${OUT:-/tmp/ktune-bench}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
bin=$PWD/.gpu/bin
work=$(mktemp -d)
sock="unix:$work/ktuned.sock"
# At most 8 files come back from a run on the GPU machine: keep to env.txt, gpu_tests.log,
# ktuned.log, norm_bench.{json,txt}, tuning_bench.{json,txt}, latency.txt,
# gemm_bench.{json,txt} (not all in one run).
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/env.txt" 2>&1
summary=()

gpu_filter=${GPU_TESTS-'[gpu]~[perf]~[perf-fwd]'}
if [ -n "$gpu_filter" ]; then
  echo "== gpu tests $gpu_filter"
  "$bin/ktune_gpu_tests" "$gpu_filter" 2>&1 | tee "$out/gpu_tests.log" | tail -n 15
  summary+=("gpu tests exit: ${PIPESTATUS[0]}")
fi

# Peer packages carried as wheels in .wheels (Liger; Quack with its CuTe-DSL
# wheels, whose 92 MB libs-cu13 wheel must be brought over two calls and put
# together in PEER_WHEELS_DIR first): installed into a folder on PYTHONPATH,
# beside the machine's torch, for norm_bench.py's --peers liger,quack.
wheels=$(ls .wheels/*.whl "${PEER_WHEELS_DIR:-/nonexistent}"/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  python3 -m pip install -q --no-deps --no-index --no-compile --target "$work/peers" $wheels \
    && export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$work/peers
fi

source bench/device_ktuned.sh
start_ktuned "$sock"

if [ "${NORM:-1}" = 1 ]; then
  echo "== norm bench $*"
  PYTHONUNBUFFERED=1 python3 bench/norm_bench.py --ktune "$bin/ktune" --server "$sock" \
    --out "$out/norm_bench.json" --workdir "$work" "$@" 2>&1 | tee "$out/norm_bench.txt" | grep -v "^  "
fi
if [ "${LATENCY:-1}" = 1 ]; then
  "$bin/ktune" --server "$sock" tune rmsnorm.fwd --m 4096 --n 4096 >/dev/null
  "$bin/ktune_get_latency" --server "$sock" --m 4096 --n 4096 --calls 20000 | tee "$out/latency.txt"
fi
kill -TERM "$pid"; wait "$pid"; summary+=("ktuned exit: $?")

if [ "${TUNING:-0}" = 1 ]; then
  echo "== tuning bench"
  PYTHONUNBUFFERED=1 python3 bench/tuning_bench.py --ktuned "$bin/ktuned" --ktune "$bin/ktune" \
    --out "$out/tuning_bench.json" 2>&1 | tee "$out/tuning_bench.txt" | grep -v "^  "
fi
if [ "${GEMM:-0}" = 1 ]; then
  echo "== gemm bench"
  PYTHONUNBUFFERED=1 python3 bench/gemm_bench.py --ktune-gemm-bench "$bin/ktune_gemm_bench" \
    --dtype "${GEMM_DTYPE:-bf16}" --rounds "${GEMM_ROUNDS:-5}" ${GEMM_SHAPES:+--shapes "$GEMM_SHAPES"} --out "$out/gemm_bench.json" 2>&1 |
    tee "$out/gemm_bench.txt"
  summary+=("gemm bench exit: ${PIPESTATUS[0]}")
fi
printf '%s\n' "${summary[@]}"
