// A recipe kernel's parameter buffer, from the recipe's fields and the
// caller's device addresses alone: the pure half of launching (no driver, no
// state), so that what a launch passes can be tested byte for byte and code
// that launches by other means can reuse it.
//
// The layout is the CUDA kernel parameter ABI: each argument at the next
// multiple of its alignment (device pointers and 64-bit integers 8 bytes,
// 32-bit integers and floats 4, a CUtensorMap 64), by value.
//
// Thread-safe: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// A CUtensorMap: 128 opaque bytes that a kernel takes by value.
struct TensorMapBytes {
  alignas(64) std::array<unsigned char, 128> bytes{};
};

// One kernel's arguments, packed.
struct PackedArgs {
  std::vector<unsigned char> bytes;  // the parameter buffer
  std::vector<uint32_t> offsets;     // where argument i starts in bytes
  std::vector<uint32_t> sizes;       // how many bytes argument i takes
};

// Where one argument lies in a parameter buffer.
struct ArgSlot {
  uint32_t offset = 0;
  uint32_t size = 0;
  bool operator==(const ArgSlot& o) const { return offset == o.offset && size == o.size; }
};

// The slot of each argument of `kernel`, as PackKernelArgs lays them out
// (an argument without a value takes no room). What a launcher compares
// with the kernel's own parameter layout in the cubin.
std::vector<ArgSlot> KernelArgLayout(const v1::KernelLaunch& kernel);

// Encodes the TMA descriptor of argument `arg` over `base` (a device
// address, never 0), as cuTensorMapEncodeTiled does.
using TensorMapEncoder =
    absl::FunctionRef<absl::StatusOr<TensorMapBytes>(int arg, const v1::TmaDescriptor& tma, uint64_t base)>;

// The index of the tensor named `name` in recipe.tensors(), or -1.
int FindTensor(const v1::LaunchRecipe& recipe, const std::string& name);

// INVALID_ARGUMENT naming the tensor unless `addresses` binds every tensor of
// `recipe` in order (one each) and each bound address keeps the tensor's
// contract: non-null unless the tensor is optional, a multiple of its
// alignment_bytes. The ROLE_WORKSPACE entry is not read: the launcher binds it.
absl::Status CheckBindings(const v1::LaunchRecipe& recipe, absl::Span<const uint64_t> addresses);

// The parameter buffer of kernels(kernel) of `recipe`, with `addresses[i]`
// the device address of tensors(i) (0 for an unbound optional tensor; the
// workspace's entry already the launcher's workspace). Tensor arguments are
// 8-byte addresses, scalars their values, TMA descriptors what `encode`
// returns for the tensor's address (INVALID_ARGUMENT if it is unbound).
// REQUIRES: the recipe passed ValidateLaunchRecipe; addresses.size() ==
// tensors_size().
absl::StatusOr<PackedArgs> PackKernelArgs(const v1::LaunchRecipe& recipe, int kernel,
                                          absl::Span<const uint64_t> addresses, TensorMapEncoder encode);

}  // namespace ktune
