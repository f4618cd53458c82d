#!/usr/bin/env bash
# bench/load_bench.cc on the GPU machine's 16 CPUs, over several splits of its
# cores between ktuned and the load generator, in one call. Build and pack here:
#   ../shared/device/pack.sh .gpu build/daemon/ktuned build/bench/ktune_load_bench \
#       && strip --strip-debug .gpu/bin/* .gpu/lib/*
# then run (carry .gpu):  bash bench/run_load_h200.sh
# ktuned is made compile-only (CUDA_VISIBLE_DEVICES empty): it serves what a
# compile-only daemon serves, and the GPU plays no part in a lookup.
# SPLITS overrides the set-ups: "daemon-cpus/client-cpus/load-threads ...";
# SECONDS_PER_RUN and ROUNDS the length of each measurement and how many
# alternated rounds each row is the median of.
set -uo pipefail
out=${OUT:-/tmp/ktune-load}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64
splits=${SPLITS:-"0/1/1 0/1-4/4 0-3/4-15/8 0-7/8-15/4 0-11/12-15/4"}
seconds=${SECONDS_PER_RUN:-1}
rounds=${ROUNDS:-7}  # alternated rounds of empty, hit, heuristic; medians are reported
nproc >"$out/env.txt"; lscpu | grep -E "Model name|Socket|Thread|NUMA node" >>"$out/env.txt"
for split in $splits; do
  IFS=/ read -r daemon client threads <<<"$split"
  daemon=$(echo "$daemon" | sed 's/\([0-9]*\)-\([0-9]*\)/$(seq -s, \1 \2)/g'); daemon=$(eval echo "$daemon")
  client=$(echo "$client" | sed 's/\([0-9]*\)-\([0-9]*\)/$(seq -s, \1 \2)/g'); client=$(eval echo "$client")
  echo "== daemon CPUs $daemon, load generator CPUs $client, $threads load threads" | tee -a "$out/load.txt"
  CUDA_VISIBLE_DEVICES= .gpu/bin/ktune_load_bench --ktuned "$PWD/.gpu/bin/ktuned" --daemon-cpus "$daemon" \
    --client-cpus "$client" --load-threads "$threads" --seconds "$seconds" --rounds "$rounds" --warmup 0.3 2>&1 | tee -a "$out/load.txt" | tail -n 10
done
