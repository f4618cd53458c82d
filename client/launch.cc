#include "client/launch.h"

// cuBLASLt's header for its attribute and type numbers only: the library is
// reached through CublasLtApi.
#include <cublasLt.h>

#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "client/launch_args.h"
#include "client/launch_validation.h"

namespace ktune {
namespace {

// The device's primary context, current on this thread for the scope's life;
// the caller's context is current again afterwards.
class ContextScope {
 public:
  explicit ContextScope(LaunchDriver* driver) : driver_(driver), status_(driver->EnterContext()) {}
  ~ContextScope() {
    if (status_.ok()) driver_->ExitContext();
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  LaunchDriver* driver_;
  absl::Status status_;
};

absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

// The cudaDataType_t of a tensor's elements (cuBLASLt's bias type).
absl::StatusOr<int32_t> CudaDataType(v1::DType dtype) {
  switch (dtype) {
    case v1::BF16:
      return int32_t{CUDA_R_16BF};
    case v1::FP16:
      return int32_t{CUDA_R_16F};
    case v1::FP32:
      return int32_t{CUDA_R_32F};
    case v1::FP8_E4M3:
      return int32_t{CUDA_R_8F_E4M3};
    default:
      return absl::InvalidArgumentError(absl::StrCat("no cudaDataType_t for dtype ", v1::DType_Name(dtype)));
  }
}

}  // namespace

// The matmul descriptor and the four layouts of a cuBLASLt recipe, made at
// load from its CublasLtCall; the pointers the descriptor carries (bias,
// scales) are set at each launch, under the recipe's mutex.
struct LoadedRecipe::CublasLtDescriptors {
  explicit CublasLtDescriptors(CublasLtApi* lt) : api(lt) {}
  ~CublasLtDescriptors() {
    if (desc != nullptr) api->DestroyMatmulDesc(desc);
    for (void* layout : {a, b, c, d}) {
      if (layout != nullptr) api->DestroyMatrixLayout(layout);
    }
  }
  CublasLtApi* const api;
  void* desc = nullptr;
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
};

LoadedRecipe::LoadedRecipe(Launcher* launcher, v1::LaunchRecipe recipe)
    : launcher_(launcher), recipe_(std::move(recipe)) {
  for (int i = 0; i < recipe_.tensors_size(); ++i) {
    if (recipe_.tensors(i).role() == v1::ROLE_WORKSPACE) workspace_tensor_ = i;
  }
}

LoadedRecipe::~LoadedRecipe() = default;

absl::StatusOr<std::unique_ptr<Launcher>> Launcher::Create(int device_ordinal) {
  absl::StatusOr<std::unique_ptr<LaunchDriver>> driver = OpenCudaLaunchDriver(device_ordinal);
  if (!driver.ok()) return driver.status();
  return Create(*std::move(driver), OpenCublasLtApi);
}

std::unique_ptr<Launcher> Launcher::Create(std::unique_ptr<LaunchDriver> driver, CublasLtFactory cublaslt) {
  return std::unique_ptr<Launcher>(new Launcher(std::move(driver), std::move(cublaslt)));
}

Launcher::Launcher(std::unique_ptr<LaunchDriver> driver, CublasLtFactory cublaslt)
    : driver_(std::move(driver)), cublaslt_factory_(std::move(cublaslt)) {}

Launcher::~Launcher() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, loaded] : recipes_) Unload(loaded.get());
  recipes_.clear();  // the descriptors, before the cuBLASLt that made them
  cublaslt_.reset();
}

void Launcher::Unload(LoadedRecipe* loaded) {
  ContextScope context(driver_.get());
  if (!context.status().ok()) return;  // the driver is gone: nothing left to free
  absl::MutexLock lock(&loaded->mu_);
  for (const auto& [stream, address] : loaded->workspaces_) driver_->Free(address);
  loaded->workspaces_.clear();
  if (loaded->module_ != nullptr) driver_->UnloadModule(loaded->module_);
  loaded->module_ = nullptr;
}

