# Sourced by the bench/run_*_h200.sh drivers: start_ktuned starts .gpu/bin/ktuned
# on a Unix socket in a scratch folder, waits until it answers, and appends its
# status to env.txt. Reads bin, work, out; sets pid (stop it with kill -TERM "$pid").
#   start_ktuned SOCKET_ADDRESS [STATUS_LINES]
start_ktuned() {
  local sock=$1 lines=${2:-8}
  "$bin/ktuned" --listen "$sock" --db "$work/cache.db" --kernel-cache-dir "$work/kernels" \
    --log-level info --no-background-tunes 2>"$out/ktuned.log" &
  pid=$!
  for _ in $(seq 300); do "$bin/ktune" --server "$sock" status >/dev/null 2>&1 && break; sleep 0.1; done
  "$bin/ktune" --server "$sock" status | head -n "$lines" | tee -a "$out/env.txt"
}
