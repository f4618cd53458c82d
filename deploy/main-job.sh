#!/usr/bin/env bash
# ktuned's main job, what a newcomer should see first. It starts ktuned on
# its default Unix socket and embedded SQLite database, takes the norms
# (forward and backward) and the GEMMs of a Llama-3-8B-shaped model
# (tests/data/llama-3-8b.config.json) at a few token counts, and:
#   - on a GPU, prewarms them: every problem tuned once and stored (a
#     progress bar on a terminal);
#   - without one (a compile-only daemon), says so: ktuned then answers from
#     its analytic model (HEURISTIC) and stores nothing;
# then prints what ktuned answers for each problem and how it got the answer,
# the table of what it stored, and a bundle of the store, exported and
# inspected.
#
#   deploy/main-job.sh [BUILD_DIR]
#
# KTUNE_TOKENS overrides the token counts (default 1,128,2048);
# KTUNE_KEEP_RUNNING=1 leaves ktuned up; KTUNE_LOG names its log file.
set -euo pipefail
build_dir=${1:-build}
repo=$(cd "$(dirname "$0")/.." && pwd)
ktuned="$build_dir/daemon/ktuned"
ktune="$build_dir/client/ktune"
model="$repo/tests/data/llama-3-8b.config.json"
tokens=${KTUNE_TOKENS:-1,128,2048}
log=${KTUNE_LOG:-$(mktemp -t ktuned.XXXXXX.log)}
work=$(mktemp -d -t ktune-main-job.XXXXXX)

"$ktuned" --log-level info 2>"$log" &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" || true; rm -rf "$work"; }
if [ "${KTUNE_KEEP_RUNNING:-0}" = 1 ]; then trap 'rm -rf "$work"' EXIT; else trap stop EXIT; fi
for _ in $(seq 100); do "$ktune" status >/dev/null 2>&1 && break; sleep 0.1; done
"$ktune" status
echo "(daemon log: $log)"

problems=(--from-model "$model" --tokens "$tokens" --backward)
echo
echo "== the problems of a Llama-3-8B-shaped model at $tokens tokens"
"$ktune" prewarm "${problems[@]}" --dry-run | tail -n 1
echo
if "$ktune" status --json | grep -q '"compile_only": true'; then
  echo "== no GPU here: ktuned is compile-only. It answers a miss from its analytic"
  echo "   model (HEURISTIC), with a recipe compiled by NVRTC, and tunes nothing."
else
  echo "== prewarm: every problem tuned once on this GPU and stored"
  "$ktune" prewarm "${problems[@]}"
fi
echo
echo "== what ktuned answers now (TUNED: from the store; HEURISTIC: the model's pick)"
"$ktune" prewarm "${problems[@]}" --answers
echo
echo "== stored entries"
"$ktune" ls
echo
echo "== the store as a bundle (what 'ktune import' or 'ktuned --import-bundle' takes)"
"$ktune" export -o "$work/llama-3-8b.ktb"
"$ktune" bundle inspect "$work/llama-3-8b.ktb"
