// Fakes of the launcher's driver interfaces (client/launch_driver.h) that
// record every call, for tests of ktune::Launcher and its C ABI; and the
// recipes those tests launch.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/launch.h"
#include "client/launch_driver.h"

namespace ktune::testing {

// What the fake driver saw. Shared between the test and the fake (which the
// Launcher owns).
struct DriverLog {
  struct Launch {
    void* function;
    std::array<uint32_t, 3> grid, block;
    uint32_t smem;
    void* stream;
    bool programmatic;
    std::vector<unsigned char> bytes;
    std::vector<uint32_t> offsets;
  };
  struct Memset {
    uint64_t address;
    uint8_t value;
    uint64_t bytes;
    void* stream;
  };
  struct Encode {
    v1::TmaDescriptor tma;
    uint64_t base;
  };
  std::mutex mu;
  int depth = 0;                            // contexts entered and not exited
  int outside_context = 0;                  // calls made with no context entered
  std::vector<std::string> modules_loaded;  // images
  int modules_unloaded = 0;
  std::vector<std::string> functions;  // names looked up
  std::vector<std::pair<void*, uint32_t>> smem_limits;
  std::vector<uint64_t> allocs;  // sizes
  std::vector<uint64_t> frees;   // addresses
  std::vector<Memset> memsets;
  std::vector<Encode> encodes;
  std::vector<Launch> launches;
  std::string fail_function;  // GetFunction of this name fails
  // The cubin's parameter layout of each function name; none: UNIMPLEMENTED.
  std::map<std::string, std::vector<ArgSlot>> param_layouts;
  uint64_t next_address = 0x7f0000000000;

  void Touch() {
    if (depth <= 0) ++outside_context;
  }
};

class FakeLaunchDriver final : public LaunchDriver {
 public:
  explicit FakeLaunchDriver(std::shared_ptr<DriverLog> log) : log_(std::move(log)) {}

  absl::Status EnterContext() override {
    std::lock_guard<std::mutex> l(log_->mu);
    ++log_->depth;
    return absl::OkStatus();
  }
  void ExitContext() override {
    std::lock_guard<std::mutex> l(log_->mu);
    --log_->depth;
  }
  absl::StatusOr<void*> LoadModule(const std::string& image) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->modules_loaded.push_back(image);
    return reinterpret_cast<void*>(0x5000 + log_->modules_loaded.size());
  }
  void UnloadModule(void*) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    ++log_->modules_unloaded;
  }
  absl::StatusOr<void*> GetFunction(void*, const std::string& name) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    if (name == log_->fail_function) return absl::NotFoundError("cuModuleGetFunction: CUDA_ERROR_NOT_FOUND");
    log_->functions.push_back(name);
    return reinterpret_cast<void*>(0x9000 + log_->functions.size());
  }
  absl::Status SetMaxDynamicSharedMemory(void* function, uint32_t bytes) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->smem_limits.emplace_back(function, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Alloc(uint64_t bytes) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->allocs.push_back(bytes);
    const uint64_t a = log_->next_address;
    log_->next_address += 1 << 20;
    return a;
  }
  void Free(uint64_t address) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->frees.push_back(address);
  }
  absl::Status MemsetD8Async(uint64_t address, uint8_t value, uint64_t bytes, void* stream) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->memsets.push_back({address, value, bytes, stream});
    return absl::OkStatus();
  }
  // The "encoding": the base address, then the descriptor's first dim, then 0xAB.
  absl::StatusOr<TensorMapBytes> EncodeTensorMap(const v1::TmaDescriptor& tma, uint64_t base) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->encodes.push_back({tma, base});
    TensorMapBytes out;
    out.bytes.fill(0xAB);
    const uint64_t dim0 = tma.dims(0);
    std::memcpy(out.bytes.data(), &base, 8);
    std::memcpy(out.bytes.data() + 8, &dim0, 8);
    return out;
  }
  absl::StatusOr<std::vector<ArgSlot>> ParamLayout(void* function) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    const size_t index = reinterpret_cast<uintptr_t>(function) - 0x9001;  // as GetFunction numbers them
    if (index >= log_->functions.size()) return absl::InvalidArgumentError("not a function of this driver");
    auto it = log_->param_layouts.find(log_->functions[index]);
    if (it == log_->param_layouts.end()) return LaunchDriver::ParamLayout(function);
    return it->second;
  }
  absl::Status Launch(const KernelLaunchCall& c) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->Touch();
    log_->launches.push_back({c.function, c.grid, c.block, c.dynamic_smem_bytes, c.stream,
                              c.programmatic_stream_serialization, c.args->bytes, c.args->offsets});
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<DriverLog> log_;
};

struct BlasLog {
  struct Attribute {
    void* object;
    uint32_t attribute;
    std::vector<unsigned char> value;
  };
  struct Layout {
    void* handle;
    uint32_t type;
    uint64_t rows, cols;
    int64_t ld;
  };
  std::mutex mu;
  int opened = 0;                                    // factory calls
  std::vector<std::pair<uint32_t, uint32_t>> descs;  // compute, scale
  std::vector<Attribute> desc_attributes;
  std::vector<Layout> layouts;
  std::vector<Attribute> layout_attributes;
  std::vector<MatmulCall> matmuls;
  std::vector<std::string> matmul_algos;
  int destroyed = 0;  // descriptors and layouts

