// The architecture table that stands in for a remote device's measured
// limits when an imported entry's config is judged (cache/entry.cc).
#include "tuner/core/fingerprint.h"

#include <catch2/catch.hpp>

namespace ktune {
namespace {

TEST_CASE("ArchSmemPerBlockOptin gives the opt-in shared memory of known architectures", "[tuner]") {
  // cudaDevAttrMaxSharedMemoryPerBlockOptin as the devices report it.
  CHECK(ArchSmemPerBlockOptin(9, 0) == 232448);   // H100, H200
  CHECK(ArchSmemPerBlockOptin(8, 0) == 166912);   // A100
  CHECK(ArchSmemPerBlockOptin(8, 9) == 101376);   // L4, L40S
  CHECK(ArchSmemPerBlockOptin(10, 0) == 232448);  // B200
  CHECK(ArchSmemPerBlockOptin(9, 1) == 0);        // not an architecture
  CHECK(ArchSmemPerBlockOptin(11, 0) == 0);       // newer than this version
}

TEST_CASE("ArchMaxThreadsPerSm gives the resident threads per SM of known architectures", "[tuner]") {
  // cudaDevAttrMaxThreadsPerMultiProcessor as the devices report it.
  CHECK(ArchMaxThreadsPerSm(9, 0) == 2048);   // H100, H200
  CHECK(ArchMaxThreadsPerSm(8, 0) == 2048);   // A100
  CHECK(ArchMaxThreadsPerSm(8, 6) == 1536);   // A10, RTX 30
  CHECK(ArchMaxThreadsPerSm(8, 9) == 1536);   // L4, L40S
  CHECK(ArchMaxThreadsPerSm(7, 5) == 1024);   // T4
  CHECK(ArchMaxThreadsPerSm(10, 0) == 2048);  // B200
  CHECK(ArchMaxThreadsPerSm(12, 0) == 1536);  // RTX 50
}

TEST_CASE("the compile-only target has its architecture's limits", "[tuner]") {
  const DeviceInfo d = CompileOnlyTarget();
  CHECK(d.max_smem_per_block_optin == ArchSmemPerBlockOptin(d.cc_major, d.cc_minor));
  CHECK(d.max_threads_per_sm == ArchMaxThreadsPerSm(d.cc_major, d.cc_minor));
}

}  // namespace
}  // namespace ktune
