// The CUDA driver API, loaded with dlopen so that nothing links libcuda: a
// binary using this file starts on machines without a GPU or driver, and
// OpenCudaDevice then reports why it cannot open one.
//
// cuda.h is included for its types and prototypes only. Several entry points
// are macros naming versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the table
// below resolves each function by the stringified macro expansion, so the
// symbol looked up is exactly the one whose prototype is used.
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/launch.h"
#include "tuner/gpu/device.h"
#include "tuner/gpu/tma_descriptor.h"

namespace ktune {
namespace {

#define KTUNE_STRINGIFY2(x) #x
#define KTUNE_STRINGIFY(x) KTUNE_STRINGIFY2(x)

// Every driver function ktune uses. X(name) with `name` the unversioned API
// name; the member is name##_, its type the versioned prototype's.
#define KTUNE_CUDA_FUNCTIONS(X)  \
  X(cuInit)                      \
  X(cuDriverGetVersion)          \
  X(cuGetErrorName)              \
  X(cuGetErrorString)            \
  X(cuDeviceGetCount)            \
  X(cuDeviceGet)                 \
  X(cuDeviceGetName)             \
  X(cuDeviceGetAttribute)        \
  X(cuDeviceTotalMem)            \
  X(cuDevicePrimaryCtxRetain)    \
  X(cuDevicePrimaryCtxRelease)   \
  X(cuCtxSetCurrent)             \
  X(cuMemAlloc)                  \
  X(cuMemFree)                   \
  X(cuMemcpyHtoDAsync)           \
  X(cuMemcpyDtoHAsync)           \
  X(cuMemsetD8Async)             \
  X(cuModuleLoadData)            \
  X(cuModuleUnload)              \
  X(cuModuleGetFunction)         \
  X(cuFuncSetAttribute)          \
  X(cuLaunchKernel)              \
  X(cuLaunchKernelEx)            \
  X(cuStreamCreate)              \
  X(cuStreamDestroy)             \
  X(cuStreamSynchronize)         \
  X(cuEventCreate)               \
  X(cuEventDestroy)              \
  X(cuEventRecord)               \
  X(cuEventElapsedTime)          \
  X(cuStreamBeginCapture)        \
  X(cuStreamEndCapture)          \
  X(cuGraphGetNodes)             \
  X(cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch)               \
  X(cuGraphExecDestroy)          \
  X(cuGraphDestroy)              \
  X(cuTensorMapEncodeTiled)

struct DriverApi {
#define KTUNE_DECLARE(fn) decltype(&fn) fn##_ = nullptr;
  KTUNE_CUDA_FUNCTIONS(KTUNE_DECLARE)
#undef KTUNE_DECLARE
};

// Loads libcuda.so.1 once per process; the handle is never closed (the driver
// does not support being unloaded while contexts exist).
absl::StatusOr<const DriverApi*> LoadDriver() {
  static absl::StatusOr<const DriverApi*>* loaded = [] {
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return new absl::StatusOr<const DriverApi*>(
          absl::FailedPreconditionError(absl::StrCat("libcuda.so.1 not found: ", why != nullptr ? why : "dlopen failed",
                                                     " (no NVIDIA driver on this machine: compile-only)")));
    }
    auto* api = new DriverApi();
    std::string missing;
#define KTUNE_RESOLVE(fn)                                                           \
  api->fn##_ = reinterpret_cast<decltype(&fn)>(dlsym(handle, KTUNE_STRINGIFY(fn))); \
  if (api->fn##_ == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", KTUNE_STRINGIFY(fn));
    KTUNE_CUDA_FUNCTIONS(KTUNE_RESOLVE)
#undef KTUNE_RESOLVE
    if (!missing.empty()) {
      delete api;
      return new absl::StatusOr<const DriverApi*>(
          absl::FailedPreconditionError(absl::StrCat("libcuda.so.1 is too old: missing ", missing)));
    }
    return new absl::StatusOr<const DriverApi*>(api);
  }();
  return *loaded;
}

// The one check helper for driver results: names the failing call and the
// driver's error name and text. Faults (a kernel's illegal access, a
// launch timeout) leave the context unusable: ABORTED, so callers can tell
// them from plain argument errors.
absl::Status CudaStatus(const DriverApi& api, CUresult code, const char* call) {
  if (code == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  api.cuGetErrorName_(code, &name);
  api.cuGetErrorString_(code, &text);
  std::string message = absl::StrFormat("%s failed: %s (%s)", call, name != nullptr ? name : "CUDA_ERROR_?",
                                        text != nullptr ? text : "unknown error");
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
      return absl::AbortedError(message);
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

#define KTUNE_CU(call_expr, name) CudaStatus(*api_, (call_expr), name)
#define KTUNE_CU_RETURN(call_expr, name)                                  \
  do {                                                                    \
    if (absl::Status s_ = KTUNE_CU(call_expr, name); !s_.ok()) return s_; \
  } while (0)

class CudaDevice final : public Device {
 public:
  CudaDevice(const DriverApi* api, int ordinal, CUdevice device, CUcontext context, CUstream stream, DeviceInfo info)
      : api_(api), ordinal_(ordinal), device_(device), context_(context), stream_(stream), info_(std::move(info)) {}

  ~CudaDevice() override {
    launcher_.reset();  // its modules and workspaces, while the context lives
    MakeCurrent();
    for (CUevent e : events_) api_->cuEventDestroy_(e);
    if (stream_ != nullptr) api_->cuStreamDestroy_(stream_);
    api_->cuDevicePrimaryCtxRelease_(device_);
  }

  const DeviceInfo& info() const override { return info_; }

  absl::StatusOr<DevicePtr> Alloc(size_t bytes) override {
    MakeCurrent();
    CUdeviceptr ptr = 0;
    KTUNE_CU_RETURN(api_->cuMemAlloc_(&ptr, std::max<size_t>(bytes, 1)), "cuMemAlloc");
    return static_cast<DevicePtr>(ptr);
  }

  void Free(DevicePtr ptr) override {
    if (ptr == 0) return;
    MakeCurrent();
    api_->cuMemFree_(static_cast<CUdeviceptr>(ptr));
  }

  absl::Status CopyToDevice(DevicePtr dst, const void* src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    MakeCurrent();
    // On our stream, so the copy is ordered with the kernels (the synchronous
    // cuMemcpyHtoD runs on the legacy stream, which a non-blocking stream does
    // not wait for), then waited for: `src` may be released on return.
    KTUNE_CU_RETURN(api_->cuMemcpyHtoDAsync_(static_cast<CUdeviceptr>(dst), src, bytes, stream_), "cuMemcpyHtoDAsync");
    return KTUNE_CU(api_->cuStreamSynchronize_(stream_), "cuStreamSynchronize");
  }

  absl::Status CopyToHost(void* dst, DevicePtr src, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    MakeCurrent();
    KTUNE_CU_RETURN(api_->cuMemcpyDtoHAsync_(dst, static_cast<CUdeviceptr>(src), bytes, stream_), "cuMemcpyDtoHAsync");
    return KTUNE_CU(api_->cuStreamSynchronize_(stream_), "cuStreamSynchronize");
  }

  absl::Status Fill(DevicePtr dst, uint8_t value, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    MakeCurrent();
    return KTUNE_CU(api_->cuMemsetD8Async_(static_cast<CUdeviceptr>(dst), value, bytes, stream_), "cuMemsetD8Async");
  }

  absl::StatusOr<LoadedKernel> LoadKernel(const std::string& cubin, const std::string& lowered_name) override {
    if (cubin.empty()) return absl::InvalidArgumentError("LoadKernel: empty cubin");
    MakeCurrent();
    CUmodule module = nullptr;
    KTUNE_CU_RETURN(api_->cuModuleLoadData_(&module, cubin.data()), "cuModuleLoadData");
    CUfunction function = nullptr;
    if (absl::Status s =
            KTUNE_CU(api_->cuModuleGetFunction_(&function, module, lowered_name.c_str()), "cuModuleGetFunction");
        !s.ok()) {
      api_->cuModuleUnload_(module);
      return absl::Status(s.code(), absl::StrCat(s.message(), " for \"", lowered_name, "\""));
    }
    LoadedKernel kernel;
    kernel.module = module;
    kernel.function = function;
    return kernel;
  }

  void UnloadKernel(const LoadedKernel& kernel) override {
    if (kernel.module == nullptr) return;
    MakeCurrent();
    api_->cuModuleUnload_(static_cast<CUmodule>(kernel.module));
  }

  absl::Status Launch(const LoadedKernel& kernel, const KernelLaunch& g, void** args) override {
    MakeCurrent();
    auto function = static_cast<CUfunction>(kernel.function);
    // The launch contract of a recipe (proto KernelLaunch): any dynamic shared
    // memory is allowed for by raising the function's limit first; the 48 KiB
    // default counts static memory too, so "dynamic > 48 KiB" is not the test.
    if (g.dynamic_smem_bytes > 0) {
      KTUNE_CU_RETURN(api_->cuFuncSetAttribute_(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                static_cast<int>(g.dynamic_smem_bytes)),
                      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    }
    if (g.programmatic_dependent && info_.cc_major >= 9) {
      // As the recipe allows: the launch may overlap the previous kernel's
      // tail; the kernel waits for that kernel's results itself.
      CUlaunchAttribute attribute{};
      attribute.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attribute.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig config{};
      config.gridDimX = g.grid[0];
      config.gridDimY = g.grid[1];
      config.gridDimZ = g.grid[2];
      config.blockDimX = g.block[0];
      config.blockDimY = g.block[1];
      config.blockDimZ = g.block[2];
      config.sharedMemBytes = g.dynamic_smem_bytes;
      config.hStream = stream_;
      config.attrs = &attribute;
      config.numAttrs = 1;
      return KTUNE_CU(api_->cuLaunchKernelEx_(&config, function, args, nullptr),
                      "cuLaunchKernelEx(PROGRAMMATIC_STREAM_SERIALIZATION)");
    }
    return KTUNE_CU(api_->cuLaunchKernel_(function, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2],
                                          g.dynamic_smem_bytes, stream_, args, nullptr),
                    "cuLaunchKernel");
  }

  absl::StatusOr<TmaDescriptorBytes> EncodeTma(const TmaTensor& t) override {
    static_assert(sizeof(CUtensorMap) == sizeof(TmaDescriptorBytes), "a CUtensorMap is 128 bytes");
    // Encoded exactly as the recipes describe it (tma_descriptor.h).
    absl::StatusOr<v1::TmaDescriptor> d = DescribeTma(t, "");
    if (!d.ok()) return d.status();
    TmaDescriptorBytes out;
    cuuint64_t dims[3], strides[2];
    cuuint32_t box[3], element_strides[3];
    for (int i = 0; i < 3; ++i) {
      dims[i] = d->dims(i);
      box[i] = d->box(i);
      element_strides[i] = d->element_strides(i);
    }
    for (int i = 0; i < 2; ++i) strides[i] = d->strides_bytes(i);
    const CUresult r = api_->cuTensorMapEncodeTiled_(
        reinterpret_cast<CUtensorMap*>(out.bytes), static_cast<CUtensorMapDataType>(d->data_type()), 3,
        reinterpret_cast<void*>(t.base), dims, strides, box, element_strides,
        static_cast<CUtensorMapInterleave>(d->interleave()), static_cast<CUtensorMapSwizzle>(d->swizzle()),
        static_cast<CUtensorMapL2promotion>(d->l2_promotion()), static_cast<CUtensorMapFloatOOBfill>(d->oob_fill()));
    if (r != CUDA_SUCCESS) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cuTensorMapEncodeTiled refused a tensor of %d-byte elements, %d x %d x %d (pitches %d, %d), box %d x %d: %s",
          t.element_bytes, t.inner, t.rows, t.batch, t.row_pitch, t.batch_pitch, t.box_inner, t.box_rows,
          CudaStatus(*api_, r, "cuTensorMapEncodeTiled").message()));
    }
    return out;
  }

