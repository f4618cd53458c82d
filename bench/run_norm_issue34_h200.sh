#!/usr/bin/env bash
# Issue 34's norm bench on the GPU machine, one PART per call (each fits one
# 600 s call; the machine must stay warm between calls, 30 s, for the parts to
# share ktuned's store and the installed peers):
#   stage      reassemble the Quack library wheel from the parts carried so far, install the peers (~15 s)
#   rms        RMSNorm fwd+bwd, bf16, the eight training shapes (~250-350 s)
#   ln         LayerNorm fwd+bwd, bf16, the same shapes (~250-350 s)
#   variants   fp16 RMSNorm and LayerNorm on three shapes, then the fused residual add (rmsnorm_add,
#              forward) on the eight training shapes (~300-400 s)
#   decode     RMSNorm fwd+bwd and rmsnorm_add, bf16, decode M 1-256 x N 4096, 8192 and the q/k
#              shapes, with the launch floor (~300-450 s; OPS=rmsnorm,rmsnorm_add,layernorm adds LayerNorm)
#   cliff      bench/norm_cliff.py: RMSNorm forward over N = 8..1024 (every 8) and to 16384 (every 256)
#              at M = 4096 and 256, heuristic and a tuned subset, on a fresh store (~300-400 s)
# Build and pack here (README "Getting work to the GPU machine"):
#   ../shared/device/pack.sh .gpu build/daemon/ktuned build/client/ktune && strip --strip-debug .gpu/bin/*
# The peers travel as wheels (see the report in bench/README.md): .wheels holds the small ones (Quack's
# nvidia-cutlass-dsl-libs-core among them: without it `cutlass` has no cutlass_dsl and Quack does not import) and
# NAME.whl.sha256 of the 92 MB nvidia-cutlass-dsl-libs-cu13 wheel, whose split parts lie in .wheels-1,
# .wheels-2, .wheels-3 (38 MiB, 38 MiB, 12 MiB). Carry them over consecutive calls while the machine is
# warm, e.g.  1: carry .gpu,.wheels-3  PART=cliff   2: carry .wheels,.wheels-1  PART=stage
#             3: carry .wheels-2  PART=rms   4: PART=ln   5: PART=variants   6: PART=decode
# Every part keeps what earlier calls brought in .bench-state/ (ignored by .gitignore, so a warm machine
# keeps it; ignored only in .git/info/exclude it was cleared between calls on 2026-12-07): the
# parts and the reassembled wheel, the installed peers, ktuned's store (so no part re-tunes what another
# tuned) and each part's JSON (so a part run again resumes where a cut-short call stopped; FRESH=1
# starts it over). Without the Quack parts the run goes on and Quack's columns are n/a, with the reason.
# Run:  PART=rms bash bench/run_norm_issue34_h200.sh [extra norm_bench.py / norm_cliff.py args]
#   PEERS=eager,compile,liger,quack   (add compile_ma for max-autotune: minutes more a part)
#   BUDGET=500   seconds after which no new case starts (the table still prints); a hard timeout at 580
#   COMMIT=abc1234   the commit measured (the device copy has no .git)
#   KTUNE_DB=path    a cache.db (one an earlier call brought back) to seed ktuned's store on a cold machine
# Results under $OUT (<= 8 files): env.txt, install.log, ktuned.log, PART.json (and variants-add.json),
# PART.txt, cache.db; the Markdown table prints last.
set -uo pipefail
part=${PART:-${1:-}}
case "$part" in stage | rms | ln | variants | decode | cliff) ;; *)
  echo "PART=stage|rms|ln|variants|decode|cliff bash bench/run_norm_issue34_h200.sh [args]" >&2; exit 2 ;;
esac
[ "${1:-}" = "$part" ] && shift
out=${OUT:-/tmp/ktune-norm34}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
bin=$PWD/.gpu/bin
state=$PWD/.bench-state/norm34
mkdir -p "$state/wheels"
scratch=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$out/env.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >>"$out/env.txt" 2>&1

# --- peers: keep what this call carried, put the big wheel together, install once per set of wheels.
big=nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
cp -n .wheels/*.whl .wheels/*.sha256 "$state/wheels/" 2>/dev/null
cp -n .wheels-*/"$big".part-* "$state/wheels/" 2>/dev/null
if [ ! -f "$state/wheels/$big" ] && [ -f "$state/wheels/$big.sha256" ]; then
  parts=$(ls "$state/wheels/$big".part-* 2>/dev/null | wc -l)
  cat "$state/wheels/$big".part-* >"$state/wheels/$big.tmp" 2>/dev/null
  if (cd "$state/wheels" && sed "s/\$/.tmp/" "$big.sha256" | sha256sum -c --status); then
    mv "$state/wheels/$big.tmp" "$state/wheels/$big" && rm -f "$state/wheels/$big".part-*
    echo "reassembled $big from $parts parts" | tee -a "$out/install.log"
  else
    rm -f "$state/wheels/$big.tmp"
    echo "Quack's $big: $parts of 3 parts here (.wheels-1, -2, -3; carry the rest): Quack will be n/a" |
      tee -a "$out/install.log"
  fi
