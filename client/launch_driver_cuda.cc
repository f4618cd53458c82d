// LaunchDriver over the CUDA driver API, loaded with dlopen: the launcher's
// library links no libcuda, so it loads (and reports why it cannot launch)
// on machines without a driver.
//
// cuda.h gives the types and prototypes only. Several entry points are macros
// naming versioned symbols (cuCtxPushCurrent -> cuCtxPushCurrent_v2); each is
// looked up by its macro's expansion, so the symbol is the one whose
// prototype the pointer has.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/launch_driver.h"

namespace ktune {
namespace {

#define KTUNE_LAUNCH_STR2(x) #x
#define KTUNE_LAUNCH_STR(x) KTUNE_LAUNCH_STR2(x)

// The driver functions a launcher calls.
#define KTUNE_LAUNCH_DRIVER_FUNCTIONS(X) \
  X(cuInit)                              \
  X(cuGetErrorName)                      \
  X(cuDeviceGetCount)                    \
  X(cuDeviceGet)                         \
  X(cuDevicePrimaryCtxRetain)            \
  X(cuDevicePrimaryCtxRelease)           \
  X(cuCtxPushCurrent)                    \
  X(cuCtxPopCurrent)                     \
  X(cuModuleLoadData)                    \
  X(cuModuleUnload)                      \
  X(cuModuleGetFunction)                 \
  X(cuFuncSetAttribute)                  \
  X(cuMemAlloc)                          \
  X(cuMemFree)                           \
  X(cuMemsetD8Async)                     \
  X(cuTensorMapEncodeTiled)              \
  X(cuLaunchKernelEx)

struct DriverTable {
#define KTUNE_LAUNCH_MEMBER(fn) decltype(&fn) fn##_ = nullptr;
  KTUNE_LAUNCH_DRIVER_FUNCTIONS(KTUNE_LAUNCH_MEMBER)
#undef KTUNE_LAUNCH_MEMBER
  // Optional (CUDA 12.4 drivers and newer): null where the driver lacks it.
  decltype(&cuFuncGetParamInfo) cuFuncGetParamInfo_ = nullptr;
};

// libcuda.so.1, resolved once per process and never closed (the driver
// cannot be unloaded under live contexts).
absl::StatusOr<const DriverTable*> Driver() {
  static const absl::StatusOr<const DriverTable*>* table = []() -> absl::StatusOr<const DriverTable*>* {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      return new absl::StatusOr<const DriverTable*>(absl::FailedPreconditionError(
          absl::StrCat("no CUDA driver: libcuda.so.1 cannot be loaded (", why != nullptr ? why : "dlopen failed",
                       "); recipes cannot be launched on this machine")));
    }
    auto* t = new DriverTable();
    std::vector<std::string> missing;
#define KTUNE_LAUNCH_RESOLVE(fn)                                                    \
  t->fn##_ = reinterpret_cast<decltype(&fn)>(dlsym(library, KTUNE_LAUNCH_STR(fn))); \
  if (t->fn##_ == nullptr) missing.push_back(KTUNE_LAUNCH_STR(fn));
    KTUNE_LAUNCH_DRIVER_FUNCTIONS(KTUNE_LAUNCH_RESOLVE)
#undef KTUNE_LAUNCH_RESOLVE
    t->cuFuncGetParamInfo_ =
        reinterpret_cast<decltype(&cuFuncGetParamInfo)>(dlsym(library, KTUNE_LAUNCH_STR(cuFuncGetParamInfo)));
    if (!missing.empty()) {
      delete t;
      std::string names;
      for (const std::string& m : missing) absl::StrAppend(&names, names.empty() ? "" : ", ", m);
      return new absl::StatusOr<const DriverTable*>(
          absl::FailedPreconditionError(absl::StrCat("the CUDA driver is too old for the launcher: it lacks ", names)));
    }
    return new absl::StatusOr<const DriverTable*>(t);
  }();
  return *table;
}

// A driver result as a status naming the call. A fault of an earlier kernel
// surfaces at any later call and leaves the context unusable: ABORTED, so
// callers can tell it from a bad argument.
absl::Status Check(const DriverTable& d, CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  d.cuGetErrorName_(r, &name);
  const std::string message =
      name != nullptr ? absl::StrCat(call, ": ", name) : absl::StrCat(call, ": CUDA error ", static_cast<int>(r));
  switch (r) {
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_INVALID_HANDLE:
      return absl::InvalidArgumentError(message);
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
      return absl::AbortedError(message);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

class CudaLaunchDriver final : public LaunchDriver {
 public:
  CudaLaunchDriver(const DriverTable* d, CUdevice device, CUcontext context)
      : d_(d), device_(device), context_(context) {}
  ~CudaLaunchDriver() override { d_->cuDevicePrimaryCtxRelease_(device_); }

  absl::Status EnterContext() override { return Check(*d_, d_->cuCtxPushCurrent_(context_), "cuCtxPushCurrent"); }
  void ExitContext() override {
    CUcontext popped = nullptr;
    d_->cuCtxPopCurrent_(&popped);
  }

  absl::StatusOr<void*> LoadModule(const std::string& image) override {
    CUmodule module = nullptr;
    if (absl::Status s = Check(*d_, d_->cuModuleLoadData_(&module, image.data()), "cuModuleLoadData"); !s.ok()) {
      return s;
    }
    return static_cast<void*>(module);
  }
  void UnloadModule(void* module) override { d_->cuModuleUnload_(static_cast<CUmodule>(module)); }

  absl::StatusOr<void*> GetFunction(void* module, const std::string& name) override {
    CUfunction f = nullptr;
    absl::Status s =
        Check(*d_, d_->cuModuleGetFunction_(&f, static_cast<CUmodule>(module), name.c_str()), "cuModuleGetFunction");
    if (!s.ok()) return s;
    return static_cast<void*>(f);
  }

  absl::Status SetMaxDynamicSharedMemory(void* function, uint32_t bytes) override {
    return Check(*d_,
                 d_->cuFuncSetAttribute_(static_cast<CUfunction>(function),
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes)),
                 "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }

  absl::StatusOr<uint64_t> Alloc(uint64_t bytes) override {
    CUdeviceptr p = 0;
    if (absl::Status s = Check(*d_, d_->cuMemAlloc_(&p, bytes), "cuMemAlloc"); !s.ok()) return s;
    return static_cast<uint64_t>(p);
  }
  void Free(uint64_t address) override { d_->cuMemFree_(static_cast<CUdeviceptr>(address)); }

  absl::Status MemsetD8Async(uint64_t address, uint8_t value, uint64_t bytes, void* stream) override {
    return Check(*d_,
                 d_->cuMemsetD8Async_(static_cast<CUdeviceptr>(address), value, bytes, static_cast<CUstream>(stream)),
                 "cuMemsetD8Async");
  }

  absl::StatusOr<TensorMapBytes> EncodeTensorMap(const v1::TmaDescriptor& t, uint64_t base) override {
    static_assert(sizeof(CUtensorMap) == sizeof(TensorMapBytes::bytes), "a CUtensorMap is 128 bytes");
    const cuuint32_t rank = static_cast<cuuint32_t>(t.dims_size());
    std::vector<cuuint64_t> dims(t.dims().begin(), t.dims().end());
    std::vector<cuuint64_t> strides(t.strides_bytes().begin(), t.strides_bytes().end());
    std::vector<cuuint32_t> box(t.box().begin(), t.box().end());
    std::vector<cuuint32_t> element_strides(t.element_strides().begin(), t.element_strides().end());
    if (element_strides.empty()) element_strides.assign(rank, 1);
    CUtensorMap map;
    std::memset(&map, 0, sizeof(map));
    absl::Status s = Check(
        *d_,
        d_->cuTensorMapEncodeTiled_(
            &map, static_cast<CUtensorMapDataType>(t.data_type()), rank, reinterpret_cast<void*>(base), dims.data(),
            strides.data(), box.data(), element_strides.data(), static_cast<CUtensorMapInterleave>(t.interleave()),
            static_cast<CUtensorMapSwizzle>(t.swizzle()), static_cast<CUtensorMapL2promotion>(t.l2_promotion()),
            static_cast<CUtensorMapFloatOOBfill>(t.oob_fill())),
        "cuTensorMapEncodeTiled");
    if (!s.ok()) return s;
    TensorMapBytes out;
    std::memcpy(out.bytes.data(), &map, sizeof(map));
    return out;
  }

  absl::Status Launch(const KernelLaunchCall& c) override {
    // cuLaunchKernelEx copies each parameter from where its pointer points,
    // by the sizes and offsets the cubin records for the function.
    std::vector<void*> params(c.args->offsets.size());
    for (size_t i = 0; i < params.size(); ++i) {
      params[i] = const_cast<unsigned char*>(c.args->bytes.data() + c.args->offsets[i]);
    }
    CUlaunchAttribute attribute;
    std::memset(&attribute, 0, sizeof(attribute));
    attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attribute.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config;
    std::memset(&config, 0, sizeof(config));
    config.gridDimX = c.grid[0];
    config.gridDimY = c.grid[1];
    config.gridDimZ = c.grid[2];
    config.blockDimX = c.block[0];
    config.blockDimY = c.block[1];
    config.blockDimZ = c.block[2];
    config.sharedMemBytes = c.dynamic_smem_bytes;
    config.hStream = static_cast<CUstream>(c.stream);
    config.attrs = c.programmatic_stream_serialization ? &attribute : nullptr;
    config.numAttrs = c.programmatic_stream_serialization ? 1 : 0;
    return Check(*d_,
                 d_->cuLaunchKernelEx_(&config, static_cast<CUfunction>(c.function),
                                       params.empty() ? nullptr : params.data(), nullptr),
                 "cuLaunchKernelEx");
  }

  absl::StatusOr<std::vector<ArgSlot>> ParamLayout(void* function) override {
    if (d_->cuFuncGetParamInfo_ == nullptr) return LaunchDriver::ParamLayout(function);
    // Parameters are asked for by index until the driver says there is none;
    // a kernel has at most 4 KiB (32 KiB on Hopper) of them, so few.
    constexpr size_t kMaxParams = 4096;
    std::vector<ArgSlot> slots;
    for (size_t i = 0; i < kMaxParams; ++i) {
      size_t offset = 0, size = 0;
      const CUresult r = d_->cuFuncGetParamInfo_(static_cast<CUfunction>(function), i, &offset, &size);
      if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
      if (absl::Status s = Check(*d_, r, "cuFuncGetParamInfo"); !s.ok()) return s;
      slots.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(size)});
    }
    return slots;
  }

 private:
  const DriverTable* const d_;
  const CUdevice device_;
  const CUcontext context_;  // the device's primary context, retained
};

}  // namespace

absl::StatusOr<std::unique_ptr<LaunchDriver>> OpenCudaLaunchDriver(int device_ordinal) {
  absl::StatusOr<const DriverTable*> table = Driver();
  if (!table.ok()) return table.status();
  const DriverTable& d = **table;
  if (absl::Status s = Check(d, d.cuInit_(0), "cuInit"); !s.ok()) return absl::FailedPreconditionError(s.message());
  int count = 0;
  if (absl::Status s = Check(d, d.cuDeviceGetCount_(&count), "cuDeviceGetCount"); !s.ok()) return s;
  if (device_ordinal < 0 || device_ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", device_ordinal, ": the driver reports ", count));
  }
  CUdevice device = 0;
  if (absl::Status s = Check(d, d.cuDeviceGet_(&device, device_ordinal), "cuDeviceGet"); !s.ok()) return s;
  CUcontext context = nullptr;
  if (absl::Status s = Check(d, d.cuDevicePrimaryCtxRetain_(&context, device), "cuDevicePrimaryCtxRetain"); !s.ok()) {
    return s;
  }
  return std::unique_ptr<LaunchDriver>(new CudaLaunchDriver(&d, device, context));
}

}  // namespace ktune
