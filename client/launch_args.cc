#include "client/launch_args.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ktune {
namespace {

// The size and alignment of an argument by value, as the kernel ABI has them.
struct SizeAlign {
  uint32_t size, alignment;
};
SizeAlign SizeAlignOf(const v1::KernelArg& arg) {
  switch (arg.value_case()) {
    case v1::KernelArg::kTensor:
      return {sizeof(uint64_t), alignof(uint64_t)};  // a device pointer is 8 bytes on every CUDA platform
    case v1::KernelArg::kI32:
      return {sizeof(int32_t), alignof(int32_t)};
    case v1::KernelArg::kI64:
      return {sizeof(int64_t), alignof(int64_t)};
    case v1::KernelArg::kF32:
      return {sizeof(float), alignof(float)};
    case v1::KernelArg::kTma:
      return {sizeof(TensorMapBytes::bytes), alignof(TensorMapBytes)};
    case v1::KernelArg::VALUE_NOT_SET:
      break;
  }
  return {0, 1};
}

uint32_t AlignUp(size_t offset, uint32_t alignment) {
  return static_cast<uint32_t>((offset + alignment - 1) / alignment * alignment);
}

// Appends `value` (SizeAlignOf(arg) bytes) at the next multiple of its alignment.
void Append(PackedArgs* packed, const v1::KernelArg& arg, const void* value) {
  const auto [size, alignment] = SizeAlignOf(arg);
  const size_t offset = AlignUp(packed->bytes.size(), alignment);
  packed->bytes.resize(offset + size, 0);  // padding stays zero: the buffer is deterministic
  std::memcpy(packed->bytes.data() + offset, value, size);
  packed->offsets.push_back(static_cast<uint32_t>(offset));
  packed->sizes.push_back(size);
}

std::string TensorLabel(const v1::LaunchRecipe& recipe, int i) {
  return absl::StrCat("tensors[", i, "] (\"", recipe.tensors(i).name(), "\")");
}

}  // namespace

std::vector<ArgSlot> KernelArgLayout(const v1::KernelLaunch& kernel) {
  std::vector<ArgSlot> slots;
  size_t end = 0;
  for (const v1::KernelArg& arg : kernel.args()) {
    const auto [size, alignment] = SizeAlignOf(arg);
    ArgSlot slot;
    slot.offset = AlignUp(end, alignment);
    slot.size = size;
    end = slot.offset + size;
    slots.push_back(slot);
  }
  return slots;
}

int FindTensor(const v1::LaunchRecipe& recipe, const std::string& name) {
  for (int i = 0; i < recipe.tensors_size(); ++i) {
    if (recipe.tensors(i).name() == name) return i;
  }
  return -1;
}

absl::Status CheckBindings(const v1::LaunchRecipe& recipe, absl::Span<const uint64_t> addresses) {
  if (addresses.size() != static_cast<size_t>(recipe.tensors_size())) {
    return absl::InvalidArgumentError(absl::StrCat(addresses.size(), " addresses for the recipe's ",
                                                   recipe.tensors_size(), " tensors (one per tensor, in order)"));
  }
  for (int i = 0; i < recipe.tensors_size(); ++i) {
    const v1::TensorSpec& t = recipe.tensors(i);
    const uint64_t address = addresses[i];
    if (address == 0) {
      // Unbound workspace: the launcher's own.
      if (t.optional() || t.role() == v1::ROLE_WORKSPACE) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(recipe, i), " is required and bound to a null address"));
    }
    if (t.alignment_bytes() > 1 && address % t.alignment_bytes() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(recipe, i), " must be ", t.alignment_bytes(),
                                                     "-byte aligned; bound to 0x", absl::Hex(address)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PackedArgs> PackKernelArgs(const v1::LaunchRecipe& recipe, int kernel,
                                          absl::Span<const uint64_t> addresses, TensorMapEncoder encode) {
  const v1::KernelLaunch& k = recipe.kernels(kernel);
  PackedArgs packed;
  packed.offsets.reserve(k.args_size());
  packed.sizes.reserve(k.args_size());
  for (int i = 0; i < k.args_size(); ++i) {
    const v1::KernelArg& arg = k.args(i);
    switch (arg.value_case()) {
      case v1::KernelArg::kTensor: {
        const int t = FindTensor(recipe, arg.tensor());
        if (t < 0 || static_cast<size_t>(t) >= addresses.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("kernels[", kernel, "].args[", i, "]: no tensor \"", arg.tensor(), "\""));
        }
        const uint64_t address = addresses[t];
        Append(&packed, arg, &address);
        break;
      }
      case v1::KernelArg::kI32: {
        const int32_t v = arg.i32();
        Append(&packed, arg, &v);
        break;
      }
      case v1::KernelArg::kI64: {
        const int64_t v = arg.i64();
        Append(&packed, arg, &v);
        break;
      }
      case v1::KernelArg::kF32: {
        const float v = arg.f32();
        Append(&packed, arg, &v);
        break;
      }
      case v1::KernelArg::kTma: {
        const int t = FindTensor(recipe, arg.tma().tensor());
        if (t < 0 || static_cast<size_t>(t) >= addresses.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat("kernels[", kernel, "].args[", i, "].tma: no tensor \"", arg.tma().tensor(), "\""));
        }
        if (addresses[t] == 0) {
          return absl::InvalidArgumentError(absl::StrCat("kernels[", kernel, "].args[", i,
                                                         "].tma: ", TensorLabel(recipe, t),
                                                         " is unbound (a TMA descriptor needs "
                                                         "an address)"));
        }
        absl::StatusOr<TensorMapBytes> map = encode(i, arg.tma(), addresses[t]);
        if (!map.ok()) {
          return absl::Status(map.status().code(), absl::StrCat("kernels[", kernel, "].args[", i, "] (\"", arg.name(),
                                                                "\"): ", map.status().message()));
        }
        Append(&packed, arg, map->bytes.data());
        break;
      }
      case v1::KernelArg::VALUE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrCat("kernels[", kernel, "].args[", i, "] (\"", arg.name(), "\"): no value"));
    }
  }
  return packed;
}

}  // namespace ktune
