// The GPU every [gpu] test runs on, opened once by gpu_main.cc before Catch2
// starts (the binary exits 77, "skipped", when there is none).
#pragma once

#include "tuner/gpu/device.h"

namespace ktune::testing {

// Never null inside a test case.
Device* GpuDevice();

}  // namespace ktune::testing