fi
wheels=$(ls "$state/wheels/"*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  want=$(basename -a $wheels | sort | tr '\n' ' ')
  if [ "$(cat "$state/peers.installed" 2>/dev/null)" != "$want" ]; then
    rm -rf "$state/peers"
    # A folder on PYTHONPATH, not a venv: the machine's python3 may itself be a venv (run_python_h200.sh).
    if python3 -m pip install -q --no-deps --no-index --no-compile --target "$state/peers" $wheels \
      >>"$out/install.log" 2>&1; then
      echo "$want" >"$state/peers.installed"; echo "installed: $want" >>"$out/install.log"
    else
      echo "pip install of the peer wheels failed (above); the peers that do not import are n/a" >>"$out/install.log"
    fi
  fi
  # nvidia-cutlass-dsl's .pth (which puts dsl_packages on sys.path) is not read from a PYTHONPATH folder.
  export PYTHONPATH=$state/peers:$state/peers/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
fi
python3 - >>"$out/install.log" 2>&1 <<'EOF'
for name in ("liger_kernel", "cutlass", "quack.rmsnorm"):
    try:
        m = __import__(name, fromlist=["_"])
        print(f"import {name}: ok ({getattr(m, '__version__', '')} {getattr(m, '__file__', '')})")
    except Exception as e:
        print(f"import {name}: {type(e).__name__}: {e}")
EOF
tail -n 4 "$out/install.log"
[ "$part" = stage ] && { ls "$state/wheels" | tee -a "$out/env.txt"; exit 0; }

# --- ktuned: the shared store for the bench parts, a fresh one for the cliff (see norm_cliff.py).
if [ "$part" = cliff ]; then
  work=$scratch/ktuned
else
  work=$state/ktuned
  mkdir -p "$work"
  [ -n "${KTUNE_DB:-}" ] && [ ! -s "$work/cache.db" ] && cp "$KTUNE_DB" "$work/cache.db"
fi
mkdir -p "$work"
source bench/device_ktuned.sh
start_ktuned "unix:$scratch/ktuned.sock" 4
sock="unix:$scratch/ktuned.sock"
peers=${PEERS:-eager,compile,liger,quack}
budget=${BUDGET:-500}
common=(--ktune "$bin/ktune" --server "$sock" --workdir "$scratch" ${COMMIT:+--commit "$COMMIT"})
resume=--resume
[ "${FRESH:-0}" = 1 ] && rm -f "$state/$part.json" "$state/variants-add.json"

bench() {  # bench NAME [norm_bench.py args]: one norm_bench.py run, its JSON kept in $state
  local name=$1; shift
  PYTHONUNBUFFERED=1 timeout $((580 - SECONDS)) python3 bench/norm_bench.py "${common[@]}" --peers "$peers" \
    --out "$state/$name.json" $resume --budget-s $((budget - SECONDS)) --no-markdown "$@"
  local rc=$?
  cp "$state/$name.json" "$out/$name.json" 2>/dev/null
  return $rc
}
case "$part" in
  rms) bench rms --ops rmsnorm --shapes all --dtypes bf16 "$@" ;;
  ln) bench ln --ops layernorm --shapes all --dtypes bf16 "$@" ;;
  variants)
    bench variants --ops rmsnorm,layernorm --shapes fp16 --dtypes fp16 "$@"
    bench variants-add --ops rmsnorm_add --shapes all --dtypes bf16 "$@" ;;
  decode) bench decode --ops "${OPS:-rmsnorm,rmsnorm_add}" --shapes inference --dtypes bf16 "$@" ;;
  cliff)
    PYTHONUNBUFFERED=1 timeout $((580 - SECONDS)) python3 bench/norm_cliff.py "${common[@]}" \
      --out "$out/cliff.json" --budget-s $((${BUDGET:-400} - SECONDS)) "$@" ;;
esac 2>&1 | tee "$out/$part.txt" | grep -v "^  "
kill -TERM "$pid"; wait "$pid"; echo "ktuned exit: $?"
[ "$part" != cliff ] && cp "$work/cache.db" "$out/cache.db" 2>/dev/null
echo
if [ "$part" = cliff ]; then
  python3 bench/norm_summary.py --cliff "$out/cliff.json"
else
  case "$part" in variants) set -- "$out/variants.json" "$out/variants-add.json" ;; *) set -- "$out/$part.json" ;; esac
  python3 bench/norm_summary.py "$@"
fi
