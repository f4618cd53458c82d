"""Generates ktune's Python gRPC stubs from proto/ktune/v1/ktune.proto.

Used by setup.py at build time (the stubs are build products, never checked
in) and by make_device_copy.sh. Two generators, the first that is present:

  1. grpc_tools.protoc (pip's grpcio-tools), which writes gencode matching its
     bundled protobuf;
  2. the system `protoc` with `grpc_python_plugin` (Debian 12:
     protobuf-compiler and protobuf-compiler-grpc), which writes protobuf
     3.21 gencode. That gencode also loads on the newest runtimes checked
     (protobuf 7.36.2, grpcio 1.84: README.md, "Compatibility").

KTUNE_STUB_GENERATOR=protoc|grpc_tools picks one; KTUNE_PROTO_DIR names the
folder holding ktune/v1/ktune.proto when this file is not inside a checkout.
"""
import os
import shutil
import subprocess
import sys

PROTO = "ktune/v1/ktune.proto"
HERE = os.path.dirname(os.path.abspath(__file__))


def find_proto_dir():
    for candidate in (os.environ.get("KTUNE_PROTO_DIR"), os.path.join(HERE, "..", "..", "proto")):
        if candidate and os.path.isfile(os.path.join(candidate, PROTO)):
            return os.path.abspath(candidate)
    raise RuntimeError(f"cannot find {PROTO}: build from a ktune checkout (client/python) or set KTUNE_PROTO_DIR")


def _grpc_tools_command(proto_dir, out_root):
    try:
        import grpc_tools  # noqa: F401
        from grpc_tools import protoc  # noqa: F401
    except ImportError:
        return None
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    return [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}", f"-I{include}",
            f"--python_out={out_root}", f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", PROTO]


def _protoc_command(proto_dir, out_root):
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        return None
    return [protoc, f"-I{proto_dir}", f"--python_out={out_root}", f"--grpc_out={out_root}",
            f"--plugin=protoc-gen-grpc={plugin}", PROTO]


def generate(out_root, proto_dir=None, generator=None):
    """Writes ktune/v1/ktune_pb2.py and ktune_pb2_grpc.py under out_root; returns the generator used."""
    proto_dir = proto_dir or find_proto_dir()
    generator = generator or os.environ.get("KTUNE_STUB_GENERATOR")
    makers = {"grpc_tools": _grpc_tools_command, "protoc": _protoc_command}
    order = [generator] if generator else ["grpc_tools", "protoc"]
    for name in order:
        if name not in makers:
            raise RuntimeError(f"KTUNE_STUB_GENERATOR={name}: expected one of {sorted(makers)}")
        command = makers[name](proto_dir, out_root)
        if command is None:
            continue
        os.makedirs(os.path.join(out_root, "ktune", "v1"), exist_ok=True)
        subprocess.run(command, check=True)
        return name
    raise RuntimeError("no stub generator: install grpcio-tools (pip), or protoc and grpc_python_plugin "
                       "(Debian: apt-get install protobuf-compiler protobuf-compiler-grpc)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_stubs.py OUT_ROOT   (writes OUT_ROOT/ktune/v1/ktune_pb2*.py)")
    print(generate(sys.argv[1]))
