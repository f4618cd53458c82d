// The GPU as the tuner uses it: memory, modules, launches and event timing.
//
// CudaDevice loads libcuda.so.1 with dlopen at run time, so a binary that
// includes it still starts on a machine with no driver (CI, laptops): Open()
// then fails with FAILED_PRECONDITION and a reason, which is the compile-only
// signal. Tests may implement Device to inject faults.
// Thread-compatible: one thread uses a Device at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {
class Launcher;  // client/launch.h
}

namespace ktune {

using DevicePtr = uint64_t;  // CUdeviceptr

// A function loaded from a cubin; owned by the Device that loaded it and valid
// until UnloadKernel or the Device's destruction.
struct LoadedKernel {
  void* module = nullptr;    // CUmodule
  void* function = nullptr;  // CUfunction
};

// A TMA descriptor (a CUtensorMap: 128 opaque bytes, passed to a kernel by
// value) for a row-major bf16 tensor of dims {inner, rows, batch} with rows
// `row_pitch` elements apart and batches `batch_pitch` elements apart, read
// in boxes of {box_inner, box_rows, 1} with the 128-byte swizzle, zeros
// outside the tensor.
struct TmaDescriptorBytes {
  alignas(64) unsigned char bytes[128];
};
struct TmaTensor {
  DevicePtr base = 0;
  uint64_t inner = 0, rows = 0, batch = 1;
  uint64_t row_pitch = 0, batch_pitch = 0;  // elements
  uint32_t box_inner = 64, box_rows = 0;
  uint32_t element_bytes = 2;  // 2: bf16, 1: fp8 (moved as bytes)
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  virtual absl::StatusOr<DevicePtr> Alloc(size_t bytes) = 0;
  virtual void Free(DevicePtr ptr) = 0;
  virtual absl::Status CopyToDevice(DevicePtr dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* dst, DevicePtr src, size_t bytes) = 0;
  // Sets every byte to `value` (used to poison outputs before verification).
  virtual absl::Status Fill(DevicePtr dst, uint8_t value, size_t bytes) = 0;

  // Loads `cubin` and finds `lowered_name` in it.
  virtual absl::StatusOr<LoadedKernel> LoadKernel(const std::string& cubin, const std::string& lowered_name) = 0;
  virtual void UnloadKernel(const LoadedKernel& kernel) = 0;

  // Launches asynchronously on the device's stream. `args` as cuLaunchKernel's.
  virtual absl::Status Launch(const LoadedKernel& kernel, const KernelLaunch& geometry, void** args) = 0;
  // Encodes a TMA descriptor (cuTensorMapEncodeTiled): a host computation,
  // nothing is enqueued. INVALID_ARGUMENT when the driver refuses the tensor.
  virtual absl::StatusOr<TmaDescriptorBytes> EncodeTma(const TmaTensor& tensor) {
    (void)tensor;
    return absl::UnimplementedError("this device cannot encode TMA descriptors");
  }
  // Waits for all work; returns the first asynchronous error (a faulting kernel).
  virtual absl::Status Synchronize() = 0;
  // The stream (a CUstream) every call above is ordered on, for libraries
  // that enqueue their own work (cuBLASLt) in the same order.
  virtual void* stream() const = 0;
  // The launcher of recipes on this GPU (client/launch.h): the one a caller
  // of ktune's answers uses, so candidates are launched, and timed, exactly as
  // answers are. Owned by the Device; launches on stream(). UNIMPLEMENTED for
  // devices without one (test fakes).
  virtual absl::StatusOr<Launcher*> launcher() {
    return absl::UnimplementedError("this device cannot launch recipes through ktune::Launcher");
  }

  // Times `launch(i)` for i in [0, repetitions) with a pair of events around
  // each call; returns the elapsed milliseconds of each. `launch` enqueues work.
  virtual absl::StatusOr<std::vector<float>> TimeEach(const std::function<absl::Status(int)>& launch,
                                                      int repetitions) = 0;
  // Captures `launch(i)` for i in [0, per_replay) into one CUDA graph, replays
  // it once untimed, then `repetitions` times with a pair of events around
  // each replay; returns each replay's elapsed milliseconds / per_replay. What
  // a caller launching from a graph (a decode loop) sees: no host enqueue
  // between kernels. FAILED_PRECONDITION when the capture misses a launch (one
  // not made on stream()); UNIMPLEMENTED where the device cannot capture.
  virtual absl::StatusOr<std::vector<float>> TimeReplays(const std::function<absl::Status(int)>& launch, int per_replay,
                                                         int repetitions) {
    (void)launch;
    (void)per_replay;
    (void)repetitions;
    return absl::UnimplementedError("this device cannot replay graphs");
  }
};

// Opens GPU `ordinal` through the CUDA driver API, loaded at run time.
// FAILED_PRECONDITION with the reason if there is no driver or no such GPU.
absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int ordinal = 0);
// How many GPUs the CUDA driver (loaded at run time) sees in this process;
// FAILED_PRECONDITION with the reason if there is no driver.
absl::StatusOr<int> CudaDeviceCount();

// RAII device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Create(Device* device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  DevicePtr get() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  Device* device_ = nullptr;
  DevicePtr ptr_ = 0;
  size_t bytes_ = 0;
};

}  // namespace ktune