void Launcher::Release(const LoadedRecipe* recipe) {
  if (recipe == nullptr) return;
  std::unique_ptr<LoadedRecipe> released;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = recipes_.begin(); it != recipes_.end(); ++it) {
      if (it->second.get() != recipe) continue;
      released = std::move(it->second);
      recipes_.erase(it);
      break;
    }
  }
  if (released != nullptr) Unload(released.get());
}

absl::StatusOr<const LoadedRecipe*> Launcher::Load(const v1::LaunchRecipe& recipe) {
  return LoadKeyed(recipe.SerializeAsString(), recipe);
}

absl::StatusOr<const LoadedRecipe*> Launcher::LoadSerialized(absl::string_view bytes) {
  {
    absl::MutexLock lock(&mu_);
    auto it = recipes_.find(bytes);  // a hit costs no parse
    if (it != recipes_.end()) return it->second.get();
  }
  v1::LaunchRecipe recipe;
  if (!recipe.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", bytes.size(), " bytes are not a serialized ktune.v1.LaunchRecipe"));
  }
  return LoadKeyed(std::string(bytes), recipe);
}

absl::StatusOr<const LoadedRecipe*> Launcher::LoadKeyed(std::string key, const v1::LaunchRecipe& recipe) {
  // Loads are serialized (one module load at a time), so two callers of the
  // same recipe share one module. Launches do not take this lock.
  absl::MutexLock lock(&mu_);
  auto it = recipes_.find(key);
  if (it != recipes_.end()) return it->second.get();
  if (recipes_.size() >= kMaxLoadedRecipes) {
    return absl::ResourceExhaustedError(absl::StrCat(kMaxLoadedRecipes, " recipes loaded already"));
  }
  if (absl::Status s = ValidateLaunchRecipe(recipe); !s.ok()) return s;
  auto loaded = std::unique_ptr<LoadedRecipe>(new LoadedRecipe(this, recipe));
  const absl::Status s = IsCublasLtRecipe(recipe) ? LoadCublasLt(loaded.get()) : LoadKernels(loaded.get());
  if (!s.ok()) return s;
  const LoadedRecipe* out = loaded.get();
  recipes_.emplace(std::move(key), std::move(loaded));
  return out;
}

absl::Status Launcher::LoadKernels(LoadedRecipe* loaded) {
  const v1::LaunchRecipe& r = loaded->recipe_;
  ContextScope context(driver_.get());
  if (!context.status().ok()) return context.status();
  absl::StatusOr<void*> module = driver_->LoadModule(r.cubin());
  if (!module.ok()) return Prefixed("cubin", module.status());
  auto fail = [&](const absl::Status& s) {
    driver_->UnloadModule(*module);
    loaded->functions_.clear();
    return s;
  };
  for (int i = 0; i < r.kernels_size(); ++i) {
    const v1::KernelLaunch& k = r.kernels(i);
    absl::StatusOr<void*> function = driver_->GetFunction(*module, k.lowered_name());
    if (!function.ok()) {
      return fail(
          Prefixed(absl::StrCat("kernels[", i, "].lowered_name \"", k.lowered_name(), "\""), function.status()));
    }
    if (absl::Status s = CheckParamLayout(k, i, *function); !s.ok()) return fail(s);
    // Any dynamic shared memory, not just more than 48 KiB: the default limit
    // counts the kernel's static shared memory too.
    if (k.dynamic_smem_bytes() > 0) {
      if (absl::Status s = driver_->SetMaxDynamicSharedMemory(*function, k.dynamic_smem_bytes()); !s.ok()) {
        return fail(Prefixed(absl::StrCat("kernels[", i, "].dynamic_smem_bytes"), s));
      }
    }
    loaded->functions_.push_back(*function);
  }
  loaded->module_ = *module;
  return absl::OkStatus();
}

