// ktune::Launcher: launches a ktune recipe (ktune.v1.LaunchRecipe, as
// GetConfig answers it with include_cubin) from its fields alone, with no
// op-specific code: the recipe lists its tensors with their layout contract
// and each kernel's arguments typed and valued; the caller binds one device
// address per tensor and names a stream.
//
//   auto launcher = ktune::Launcher::Create(/*device_ordinal=*/0);
//   absl::StatusOr<const ktune::LoadedRecipe*> r = (*launcher)->Load(answer.recipe());
//   uint64_t addresses[] = {x, w, y, 0 /* optional rstd */};  // recipe.tensors() order
//   absl::Status s = (*launcher)->Launch(**r, addresses, stream);  // enqueued, not waited for
//
// Load validates the recipe (INVALID_ARGUMENT naming the field), loads its
// cubin once (same serialized bytes, same handle), finds each kernel, checks
// the recipe's arguments against the kernel's parameters where the driver
// can list them, and raises its dynamic shared memory limit. Launch checks the bindings (null,
// alignment), packs each kernel's parameters (client/launch_args.h), encodes
// TMA descriptors (cached per argument and base address), allocates the
// recipe's workspace once per stream (zeroed once when workspace_zeroed) and
// launches with programmatic stream serialization where the recipe marks it;
// a cuBLASLt recipe is one cublasLtMatmul built from its CublasLtCall.
//
// Driver calls run in the device's primary context, pushed around them, so a
// Launcher shares memory and streams with PyTorch and the CUDA runtime on the
// same device. The driver (libcuda.so.1) and cuBLASLt (libcublasLt.so.13,
// only when a cuBLASLt recipe is loaded) are loaded at run time: the library
// links neither.
//
// Thread-safe: Load and Launch may be called from any thread concurrently.
// Launches of one recipe on one stream share its workspace, so they are
// ordered by the stream; launches on different streams each get their own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/launch_driver.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

class Launcher;

// A recipe as loaded: its module, functions and per-stream state. Owned by
// its Launcher and valid until the Launcher is destroyed.
class LoadedRecipe {
 public:
  ~LoadedRecipe();
  const v1::LaunchRecipe& recipe() const { return recipe_; }
  Launcher* launcher() const { return launcher_; }

 private:
  friend class Launcher;
  struct CublasLtDescriptors;  // launch.cc
  struct TmaKey {
    int kernel;
    int arg;
    uint64_t base;
    bool operator==(const TmaKey& o) const { return kernel == o.kernel && arg == o.arg && base == o.base; }
    template <typename H>
    friend H AbslHashValue(H h, const TmaKey& k) {
      return H::combine(std::move(h), k.kernel, k.arg, k.base);
    }
  };

  LoadedRecipe(Launcher* launcher, v1::LaunchRecipe recipe);

  Launcher* const launcher_;
  const v1::LaunchRecipe recipe_;
  void* module_ = nullptr;        // CUmodule; null for cuBLASLt recipes
  std::vector<void*> functions_;  // CUfunction per kernel
  int workspace_tensor_ = -1;     // the ROLE_WORKSPACE entry of tensors, if any
  std::unique_ptr<CublasLtDescriptors> cublaslt_;

  mutable absl::Mutex mu_;
  // Device address of the workspace of each stream this recipe ran on.
  mutable absl::flat_hash_map<void*, uint64_t> workspaces_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<TmaKey, TensorMapBytes> tensor_maps_ ABSL_GUARDED_BY(mu_);
};

class Launcher {
 public:
  // A launcher of GPU `device_ordinal` through the CUDA driver, loaded now.
  // FAILED_PRECONDITION without a driver or such a device.
  static absl::StatusOr<std::unique_ptr<Launcher>> Create(int device_ordinal);
  // A launcher over `driver`; `cublaslt` is called at the first cuBLASLt
  // recipe (tests pass fakes of both).
  static std::unique_ptr<Launcher> Create(std::unique_ptr<LaunchDriver> driver, CublasLtFactory cublaslt);

  // Frees the workspaces and unloads the modules. REQUIRES: no launch of
  // this launcher still runs on a stream (free and unload do not wait).
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Validates and loads `recipe`; a recipe of the same serialized bytes loaded
  // before gives the same handle. INVALID_ARGUMENT naming the field of a bad
  // recipe, or the argument that the kernel in the cubin takes otherwise
  // (its size or offset); the driver's error when the cubin does not load here;
  // RESOURCE_EXHAUSTED past kMaxLoadedRecipes.
  absl::StatusOr<const LoadedRecipe*> Load(const v1::LaunchRecipe& recipe);
  // The same from a serialized recipe (INVALID_ARGUMENT if it does not parse).
  absl::StatusOr<const LoadedRecipe*> LoadSerialized(absl::string_view bytes);

  // Enqueues `recipe` on `stream` (a CUstream; null: the legacy default
  // stream) with addresses[i] bound to recipe.tensors(i) (0 for an unbound
  // optional tensor; the workspace's entry: 0 for the launcher's own, or a
  // workspace of the caller of at least workspace_bytes, zeroed by the caller
  // when workspace_zeroed, which a CUDA graph capture needs). INVALID_ARGUMENT for
  // a binding that breaks the tensor's contract; errors of the driver or
  // cuBLASLt otherwise. REQUIRES: `recipe` was loaded by this launcher.
  absl::Status Launch(const LoadedRecipe& recipe, absl::Span<const uint64_t> addresses, void* stream);

  // Unloads `recipe` and frees its workspaces now, for callers that load
  // many recipes once each (the tuner's candidates). REQUIRES: no launch of it
  // still runs, and no other thread uses the handle. Null is ignored.
  void Release(const LoadedRecipe* recipe);

  static constexpr size_t kMaxLoadedRecipes = 4096;
  // Encoded TMA descriptors kept per recipe before the cache starts over
  // (callers whose allocator hands out ever new addresses).
  static constexpr size_t kMaxTensorMapsPerRecipe = 1024;

 private:
  Launcher(std::unique_ptr<LaunchDriver> driver, CublasLtFactory cublaslt);

  absl::StatusOr<const LoadedRecipe*> LoadKeyed(std::string key, const v1::LaunchRecipe& recipe);
  absl::Status LoadKernels(LoadedRecipe* loaded);
  absl::Status CheckParamLayout(const v1::KernelLaunch& kernel, int index, void* function);
  absl::Status LoadCublasLt(LoadedRecipe* loaded) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unload(LoadedRecipe* loaded);
  absl::StatusOr<uint64_t> Workspace(const LoadedRecipe& recipe, void* stream);
  absl::Status LaunchKernels(const LoadedRecipe& recipe, absl::Span<const uint64_t> bound, void* stream);
  absl::Status LaunchCublasLt(const LoadedRecipe& recipe, absl::Span<const uint64_t> bound, uint64_t workspace,
                              void* stream);

  const std::unique_ptr<LaunchDriver> driver_;
  const CublasLtFactory cublaslt_factory_;

  absl::Mutex mu_;
  // Serialized recipe -> its loaded form (the key is hashed, then compared).
  absl::flat_hash_map<std::string, std::unique_ptr<LoadedRecipe>> recipes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CublasLtApi> cublaslt_ ABSL_GUARDED_BY(mu_);  // made at the first cuBLASLt recipe
};

}  // namespace ktune
