// The driver calls a Launcher makes, behind two small interfaces, so that
// tests inject fakes that record every call and the real ones load their
// libraries at run time: LaunchDriver over the CUDA driver API
// (libcuda.so.1), CublasLtApi over cuBLASLt (libcublasLt.so.13). Handles
// (CUmodule, CUfunction, CUstream, cuBLASLt descriptors) pass as void*;
// enum values (attributes, data types) are the libraries' own.
//
// Thread-safety: implementations must allow concurrent calls from several
// threads, as the CUDA driver and cuBLASLt's descriptor functions do.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/launch_args.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// One cuLaunchKernelEx.
struct KernelLaunchCall {
  void* function = nullptr;  // CUfunction
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t dynamic_smem_bytes = 0;
  void* stream = nullptr;  // CUstream
  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, allowed.
  bool programmatic_stream_serialization = false;
  const PackedArgs* args = nullptr;  // the kernel's parameters, each at its offset
};

class LaunchDriver {
 public:
  virtual ~LaunchDriver() = default;

  // Makes the device's primary context current on the calling thread until
  // the matching ExitContext, which makes the previous one current again
  // (cuCtxPushCurrent / cuCtxPopCurrent): callers such as PyTorch keep theirs.
  virtual absl::Status EnterContext() = 0;
  virtual void ExitContext() = 0;

  // The calls below run with the context entered.
  virtual absl::StatusOr<void*> LoadModule(const std::string& image) = 0;  // cuModuleLoadData
  virtual void UnloadModule(void* module) = 0;
  virtual absl::StatusOr<void*> GetFunction(void* module, const std::string& name) = 0;
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
  virtual absl::Status SetMaxDynamicSharedMemory(void* function, uint32_t bytes) = 0;
  virtual absl::StatusOr<uint64_t> Alloc(uint64_t bytes) = 0;  // cuMemAlloc
  virtual void Free(uint64_t address) = 0;
  virtual absl::Status MemsetD8Async(uint64_t address, uint8_t value, uint64_t bytes, void* stream) = 0;
  // cuTensorMapEncodeTiled of `tma` over `base` (element_strides empty: all 1).
  virtual absl::StatusOr<TensorMapBytes> EncodeTensorMap(const v1::TmaDescriptor& tma, uint64_t base) = 0;
  virtual absl::Status Launch(const KernelLaunchCall& call) = 0;  // cuLaunchKernelEx

  // The function's parameters as its cubin lays them out (cuFuncGetParamInfo,
  // CUDA 12.4 drivers and newer), for checking a recipe's arguments against
  // the kernel at load. UNIMPLEMENTED where the driver cannot say.
  virtual absl::StatusOr<std::vector<ArgSlot>> ParamLayout(void* function) {
    return absl::UnimplementedError("no parameter layout from this driver");
  }
};

// One cublasLtMatmul; pointers are device addresses.
struct MatmulCall {
  void* desc = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  void* a_layout = nullptr;
  void* b_layout = nullptr;
  void* c_layout = nullptr;
  void* d_layout = nullptr;
  const void* algo = nullptr;  // 64 bytes: a cublasLtMatmulAlgo_t
  uint64_t workspace = 0;
  uint64_t workspace_bytes = 0;
  void* stream = nullptr;
};

class CublasLtApi {
 public:
  virtual ~CublasLtApi() = default;
  virtual absl::StatusOr<void*> CreateMatmulDesc(uint32_t compute_type, uint32_t scale_type) = 0;
  virtual absl::Status SetMatmulDescAttribute(void* desc, uint32_t attribute, const void* value, size_t size) = 0;
  virtual void DestroyMatmulDesc(void* desc) = 0;
  virtual absl::StatusOr<void*> CreateMatrixLayout(uint32_t data_type, uint64_t rows, uint64_t cols, int64_t ld) = 0;
  virtual absl::Status SetMatrixLayoutAttribute(void* layout, uint32_t attribute, const void* value, size_t size) = 0;
  virtual void DestroyMatrixLayout(void* layout) = 0;
  virtual absl::Status Matmul(const MatmulCall& call) = 0;
};

// Opens device `device_ordinal` through libcuda.so.1 (dlopen) and retains its
// primary context. FAILED_PRECONDITION saying why when there is no driver or
// no such device.
absl::StatusOr<std::unique_ptr<LaunchDriver>> OpenCudaLaunchDriver(int device_ordinal);

// Loads libcublasLt.so.13 (dlopen) and creates a handle. FAILED_PRECONDITION
// when the library is missing or unusable.
absl::StatusOr<std::unique_ptr<CublasLtApi>> OpenCublasLtApi();

// How a Launcher gets cuBLASLt: called once, at the first cuBLASLt recipe.
using CublasLtFactory = std::function<absl::StatusOr<std::unique_ptr<CublasLtApi>>()>;

}  // namespace ktune
