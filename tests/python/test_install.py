"""`pip install --no-build-isolation ./client/python` into a fresh --system-site-packages venv
works offline, generates the stubs at build time, and `import ktune` works there."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PACKAGE, REPO


def test_pip_install_into_a_fresh_venv(tmp_path):
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    has_tools = subprocess.run([python, "-c", "import grpc_tools"], capture_output=True).returncode == 0
    if not has_tools and not (shutil.which("protoc") and shutil.which("grpc_python_plugin")):
        pytest.skip("no stub generator here (grpcio-tools, or protoc and grpc_python_plugin): "
                    "the package cannot be built on this machine")
    if subprocess.run([python, "-c", "import setuptools, grpc, google.protobuf"], capture_output=True).returncode:
        pytest.skip(f"{python} lacks setuptools, grpcio or protobuf for an offline --no-build-isolation install")
    # A copy keeps the build's folders (build/, *.egg-info) out of the checkout;
    # proto/ sits beside client/ as in the tree, so setup.py finds ../../proto.
    shutil.copytree(PACKAGE, tmp_path / "client" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "ktune_pb2*", "__pycache__", "*.so"))
    os.symlink(REPO / "proto", tmp_path / "proto")
    env_dir = tmp_path / "venv"
    made = subprocess.run([python, "-m", "venv", "--system-site-packages", str(env_dir)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.fail(f"python3 -m venv failed (Debian: apt-get install python3-venv): {made.stderr}")
    pip = subprocess.run([str(env_dir / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", "-q",
                          str(tmp_path / "client" / "python")], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = ("import ktune, ktune.serving, ktune.launch\n"
             "from ktune.v1 import ktune_pb2_grpc\n"
             "assert ktune.pb.NormProblem(norm_pass=ktune.pb.BWD).norm_pass == 2\n"
             "print(ktune.__file__)\n")
    run = subprocess.run([str(env_dir / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                         cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert run.returncode == 0, run.stderr
    assert str(env_dir) in run.stdout, f"ktune came from {run.stdout.strip()}, not the venv"
