"""The build hook: the gRPC stubs are generated from proto/ into the wheel (build_stubs.py)."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        build_stubs.generate(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