absl::Status Launcher::CheckParamLayout(const v1::KernelLaunch& kernel, int index, void* function) {
  absl::StatusOr<std::vector<ArgSlot>> cubin = driver_->ParamLayout(function);
  if (cubin.status().code() == absl::StatusCode::kUnimplemented) return absl::OkStatus();  // nothing to check against
  if (!cubin.ok()) return Prefixed(absl::StrCat("kernels[", index, "]"), cubin.status());
  // A recipe whose arguments disagree with the kernel would pass garbage (or
  // read past the buffer): refused here, naming the first argument that differs.
  const std::vector<ArgSlot> recipe = KernelArgLayout(kernel);
  if (recipe.size() != cubin->size()) {
    return absl::InvalidArgumentError(absl::StrCat("kernels[", index, "].args: ", recipe.size(), " arguments, but ",
                                                   kernel.lowered_name(), " in the cubin takes ", cubin->size()));
  }
  // Sizes only: the launch passes one pointer per argument (kernelParams),
  // and the offsets the driver reports are in the kernel's parameter bank,
  // which on sm_90 need not start at 0 (48 for the wgmma kernels).
  for (size_t i = 0; i < recipe.size(); ++i) {
    if (recipe[i].size != (*cubin)[i].size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernels[", index, "].args[", i, "] (\"", kernel.params(static_cast<int>(i)), "\"): ", recipe[i].size,
          " bytes, but the kernel's parameter ", i, " is ", (*cubin)[i].size, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status Launcher::LoadCublasLt(LoadedRecipe* loaded) {
  if (cublaslt_ == nullptr) {
    if (!cublaslt_factory_) return absl::FailedPreconditionError("this launcher has no cuBLASLt");
    absl::StatusOr<std::unique_ptr<CublasLtApi>> api = cublaslt_factory_();
    if (!api.ok()) return api.status();
    cublaslt_ = *std::move(api);
  }
  CublasLtApi* lt = cublaslt_.get();
  const v1::LaunchRecipe& r = loaded->recipe_;
  const v1::CublasLtCall& call = r.cublaslt_call();
  ContextScope context(driver_.get());
  if (!context.status().ok()) return context.status();
  auto d = std::make_unique<LoadedRecipe::CublasLtDescriptors>(lt);
  absl::StatusOr<void*> desc = lt->CreateMatmulDesc(call.compute_type(), call.scale_type());
  if (!desc.ok()) return Prefixed("cublaslt_call.compute_type", desc.status());
  d->desc = *desc;
  auto set = [&](const char* field, cublasLtMatmulDescAttributes_t attribute, const auto& value) {
    return Prefixed(field, lt->SetMatmulDescAttribute(d->desc, attribute, &value, sizeof(value)));
  };
  const int32_t trans_a = static_cast<int32_t>(call.trans_a());
  const int32_t trans_b = static_cast<int32_t>(call.trans_b());
  if (absl::Status s = set("cublaslt_call.trans_a", CUBLASLT_MATMUL_DESC_TRANSA, trans_a); !s.ok()) return s;
  if (absl::Status s = set("cublaslt_call.trans_b", CUBLASLT_MATMUL_DESC_TRANSB, trans_b); !s.ok()) return s;
  if (call.epilogue() != 0) {
    const uint32_t epilogue = call.epilogue();
    if (absl::Status s = set("cublaslt_call.epilogue", CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue); !s.ok()) return s;
  }
  if (!call.bias().empty()) {
    absl::StatusOr<int32_t> type = CudaDataType(r.tensors(FindTensor(r, call.bias())).dtype());
    if (!type.ok()) return Prefixed("cublaslt_call.bias", type.status());
    if (absl::Status s = set("cublaslt_call.bias", CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, *type); !s.ok()) return s;
  }
  auto layout = [&](const char* field, const v1::CublasLtCall::Matrix& m, void** out) -> absl::Status {
    absl::StatusOr<void*> l = lt->CreateMatrixLayout(m.data_type(), m.rows(), m.cols(), m.ld());
    if (!l.ok()) return Prefixed(field, l.status());
    *out = *l;
    if (m.batch() > 1) {
      const int32_t count = m.batch();
      const int64_t stride = m.batch_stride();
      absl::Status s = lt->SetMatrixLayoutAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
      if (s.ok()) {
        s = lt->SetMatrixLayoutAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
      }
      if (!s.ok()) return Prefixed(field, s);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = layout("cublaslt_call.a", call.a(), &d->a); !s.ok()) return s;
  if (absl::Status s = layout("cublaslt_call.b", call.b(), &d->b); !s.ok()) return s;
  if (!call.c().tensor().empty()) {
    if (absl::Status s = layout("cublaslt_call.c", call.c(), &d->c); !s.ok()) return s;
  }
  if (absl::Status s = layout("cublaslt_call.d", call.d(), &d->d); !s.ok()) return s;
  loaded->cublaslt_ = std::move(d);
  return absl::OkStatus();
}

absl::Status Launcher::Launch(const LoadedRecipe& recipe, absl::Span<const uint64_t> addresses, void* stream) {
  if (recipe.launcher_ != this) return absl::InvalidArgumentError("the recipe was loaded by another launcher");
  const v1::LaunchRecipe& r = recipe.recipe_;
  if (absl::Status s = CheckBindings(r, addresses); !s.ok()) return s;
  absl::InlinedVector<uint64_t, 16> bound(addresses.begin(), addresses.end());
  ContextScope context(driver_.get());
  if (!context.status().ok()) return context.status();
  // A workspace the caller binds is used as it is (the caller sized it, and
  // zeroed it when workspace_zeroed): a CUDA graph capture, or a tuner that
  // poisons it, owns its own; unbound, the launcher's of this stream.
  const uint64_t caller_workspace = recipe.workspace_tensor_ >= 0 ? addresses[recipe.workspace_tensor_] : 0;
  uint64_t workspace = caller_workspace;
  if (r.workspace_bytes() > 0 && caller_workspace == 0) {
    absl::StatusOr<uint64_t> w = Workspace(recipe, stream);
    if (!w.ok()) return w.status();
    workspace = *w;
  }
  if (recipe.workspace_tensor_ >= 0) bound[recipe.workspace_tensor_] = workspace;
  if (recipe.cublaslt_ != nullptr) return LaunchCublasLt(recipe, bound, workspace, stream);
  return LaunchKernels(recipe, bound, stream);
}

absl::StatusOr<uint64_t> Launcher::Workspace(const LoadedRecipe& recipe, void* stream) {
  absl::MutexLock lock(&recipe.mu_);
  auto it = recipe.workspaces_.find(stream);
  if (it != recipe.workspaces_.end()) return it->second;
  const v1::LaunchRecipe& r = recipe.recipe_;
  absl::StatusOr<uint64_t> address = driver_->Alloc(r.workspace_bytes());
  if (!address.ok()) return Prefixed("workspace_bytes", address.status());
  // Zeroed on the stream the workspace belongs to, so the first launch on it
  // (also on that stream) sees zeros; the kernels leave it zero again.
  if (r.workspace_zeroed()) {
    if (absl::Status s = driver_->MemsetD8Async(*address, 0, r.workspace_bytes(), stream); !s.ok()) {
      driver_->Free(*address);
      return Prefixed("workspace_zeroed", s);
    }
  }
  recipe.workspaces_.emplace(stream, *address);
  return *address;
}

absl::Status Launcher::LaunchKernels(const LoadedRecipe& recipe, absl::Span<const uint64_t> bound, void* stream) {
  const v1::LaunchRecipe& r = recipe.recipe_;
  for (int k = 0; k < r.kernels_size(); ++k) {
    auto encode = [&](int arg, const v1::TmaDescriptor& tma, uint64_t base) -> absl::StatusOr<TensorMapBytes> {
      const LoadedRecipe::TmaKey key{k, arg, base};
      absl::MutexLock lock(&recipe.mu_);
      auto it = recipe.tensor_maps_.find(key);
      if (it != recipe.tensor_maps_.end()) return it->second;
      absl::StatusOr<TensorMapBytes> map = driver_->EncodeTensorMap(tma, base);
      if (!map.ok()) return map.status();
      if (recipe.tensor_maps_.size() >= kMaxTensorMapsPerRecipe) recipe.tensor_maps_.clear();
      recipe.tensor_maps_.emplace(key, *map);
      return map;
    };
    absl::StatusOr<PackedArgs> packed = PackKernelArgs(r, k, bound, encode);
    if (!packed.ok()) return packed.status();
    const v1::KernelLaunch& kl = r.kernels(k);
    KernelLaunchCall call;
    call.function = recipe.functions_[k];
    for (int i = 0; i < kl.grid_size(); ++i) call.grid[i] = kl.grid(i);
    for (int i = 0; i < kl.block_size(); ++i) call.block[i] = kl.block(i);
    call.dynamic_smem_bytes = kl.dynamic_smem_bytes();
    call.stream = stream;
    call.programmatic_stream_serialization = kl.programmatic_dependent();
    call.args = &*packed;
    if (absl::Status s = driver_->Launch(call); !s.ok()) {
      return Prefixed(absl::StrCat("kernels[", k, "] (", kl.lowered_name(), ")"), s);
    }
  }
  return absl::OkStatus();
}

absl::Status Launcher::LaunchCublasLt(const LoadedRecipe& recipe, absl::Span<const uint64_t> bound, uint64_t workspace,
                                      void* stream) {
  const v1::LaunchRecipe& r = recipe.recipe_;
  const v1::CublasLtCall& call = r.cublaslt_call();
  const LoadedRecipe::CublasLtDescriptors& d = *recipe.cublaslt_;
  auto address = [&](const std::string& tensor) -> uint64_t {
    return tensor.empty() ? 0 : bound[FindTensor(r, tensor)];
  };
  MatmulCall m;
  m.desc = d.desc;
  m.alpha = call.alpha();
  m.a = address(call.a().tensor());
  m.b = address(call.b().tensor());
  m.d = address(call.d().tensor());
  m.a_layout = d.a;
  m.b_layout = d.b;
  m.d_layout = d.d;
  const uint64_t c = address(call.c().tensor());
  // Without C, D doubles as C, never read (beta 0).
  m.c = c != 0 ? c : m.d;
  m.c_layout = c != 0 ? d.c : d.d;
  m.beta = c != 0 ? call.beta() : 0.0f;
  m.algo = r.cublaslt_algo().data();
  m.workspace = workspace;
  m.workspace_bytes = r.workspace_bytes();
  m.stream = stream;
  // The descriptor carries this launch's pointers until the matmul is
  // enqueued: one launch of the recipe at a time sets and uses it.
  absl::MutexLock lock(&recipe.mu_);
  struct {
    const char* field;
    cublasLtMatmulDescAttributes_t attribute;
    const std::string& tensor;
  } const pointers[] = {{"cublaslt_call.bias", CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias()},
                        {"cublaslt_call.a_scale", CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, call.a_scale()},
                        {"cublaslt_call.b_scale", CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, call.b_scale()}};
  for (const auto& p : pointers) {
    if (p.tensor.empty()) continue;
    const void* pointer = reinterpret_cast<const void*>(address(p.tensor));
    if (absl::Status s = d.api->SetMatmulDescAttribute(d.desc, p.attribute, &pointer, sizeof(pointer)); !s.ok()) {
      return Prefixed(p.field, s);
    }
  }
  return Prefixed("cublasLtMatmul", d.api->Matmul(m));
}

}  // namespace ktune
