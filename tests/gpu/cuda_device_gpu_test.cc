// The driver-API Device on a real GPU: what it reports, memory round trips,
// kernel loading errors and event timing.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/gpu_env.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

TEST_CASE("CudaDevice reports the GPU it opened", "[gpu]") {
  const DeviceInfo& d = testing::GpuDevice()->info();
  CHECK_FALSE(d.name.empty());
  CHECK(d.cc_major >= 8);
  CHECK(d.sm_count > 0);
  CHECK(d.memory_bytes > (uint64_t{1} << 30));
  CHECK(d.driver_version >= 12000);
  CHECK(d.l2_bytes > 0);
  CHECK(d.max_threads_per_sm >= 1024);
  CHECK(d.max_smem_per_block_optin >= 48 * 1024);
  CHECK(d.regs_per_sm >= 65536);
}

TEST_CASE("CudaDevice copies, fills and frees memory", "[gpu]") {
  Device* device = testing::GpuDevice();
  const size_t bytes = (size_t{1} << 20) + 3;
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Create(device, bytes);
  REQUIRE(buffer.ok());
  std::vector<uint8_t> in(bytes);
  for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(i * 7 + 1);
  REQUIRE(device->CopyToDevice(buffer->get(), in.data(), bytes).ok());
  std::vector<uint8_t> out(bytes, 0);
  REQUIRE(device->CopyToHost(out.data(), buffer->get(), bytes).ok());
  CHECK(out == in);
  REQUIRE(device->Fill(buffer->get(), 0xFF, bytes).ok());
  REQUIRE(device->CopyToHost(out.data(), buffer->get(), bytes).ok());
  CHECK(out == std::vector<uint8_t>(bytes, 0xFF));
  DeviceBuffer moved = *std::move(buffer);
  CHECK(moved.size() == bytes);
}

TEST_CASE("CudaDevice loads kernels, reports bad ones and times launches", "[gpu]") {
  Device* device = testing::GpuDevice();
  NormProblem p;
  p.m = 1024;
  p.n = 1024;
  absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, HeuristicNormConfig(p, device->info()), device->info());
  REQUIRE(r.ok());
  REQUIRE(Compile(&*r).ok);

  CHECK_FALSE(device->LoadKernel("not a cubin", r->kernels[0].lowered_name).ok());
  absl::StatusOr<LoadedKernel> missing = device->LoadKernel(r->cubin, "_Z6nothingv");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("_Z6nothingv") != std::string::npos);

  absl::StatusOr<LoadedKernel> k = device->LoadKernel(r->cubin, r->kernels[0].lowered_name);
  REQUIRE(k.ok());
  absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Create(device, p.m * p.n * 2);
  absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Create(device, p.m * p.n * 2);
  absl::StatusOr<DeviceBuffer> w = DeviceBuffer::Create(device, p.n * 2);
  REQUIRE((x.ok() && y.ok() && w.ok()));
  REQUIRE(device->Fill(x->get(), 0x3f, p.m * p.n * 2).ok());  // bf16 0x3f3f: 0.75
  REQUIRE(device->Fill(w->get(), 0x3f, p.n * 2).ok());
  DevicePtr xp = x->get(), wp = w->get(), yp = y->get(), rp = 0, no_residual = 0, no_scale = 0;
  int m = static_cast<int>(p.m), n = static_cast<int>(p.n);
  float eps = p.eps;
  REQUIRE(r->kernels[0].params ==
          std::vector<std::string>{"x", "residual", "w", "y", "rstd", "scale", "M", "N", "eps"});
  void* args[] = {&xp, &no_residual, &wp, &yp, &rp, &no_scale, &m, &n, &eps};
  absl::StatusOr<std::vector<float>> ms =
      device->TimeEach([&](int) { return device->Launch(*k, r->kernels[0], args); }, 25);
  INFO(ms.status().ToString());
  REQUIRE(ms.ok());
  REQUIRE(ms->size() == 25);
  for (float t : *ms) {
    CHECK(t > 0);
    CHECK(t < 100);
  }
  // The same kernel replayed from a graph: every launch captured, a time
  // per launch that is no more than the events' around one (which add the
  // host's enqueue), and a stream that takes work again afterwards.
  absl::StatusOr<std::vector<float>> replayed =
      device->TimeReplays([&](int) { return device->Launch(*k, r->kernels[0], args); }, 50, 25);
  INFO(replayed.status().ToString());
  REQUIRE(replayed.ok());
  REQUIRE(replayed->size() == 25);
  std::vector<float> by_events = *ms, by_replay = *replayed;
  std::sort(by_events.begin(), by_events.end());
  std::sort(by_replay.begin(), by_replay.end());
  CHECK(by_replay[12] > 0);
  CHECK(by_replay[12] <= by_events[12] * 1.05f);
  // A launch made off the stream is not in the graph: refused, not timed.
  absl::StatusOr<std::vector<float>> missed = device->TimeReplays([](int) { return absl::OkStatus(); }, 4, 20);
  CHECK(missed.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(device->Fill(y->get(), 0, p.m * p.n * 2).ok());
  CHECK(device->Synchronize().ok());
  device->UnloadKernel(*k);
}

}  // namespace
}  // namespace ktune
