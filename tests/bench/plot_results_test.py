#!/usr/bin/env python3
"""bench/plot_results.py against the fixture in tests/data/plots (made-up
numbers in the bench scripts' JSON schema): every plot renders, and bad input
exits 2 with one line naming the file and the field, never a traceback. So a
change to the script or to what the benches write cannot leave the committed
plots unrenderable unnoticed. Plain unittest, run by ctest (tests/CMakeLists.txt)
with Debian's python3; without matplotlib it fails, naming the package
deploy/setup.sh test installs."""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "plot_results.py")
FIXTURE = os.path.join(ROOT, "tests", "data", "plots")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ["norm-forward.png", "norm-backward.png", "gemm-bf16.png", "gemm-fp8.png", "tune-time.png"]


def fixture(name):
    with open(os.path.join(FIXTURE, name)) as f:
        return json.load(f)


class PlotResultsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="plot-results-test-")
        self.addCleanup(self.dir.cleanup)
        self.out = os.path.join(self.dir.name, "out")

    def plot(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args, "--out", self.out], capture_output=True, text=True,
                              timeout=300)

    def write(self, name, doc):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def assert_png(self, name):
        path = os.path.join(self.out, name)
        self.assertTrue(os.path.isfile(path), f"{name} was not written")
        with open(path, "rb") as f:
            data = f.read()
        self.assertTrue(data.startswith(PNG_SIGNATURE), f"{name} is not a PNG")
        # A figure with its bars, labels and legend; an empty canvas is a few KB.
        self.assertGreater(len(data), 15000, f"{name} is {len(data)} bytes")

    def assert_bad_input(self, result, path, field):
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn(path, lines[0])
        self.assertIn(field, lines[0])

    def test_every_plot_renders(self):
        f = {name: os.path.join(FIXTURE, f"{name}.json") for name in ("norm", "gemm", "tuning")}
        r = self.plot("--norm", f["norm"], "--gemm", f["gemm"], "--gemm-fp8", f["gemm"], "--tuning", f["tuning"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in PLOTS:
            with self.subTest(plot=name):
                self.assert_png(name)
        self.assertEqual(sorted(os.listdir(self.out)), sorted(PLOTS))

    def test_only_what_is_given(self):
        r = self.plot("--gemm", os.path.join(FIXTURE, "gemm.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.listdir(self.out), ["gemm-bf16.png"])

    def test_tuning_json_as_a_bare_list(self):
        # What tuning_bench.py wrote before it recorded date and commit.
        path = self.write("old-tuning.json", fixture("tuning.json")["rows"])
        r = self.plot("--tuning", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_png("tune-time.png")

    def test_missing_field_exits_2_naming_file_and_field(self):
        cases = [("norm", "--norm", lambda d: d["rows"][1].pop("ktune_tbs"), "rows[1].ktune_tbs"),
                 ("norm", "--norm", lambda d: d["rows"][0].pop("liger_tbs"), "rows[0].liger_tbs"),
                 ("norm", "--norm", lambda d: d.pop("copy_tbs"), "copy_tbs"),
                 ("gemm", "--gemm", lambda d: d["rows"][2].pop("torch_tflops"), "rows[2].torch_tflops"),
                 ("gemm", "--gemm-fp8", lambda d: d.pop("rows"), "rows"),
                 ("tuning", "--tuning", lambda d: d["rows"][0].pop("cold_s"), "rows[0].cold_s")]
        for name, option, drop, field in cases:
            with self.subTest(field=field, option=option):
                doc = copy.deepcopy(fixture(f"{name}.json"))
                drop(doc)
                path = self.write(f"{name}-without-{field.replace('[', '').replace(']', '')}.json", doc)
                self.assert_bad_input(self.plot(option, path), path, field)

    def test_wrong_type_exits_2(self):
        doc = fixture("gemm.json")
        doc["rows"][0]["ktune_tflops"] = "fast"
        path = self.write("gemm-text.json", doc)
        self.assert_bad_input(self.plot("--gemm", path), path, "rows[0].ktune_tflops")

    def test_missing_file_and_not_json_exit_2(self):
        missing = os.path.join(self.dir.name, "no-such.json")
        self.assert_bad_input(self.plot("--norm", missing), missing, "cannot read")
        garbage = self.write("garbage.json", "bf16 norms on NVIDIA H200; not JSON\n")
        self.assert_bad_input(self.plot("--tuning", garbage), garbage, "not JSON")


if __name__ == "__main__":
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{sys.executable} has no matplotlib (Debian: python3-matplotlib, which deploy/setup.sh test "
              "installs)", file=sys.stderr)
        sys.exit(1)
    unittest.main()