  absl::Status Synchronize() override {
    MakeCurrent();
    return KTUNE_CU(api_->cuStreamSynchronize_(stream_), "cuStreamSynchronize");
  }

  void* stream() const override { return stream_; }

  absl::StatusOr<Launcher*> launcher() override {
    if (launcher_ == nullptr) {
      absl::StatusOr<std::unique_ptr<Launcher>> made = Launcher::Create(ordinal_);
      if (!made.ok()) return made.status();
      launcher_ = *std::move(made);
    }
    return launcher_.get();
  }

  absl::StatusOr<std::vector<float>> TimeEach(const std::function<absl::Status(int)>& launch,
                                              int repetitions) override {
    MakeCurrent();
    if (repetitions <= 0) return std::vector<float>();
    while (static_cast<int>(events_.size()) < 2 * repetitions) {
      CUevent e = nullptr;
      KTUNE_CU_RETURN(api_->cuEventCreate_(&e, CU_EVENT_DEFAULT), "cuEventCreate");
      events_.push_back(e);
    }
    for (int i = 0; i < repetitions; ++i) {
      KTUNE_CU_RETURN(api_->cuEventRecord_(events_[2 * i], stream_), "cuEventRecord");
      if (absl::Status s = launch(i); !s.ok()) return s;
      KTUNE_CU_RETURN(api_->cuEventRecord_(events_[2 * i + 1], stream_), "cuEventRecord");
    }
    KTUNE_CU_RETURN(api_->cuStreamSynchronize_(stream_), "cuStreamSynchronize");
    std::vector<float> ms(repetitions);
    for (int i = 0; i < repetitions; ++i) {
      KTUNE_CU_RETURN(api_->cuEventElapsedTime_(&ms[i], events_[2 * i], events_[2 * i + 1]), "cuEventElapsedTime");
    }
    return ms;
  }

