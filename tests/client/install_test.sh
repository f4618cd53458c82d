#!/bin/sh
# install_test.sh BUILD_DIR CONSUMER_SOURCE CMAKE
# Installs the launcher from BUILD_DIR to a temporary prefix, builds the tiny
# consumer in CONSUMER_SOURCE against the installed package alone
# (find_package(ktune CONFIG), nothing of the source tree on its include
# path) and runs it.
set -eu
build=$1
consumer=$2
cmake=${3:-cmake}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cmake" --build "$build" --target ktune_launch
"$cmake" --install "$build" --prefix "$work/prefix" --component ktune_launch
for f in include/ktune/client/launch.h include/ktune/client/ktune_launch.h include/ktune/ktune/v1/ktune.pb.h \
    lib/cmake/ktune/ktuneConfig.cmake lib/cmake/ktune/ktuneTargets.cmake; do
  test -f "$work/prefix/$f" || { echo "not installed: $f"; exit 1; }
done
ls "$work/prefix"/lib*/libktune_launch.so* >/dev/null
"$cmake" -S "$consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release
"$cmake" --build "$work/build"
"$work/build/consumer"
