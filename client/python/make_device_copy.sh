#!/usr/bin/env bash
# A ready-to-import copy of the ktune package for a machine that can neither
# build it nor reach a registry (the GPU machine: python 3.12, grpcio 1.84,
# protobuf 7.36, no protoc). Run here, in the checkout:
#
#   client/python/make_device_copy.sh OUT_DIR [LIBKTUNE_LAUNCH]
#
# writes OUT_DIR/ktune (the package with its generated stubs) and, when given,
# copies the launcher library into OUT_DIR/ktune/libktune_launch.so (the
# package folder is where ktune.launch looks after KTUNE_LIBRARY). There:
#   PYTHONPATH=OUT_DIR python3 -c "import ktune"
# The launcher's own libraries (protobuf, abseil) come with
#   ../shared/device/pack.sh .gpu build/client/libktune_launch.so
# into .gpu/lib, on LD_LIBRARY_PATH there. The usual layout is
#   client/python/make_device_copy.sh .gpu/python build/client/libktune_launch.so
# (bench/run_python_h200.sh reads .gpu/python).
#
# Stubs: Debian's protoc 3.21 gencode loads on protobuf 7.36.2 (upb and pure
# Python) and its grpc_python_plugin stubs on grpcio 1.84.2, both checked
# (client/python/README.md, "Compatibility"), so the default generator is the
# system protoc. KTUNE_STUB_GENERATOR=grpc_tools uses grpcio-tools instead: in a
# scratch venv, `pip install grpcio-tools==1.84.*` (it writes gencode for the
# protobuf it bundles, which the runtime there must be at least).
set -euo pipefail
out=${1:?usage: make_device_copy.sh OUT_DIR [LIBKTUNE_LAUNCH]}
lib=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
rm -rf "$out/ktune"
mkdir -p "$out"
cp -r "$here/ktune" "$out/ktune"
find "$out/ktune" \( -name '__pycache__' -o -name 'ktune_pb2*' -o -name '*.so' \) -prune -exec rm -rf {} +
KTUNE_STUB_GENERATOR=${KTUNE_STUB_GENERATOR:-protoc} "$python" "$here/build_stubs.py" "$out" >/dev/null
if [ -n "$lib" ]; then cp -L "$lib" "$out/ktune/libktune_launch.so"; fi
echo "ktune package for the device in $out/ktune ($(du -sh "$out/ktune" | cut -f1))"
