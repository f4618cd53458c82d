// A ProblemRunner for tests without a GPU (the worker's
// KTUNE_WORKER_FAKE_DEVICE=1, through Op::NewFakeRunner): Verify passes every
// recipe with a cubin or a cuBLASLt algorithm; timings are made up from the
// kernels' name expressions, 10-20 us, or for work over 10 us at 500 TFLOP/s
// up to twice that, so large problems get the tuners' sustained finals here
// too; `library_candidates` made-up cuBLASLt algorithms (64 distinct bytes
// each) for the device's arch.
// Thread-compatible, as every runner.
#pragma once

#include <memory>

#include "tuner/core/fingerprint.h"
#include "tuner/run/problem_runner.h"

namespace ktune {

struct FakeWork {
  double flops = 0;            // the problem's work; 0: 10-20 us whatever it is
  int library_candidates = 0;  // how many LibraryCandidates it offers (at most)
};

std::unique_ptr<ProblemRunner> NewFakeRunner(const DeviceInfo& device, const FakeWork& work);

}  // namespace ktune
