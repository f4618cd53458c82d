// main() of ktune_gpu_tests: opens GPU 0 through the driver API (dlopen'ed),
// or prints why not and exits 77, which ctest reports as skipped rather than
// passed. Then runs the Catch2 tests (all tagged [gpu]).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <memory>

#include "tests/gpu/gpu_env.h"

namespace ktune::testing {
namespace {
Device* g_device = nullptr;
}  // namespace

Device* GpuDevice() { return g_device; }

}  // namespace ktune::testing

int main(int argc, char** argv) {
  absl::StatusOr<std::unique_ptr<ktune::Device>> device = ktune::OpenCudaDevice(0);
  if (!device.ok()) {
    std::printf("SKIPPED: no usable GPU: %s\n", std::string(device.status().message()).c_str());
    return 77;
  }
  const ktune::DeviceInfo& info = (*device)->info();
  std::printf("GPU: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, driver %d\n", info.name.c_str(), info.cc_major,
              info.cc_minor, info.sm_count, static_cast<double>(info.memory_bytes) / (1 << 30), info.l2_bytes >> 20,
              info.driver_version);
  ktune::testing::g_device = device->get();
  const int rc = Catch::Session().run(argc, argv);
  ktune::testing::g_device = nullptr;
  return rc;
}