  // The last value set for `attribute` on descriptors, as a T.
  template <typename T>
  T DescAttribute(uint32_t attribute) {
    T v{};
    for (const Attribute& a : desc_attributes) {
      if (a.attribute == attribute && a.value.size() == sizeof(T)) std::memcpy(&v, a.value.data(), sizeof(T));
    }
    return v;
  }
  bool HasDescAttribute(uint32_t attribute) {
    for (const Attribute& a : desc_attributes) {
      if (a.attribute == attribute) return true;
    }
    return false;
  }
};

class FakeCublasLt final : public CublasLtApi {
 public:
  explicit FakeCublasLt(std::shared_ptr<BlasLog> log) : log_(std::move(log)) {}
  absl::StatusOr<void*> CreateMatmulDesc(uint32_t compute_type, uint32_t scale_type) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->descs.emplace_back(compute_type, scale_type);
    return reinterpret_cast<void*>(0xd000 + log_->descs.size());
  }
  absl::Status SetMatmulDescAttribute(void* desc, uint32_t attribute, const void* value, size_t size) override {
    std::lock_guard<std::mutex> l(log_->mu);
    const auto* p = static_cast<const unsigned char*>(value);
    log_->desc_attributes.push_back({desc, attribute, std::vector<unsigned char>(p, p + size)});
    return absl::OkStatus();
  }
  void DestroyMatmulDesc(void*) override {
    std::lock_guard<std::mutex> l(log_->mu);
    ++log_->destroyed;
  }
  absl::StatusOr<void*> CreateMatrixLayout(uint32_t type, uint64_t rows, uint64_t cols, int64_t ld) override {
    std::lock_guard<std::mutex> l(log_->mu);
    void* handle = reinterpret_cast<void*>(0xa000 + log_->layouts.size() + 1);
    log_->layouts.push_back({handle, type, rows, cols, ld});
    return handle;
  }
  absl::Status SetMatrixLayoutAttribute(void* layout, uint32_t attribute, const void* value, size_t size) override {
    std::lock_guard<std::mutex> l(log_->mu);
    const auto* p = static_cast<const unsigned char*>(value);
    log_->layout_attributes.push_back({layout, attribute, std::vector<unsigned char>(p, p + size)});
    return absl::OkStatus();
  }
  void DestroyMatrixLayout(void*) override {
    std::lock_guard<std::mutex> l(log_->mu);
    ++log_->destroyed;
  }
  absl::Status Matmul(const MatmulCall& call) override {
    std::lock_guard<std::mutex> l(log_->mu);
    log_->matmuls.push_back(call);
    log_->matmul_algos.emplace_back(static_cast<const char*>(call.algo), 64);
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<BlasLog> log_;
};

// A Launcher over fakes that write to `driver` and `blas`.
inline std::unique_ptr<Launcher> FakeLauncher(std::shared_ptr<DriverLog> driver, std::shared_ptr<BlasLog> blas) {
  CublasLtFactory factory = [blas]() -> absl::StatusOr<std::unique_ptr<CublasLtApi>> {
    {
      std::lock_guard<std::mutex> l(blas->mu);
      ++blas->opened;
    }
    return std::unique_ptr<CublasLtApi>(new FakeCublasLt(blas));
  };
  return Launcher::Create(std::make_unique<FakeLaunchDriver>(std::move(driver)), std::move(factory));
}

inline v1::TensorSpec Tensor(const std::string& name, v1::TensorRole role, v1::DType dtype, uint32_t alignment,
                             bool optional = false) {
  v1::TensorSpec t;
  t.set_name(name);
  t.set_role(role);
  t.set_dtype(dtype);
  t.set_alignment_bytes(alignment);
  t.set_optional(optional);
  return t;
}

inline void AddTensorArg(v1::KernelLaunch* k, const std::string& name) {
  k->add_params(name);
  v1::KernelArg* a = k->add_args();
  a->set_name(name);
  a->set_tensor(name);
}

// An RMSNorm-forward-shaped recipe as the norm writer describes it: tensors
// x, w, y (16-byte aligned), rstd (optional); one kernel
// (x, w, y, rstd, int M, int N, float eps), programmatic dependent.
inline v1::LaunchRecipe NormForwardRecipe() {
  v1::LaunchRecipe r;
  r.set_template_id("norm/rmsnorm_fwd");
  r.set_cubin(
      std::string("\x7f"
                  "ELF fake cubin",
                  15));
  *r.add_tensors() = Tensor("x", v1::ROLE_INPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("w", v1::ROLE_INPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("y", v1::ROLE_OUTPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("rstd", v1::ROLE_OUTPUT, v1::FP32, 4, /*optional=*/true);
  v1::KernelLaunch* k = r.add_kernels();
  k->set_lowered_name("_Z11rmsnorm_fwdv");
  for (uint32_t g : {64u, 1u, 1u}) k->add_grid(g);
  for (uint32_t b : {256u, 1u, 1u}) k->add_block(b);
  k->set_programmatic_dependent(true);
  for (const char* t : {"x", "w", "y", "rstd"}) AddTensorArg(k, t);
  k->add_params("M");
  k->add_args()->set_i32(1000);
  k->add_params("N");
  k->add_args()->set_i32(4096);
  k->add_params("eps");
  k->add_args()->set_f32(1e-6f);
  return r;
}

}  // namespace ktune::testing
