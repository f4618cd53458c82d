#!/usr/bin/env bash
# The Python package on the GPU machine, in one call: its device tests, then the
# Llama-3-8B decoder-layer bench. Prepare here (carry .gpu, and .wheels for Liger):
#   ../shared/device/pack.sh .gpu build/daemon/ktuned build/client/ktune build/client/libktune_launch.so
#   client/python/make_device_copy.sh .gpu/python build/client/libktune_launch.so
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 -d .wheels liger-kernel        # optional peer
# then run:  [VARS] bash bench/run_python_h200.sh [llama_layer_bench.py args]
#   PYTEST=1   the device pytest (tests/python, gpu tests included) first
#   PYTEST_PATHS  what it runs (default tests/python; e.g. tests/python/test_torch_gpu.py)
#   OVERHEAD=1 bench/torch_op_overhead.py: host microseconds per ktune.torch call (off by default)
#   BENCH=1    bench/llama_layer_bench.py with the arguments given
#   KTUNE_DB   a cache.db to start ktuned on (copied; e.g. one an earlier run brought back)
# Results under $OUT (or /tmp/ktune-python-bench): env.txt, pytest.log, ktuned.log,
# overhead.json, overhead.txt, llama_layer.json, llama_layer.txt, cache.db (ktuned's store
# after the run, so a later call can start from its answers).
set -uo pipefail
out=${OUT:-/tmp/ktune-python-bench}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
export PYTHONPATH=$PWD/.gpu/python${PYTHONPATH:+:$PYTHONPATH}
export KTUNE_PYTHONPATH=$PWD/.gpu/python   # tests/python imports this copy, not a fresh build
lib=$(ls "$PWD"/.gpu/python/ktune/libktune_launch.so "$PWD"/.gpu/bin/libktune_launch.so* 2>/dev/null | head -n 1)
[ -n "$lib" ] && export KTUNE_LIBRARY=$lib
bin=$PWD/.gpu/bin
work=$(mktemp -d)
summary=()
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/env.txt" 2>&1
python3 -c "import torch, grpc, google.protobuf as p; print('torch', torch.__version__, 'grpcio', grpc.__version__, 'protobuf', p.__version__)" >>"$out/env.txt" 2>&1
if ls .wheels/*.whl >/dev/null 2>&1; then  # Liger, as a peer, beside the machine's torch
  # A folder on PYTHONPATH, not a venv: the machine's python3 may itself be a
  # venv, whose packages a --system-site-packages venv does not see.
  python3 -m pip install -q --no-deps --no-index --target "$work/peers" .wheels/*.whl \
    && export PYTHONPATH=$PYTHONPATH:$work/peers
fi

[ -n "${KTUNE_DB:-}" ] && cp "$KTUNE_DB" "$work/cache.db"
export KTUNE_ADDRESS="unix:$work/ktuned.sock"
source bench/device_ktuned.sh
start_ktuned "$KTUNE_ADDRESS" 4

if [ "${PYTEST:-1}" = 1 ]; then
  echo "== device pytest"
  KTUNED=$bin/ktuned timeout 240 python3 -m pytest -q -rs -p no:cacheprovider ${PYTEST_PATHS:-tests/python} 2>&1 |
    tee "$out/pytest.log" | tail -n 25
  summary+=("pytest exit: ${PIPESTATUS[0]}")
fi
if [ "${OVERHEAD:-0}" = 1 ]; then
  echo "== torch op overhead"
  PYTHONUNBUFFERED=1 timeout 180 python3 bench/torch_op_overhead.py --server "$KTUNE_ADDRESS" --out "$out/overhead.json" \
    2>&1 | tee "$out/overhead.txt" | tail -n 12
  summary+=("overhead exit: ${PIPESTATUS[0]}")
fi
if [ "${BENCH:-1}" = 1 ]; then
  echo "== llama layer bench $*"
  PYTHONUNBUFFERED=1 python3 bench/llama_layer_bench.py --server "$KTUNE_ADDRESS" --out "$out/llama_layer.json" "$@" \
    2>&1 | tee "$out/llama_layer.txt" | grep -v "^  "
  summary+=("bench exit: ${PIPESTATUS[0]}")
fi
kill -TERM "$pid"; wait "$pid"; summary+=("ktuned exit: $?")
cp "$work/cache.db" "$out/cache.db" 2>/dev/null
printf '%s\n' "${summary[@]}"
