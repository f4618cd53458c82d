#!/usr/bin/env bash
# ktuned's main job: start the daemon on its default socket and SQLite
# database, get every default RMSNorm shape tuned (on a GPU) or compiled and
# answered heuristically (compile-only machines), and print what it stored.
#
#   deploy/main-job.sh [BUILD_DIR]     (KTUNE_KEEP_RUNNING=1 leaves ktuned up)
set -euo pipefail
build_dir=${1:-build}
ktuned="$build_dir/daemon/ktuned"
ktune="$build_dir/client/ktune"
log=${KTUNE_LOG:-$(mktemp -t ktuned.XXXXXX.log)}

"$ktuned" --log-level info 2>"$log" &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" || true; }
[ "${KTUNE_KEEP_RUNNING:-0}" = 1 ] || trap stop EXIT
for _ in $(seq 100); do "$ktune" status >/dev/null 2>&1 && break; sleep 0.1; done
"$ktune" status

policy=tune
"$ktune" status --json | grep -q '"compile_only": true' && policy=heuristic
echo
echo "== RMSNorm forward, bf16 (policy: $policy; daemon log: $log)"
shapes="32768x1024 32768x4096 16384x8192 8192x16384 65536x2048 4096x4096"
printf "%-32s %-9s %-44s %9s %7s\n" problem source config time_us TB/s
for s in $shapes; do
  m=${s%x*}; n=${s#*x}
  "$ktune" get rmsnorm.fwd --m "$m" --n "$n" --dtype bf16 --policy "$policy" --brief
done
echo
echo "== stored entries"
"$ktune" ls