  absl::StatusOr<std::vector<float>> TimeReplays(const std::function<absl::Status(int)>& launch, int per_replay,
                                                 int repetitions) override {
    MakeCurrent();
    if (per_replay <= 0 || repetitions <= 0) return std::vector<float>();
    // Relaxed: the launches may touch what global mode forbids during a
    // capture (a kernel attribute set at first launch, cuBLASLt's own calls).
    KTUNE_CU_RETURN(api_->cuStreamBeginCapture_(stream_, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
    absl::Status captured = absl::OkStatus();
    for (int i = 0; i < per_replay && captured.ok(); ++i) captured = launch(i);
    Graph graph(api_);
    // Ended whatever happened, so the stream takes work again.
    const absl::Status ended = KTUNE_CU(api_->cuStreamEndCapture_(stream_, &graph.graph), "cuStreamEndCapture");
    if (!captured.ok()) return captured;
    if (!ended.ok()) return ended;
    size_t nodes = 0;
    KTUNE_CU_RETURN(api_->cuGraphGetNodes_(graph.graph, nullptr, &nodes), "cuGraphGetNodes");
    if (nodes < static_cast<size_t>(per_replay)) {
      // A launch went to another stream and ran at once: timing this graph
      // would time less than the candidate.
      return absl::FailedPreconditionError(
          absl::StrCat("TimeReplays: the graph holds ", nodes, " nodes for ", per_replay, " launches"));
    }
    KTUNE_CU_RETURN(api_->cuGraphInstantiateWithFlags_(&graph.exec, graph.graph, 0), "cuGraphInstantiateWithFlags");
    // The first replay uploads the graph; it stays out of the samples.
    KTUNE_CU_RETURN(api_->cuGraphLaunch_(graph.exec, stream_), "cuGraphLaunch");
    absl::StatusOr<std::vector<float>> ms = TimeEach(
        [&](int) { return KTUNE_CU(api_->cuGraphLaunch_(graph.exec, stream_), "cuGraphLaunch"); }, repetitions);
    if (!ms.ok()) return ms.status();
    for (float& t : *ms) t /= static_cast<float>(per_replay);
    return ms;
  }

 private:
  // A captured graph and its executable instance, destroyed together.
  struct Graph {
    explicit Graph(const DriverApi* api) : api(api) {}
    ~Graph() {
      if (exec != nullptr) api->cuGraphExecDestroy_(exec);
      if (graph != nullptr) api->cuGraphDestroy_(graph);
    }
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    const DriverApi* api;
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
  };

  // The primary context must be current on whichever thread uses the device.
  void MakeCurrent() { api_->cuCtxSetCurrent_(context_); }

  const DriverApi* api_;
  int ordinal_;
  CUdevice device_;
  CUcontext context_;
  CUstream stream_;
  DeviceInfo info_;
  std::unique_ptr<Launcher> launcher_;  // made at the first launcher() call
  std::vector<CUevent> events_;         // reused across TimeEach calls
};

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  absl::StatusOr<const DriverApi*> loaded = LoadDriver();
  if (!loaded.ok()) return loaded.status();
  const DriverApi* api_ = *loaded;  // named for KTUNE_CU
  KTUNE_CU_RETURN(api_->cuInit_(0), "cuInit");
  int count = 0;
  KTUNE_CU_RETURN(api_->cuDeviceGetCount_(&count), "cuDeviceGetCount");
  return count;
}

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int ordinal) {
  absl::StatusOr<const DriverApi*> loaded = LoadDriver();
  if (!loaded.ok()) return loaded.status();
  const DriverApi* api_ = *loaded;  // named for KTUNE_CU
  KTUNE_CU_RETURN(api_->cuInit_(0), "cuInit");
  int count = 0;
  KTUNE_CU_RETURN(api_->cuDeviceGetCount_(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", ordinal, ": the driver reports ", count, " device(s)"));
  }
  CUdevice device = 0;
  KTUNE_CU_RETURN(api_->cuDeviceGet_(&device, ordinal), "cuDeviceGet");

  DeviceInfo info;
  char name[256] = {};
  KTUNE_CU_RETURN(api_->cuDeviceGetName_(name, sizeof(name) - 1, device), "cuDeviceGetName");
  info.name = name;
  auto attribute = [&](CUdevice_attribute a, int* out, const char* what) {
    return CudaStatus(*api_, api_->cuDeviceGetAttribute_(out, a, device), what);
  };
  struct {
    CUdevice_attribute attribute;
    int* out;
    const char* what;
  } const queries[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.cc_major, "cc major"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.cc_minor, "cc minor"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.sm_count, "SM count"},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info.l2_bytes, "L2 size"},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &info.max_threads_per_sm, "threads per SM"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.max_smem_per_block_optin,
       "shared memory per block"},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &info.regs_per_sm, "registers per SM"},
  };
  for (const auto& q : queries) {
    if (absl::Status s = attribute(q.attribute, q.out, q.what); !s.ok()) return s;
  }
  size_t memory = 0;
  KTUNE_CU_RETURN(api_->cuDeviceTotalMem_(&memory, device), "cuDeviceTotalMem");
  info.memory_bytes = memory;
  KTUNE_CU_RETURN(api_->cuDriverGetVersion_(&info.driver_version), "cuDriverGetVersion");

  CUcontext context = nullptr;
  KTUNE_CU_RETURN(api_->cuDevicePrimaryCtxRetain_(&context, device), "cuDevicePrimaryCtxRetain");
  CUstream stream = nullptr;
  absl::Status s = KTUNE_CU(api_->cuCtxSetCurrent_(context), "cuCtxSetCurrent");
  if (s.ok()) s = KTUNE_CU(api_->cuStreamCreate_(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  if (!s.ok()) {
    api_->cuDevicePrimaryCtxRelease_(device);
    return s;
  }
  return std::unique_ptr<Device>(new CudaDevice(api_, ordinal, device, context, stream, std::move(info)));
}

// ---- DeviceBuffer -------------------------------------------------------------

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(Device* device, size_t bytes) {
  absl::StatusOr<DevicePtr> ptr = device->Alloc(bytes);
  if (!ptr.ok()) return ptr.status();
  DeviceBuffer buffer;
  buffer.device_ = device;
  buffer.ptr_ = *ptr;
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(std::exchange(other.device_, nullptr)),
      ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (device_ != nullptr && ptr_ != 0) device_->Free(ptr_);
    device_ = std::exchange(other.device_, nullptr);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (device_ != nullptr && ptr_ != 0) device_->Free(ptr_);
}

}  // namespace ktune
