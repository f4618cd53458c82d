#!/usr/bin/env python3
"""bench/norm_bench.py's shape sets and --shapes parsing, without a GPU: the
GPU-only modules it imports (torch, CuPy, cuda-bindings) are replaced by empty
stand-ins, so CI checks that issue 34's decode and q/k shape sets are what the
bench measures and that a malformed --shapes is refused. Plain unittest, run by
ctest (tests/CMakeLists.txt)."""
import os
import sys
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def import_norm_bench():
    for name in ("cupy", "torch", "torch.nn", "torch.nn.functional", "cuda", "cuda.bindings"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["cuda.bindings"].driver = types.ModuleType("driver")
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import norm_bench
    return norm_bench


class NormBenchArgsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.nb = import_norm_bench()

    def test_decode_shapes(self):
        self.assertEqual(self.nb.parse_shapes("decode"),
                         [(m, n) for m in (1, 4, 16, 64, 256) for n in (4096, 8192)])

    def test_qk_shapes(self):
        self.assertEqual(self.nb.parse_shapes("qk"), [(262144, 128), (2048, 128)])

    def test_issue34_is_training_decode_and_qk(self):
        shapes = self.nb.parse_shapes("issue34")
        self.assertEqual(len(shapes), 8 + 10 + 2)
        self.assertEqual(shapes[:8], self.nb.SHAPES)

    def test_explicit_and_malformed(self):
        self.assertEqual(self.nb.parse_shapes("4096x4096,1x128"), [(4096, 4096), (1, 128)])
        for bad in ("", "4096", "0x128", "ax4", "4x4x4", "nosuchset"):
            self.assertIsNone(self.nb.parse_shapes(bad), bad)

    def test_optional_peers_report_why_without_their_packages(self):
        for peer in self.nb.OPTIONAL_PEERS:
            fn, why = self.nb.optional_peer_fn(peer, "rmsnorm")
            if fn is None:
                self.assertTrue(why)


if __name__ == "__main__":
    unittest.main()
