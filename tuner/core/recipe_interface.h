// The shared pieces of a recipe's interface (launch_recipe.h: each kernel's
// typed arguments and the tensors they name), for the ops' recipe writers
// (tuner/norm/norm_interface.h, tuner/gemm/gemm_interface.h): tensor specs of
// dense row-major tensors, of tensors a problem lacks, of the workspace; one
// argument of each kind; and WriteInterface, which turns each kernel's
// parameter list into its arguments and gathers the tensors they name.
//
// An absent tensor (AbsentTensorSpec) is one the kernels take a pointer to
// but never touch for this problem (no weight, no bias, no C, bf16's scales,
// no workspace): optional, no elements, no bytes. A caller binds nothing.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

// Bytes of one element: 2 for bf16 and fp16, 4 for fp32, 1 for fp8 and for
// DTYPE_UNSPECIFIED (raw bytes: the workspace).
int64_t ElementBytes(v1::DType dtype);

// A dense row-major tensor of `shape` (outermost first): contiguous strides,
// bytes = elements * ElementBytes(dtype). Rank 0 is one element.
v1::TensorSpec DenseTensorSpec(absl::string_view name, v1::TensorRole role, v1::DType dtype,
                               const std::vector<int64_t>& shape, uint32_t alignment_bytes);

// A tensor the kernels ignore for this problem: shape (0), optional, 0 bytes.
v1::TensorSpec AbsentTensorSpec(absl::string_view name, v1::TensorRole role, v1::DType dtype);

// The launcher's workspace (ROLE_WORKSPACE) of `bytes`, 16-byte aligned: a
// dense tensor of `shape` of `dtype` when its layout means something to a
// reader (the norm backward's fp32 partials), else (shape empty) raw bytes.
// REQUIRES: bytes > 0; a given shape holds exactly `bytes`.
v1::TensorSpec WorkspaceTensorSpec(absl::string_view name, uint64_t bytes, v1::DType dtype = v1::DTYPE_UNSPECIFIED,
                                   const std::vector<int64_t>& shape = {});

v1::KernelArg TensorArg(absl::string_view name, absl::string_view tensor);
v1::KernelArg I32Arg(absl::string_view name, int32_t value);
v1::KernelArg F32Arg(absl::string_view name, float value);
v1::KernelArg TmaArg(absl::string_view name, v1::TmaDescriptor descriptor);

// The argument a kernel parameter takes for this problem and config, and
// the spec of a tensor an argument names; INVALID_ARGUMENT for a name the
// op does not know.
using ArgForParam = std::function<absl::StatusOr<v1::KernelArg>(const std::string& param)>;
using SpecForTensor = std::function<absl::StatusOr<v1::TensorSpec>(const std::string& tensor)>;

// Sets every kernel's args, one per entry of its params in their order, and
// the recipe's tensors: each tensor an argument names (or a TMA descriptor's
// tensor, or `extra_tensors`, e.g. a cuBLASLt call's), once, in first use
// order. Replaces any interface the recipe had.
absl::Status WriteInterface(const ArgForParam& arg_for, const SpecForTensor& spec_for, LaunchRecipe* recipe,
                            const std::vector<std::string>& extra_tensors = {});

}  // namespace ktune
