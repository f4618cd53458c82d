#include "tuner/core/recipe_interface.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ktune {

int64_t ElementBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::BF16:
    case v1::FP16:
      return 2;
    case v1::FP32:
      return 4;
    default:
      return 1;  // fp8, and raw bytes
  }
}

v1::TensorSpec DenseTensorSpec(absl::string_view name, v1::TensorRole role, v1::DType dtype,
                               const std::vector<int64_t>& shape, uint32_t alignment_bytes) {
  v1::TensorSpec t;
  t.set_name(std::string(name));
  t.set_role(role);
  t.set_dtype(dtype);
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= shape[i];
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    t.add_shape(shape[i]);
    t.add_strides(strides[i]);
  }
  t.set_alignment_bytes(alignment_bytes);
  t.set_bytes(static_cast<uint64_t>(step * ElementBytes(dtype)));
  return t;
}

v1::TensorSpec AbsentTensorSpec(absl::string_view name, v1::TensorRole role, v1::DType dtype) {
  v1::TensorSpec t = DenseTensorSpec(name, role, dtype, {0}, 1);
  t.set_optional(true);
  return t;
}

v1::TensorSpec WorkspaceTensorSpec(absl::string_view name, uint64_t bytes, v1::DType dtype,
                                   const std::vector<int64_t>& shape) {
  constexpr uint32_t kWorkspaceAlignment = 16;  // vector stores of fp32 partials
  if (shape.empty()) {
    return DenseTensorSpec(name, v1::ROLE_WORKSPACE, v1::DTYPE_UNSPECIFIED, {static_cast<int64_t>(bytes)},
                           kWorkspaceAlignment);
  }
  return DenseTensorSpec(name, v1::ROLE_WORKSPACE, dtype, shape, kWorkspaceAlignment);
}

v1::KernelArg TensorArg(absl::string_view name, absl::string_view tensor) {
  v1::KernelArg a;
  a.set_name(std::string(name));
  a.set_tensor(std::string(tensor));
  return a;
}

v1::KernelArg I32Arg(absl::string_view name, int32_t value) {
  v1::KernelArg a;
  a.set_name(std::string(name));
  a.set_i32(value);
  return a;
}

v1::KernelArg F32Arg(absl::string_view name, float value) {
  v1::KernelArg a;
  a.set_name(std::string(name));
  a.set_f32(value);
  return a;
}

v1::KernelArg TmaArg(absl::string_view name, v1::TmaDescriptor descriptor) {
  v1::KernelArg a;
  a.set_name(std::string(name));
  *a.mutable_tma() = std::move(descriptor);
  return a;
}

absl::Status WriteInterface(const ArgForParam& arg_for, const SpecForTensor& spec_for, LaunchRecipe* recipe,
                            const std::vector<std::string>& extra_tensors) {
  recipe->tensors.clear();
  auto use = [&](const std::string& tensor) -> absl::Status {
    const bool known = std::any_of(recipe->tensors.begin(), recipe->tensors.end(),
                                   [&](const v1::TensorSpec& t) { return t.name() == tensor; });
    if (known) return absl::OkStatus();
    absl::StatusOr<v1::TensorSpec> spec = spec_for(tensor);
    if (!spec.ok()) return spec.status();
    recipe->tensors.push_back(*std::move(spec));
    return absl::OkStatus();
  };
  for (KernelLaunch& k : recipe->kernels) {
    k.args.clear();
    for (const std::string& param : k.params) {
      absl::StatusOr<v1::KernelArg> arg = arg_for(param);
      if (!arg.ok()) {
        return absl::Status(arg.status().code(),
                            absl::StrCat(k.name_expression, ": parameter ", param, ": ", arg.status().message()));
      }
      if (arg->has_tensor()) {
        if (absl::Status s = use(arg->tensor()); !s.ok()) return s;
      } else if (arg->has_tma()) {
        if (absl::Status s = use(arg->tma().tensor()); !s.ok()) return s;
      }
      k.args.push_back(*std::move(arg));
    }
  }
  for (const std::string& tensor : extra_tensors) {
    if (absl::Status s = use(tensor); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ktune
