#include "tuner/core/wire.h"

#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ktune {

absl::StatusOr<DType> DTypeFromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::BF16:
      return DType::kBF16;
    case v1::FP16:
      return DType::kFP16;
    case v1::FP32:
      return DType::kFP32;
    case v1::FP8_E4M3:
      return DType::kFP8E4M3;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown or unspecified dtype ", dtype));
}

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return v1::BF16;
    case DType::kFP16:
      return v1::FP16;
    case DType::kFP32:
      return v1::FP32;
    case DType::kFP8E4M3:
      return v1::FP8_E4M3;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::Status RequirePositive(absl::string_view prefix, std::initializer_list<std::pair<const char*, int>> fields) {
  for (const auto& [field, value] : fields) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, field, ": must be >= 1, got ", value));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status FieldError(absl::string_view field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

// An optional dtype field: unspecified means `fallback`.
absl::StatusOr<DType> OptionalDType(absl::string_view field, v1::DType dtype, DType fallback) {
  if (dtype == v1::DTYPE_UNSPECIFIED) return fallback;
  absl::StatusOr<DType> parsed = DTypeFromProto(dtype);
  if (!parsed.ok()) return FieldError(field, parsed.status());
  return parsed;
}

}  // namespace

absl::StatusOr<NormProblem> NormProblemFromProto(const v1::NormProblem& in) {
  NormProblem p;
  switch (in.op()) {
    case v1::RMSNORM:
      p.op = NormOp::kRMSNorm;
      break;
    case v1::LAYERNORM:
      p.op = NormOp::kLayerNorm;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("problem.op: unknown or unspecified norm op ", in.op()));
  }
  switch (in.norm_pass()) {
    case v1::FWD:
      p.pass = NormPass::kForward;
      break;
    case v1::BWD:
      p.pass = NormPass::kBackward;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("problem.pass: unknown or unspecified pass ", in.norm_pass()));
  }
  p.m = in.m();
  p.n = in.n();
  auto input = DTypeFromProto(in.input_dtype());
  if (!input.ok()) return FieldError("problem.input_dtype", input.status());
  p.input_dtype = *input;
  auto output = OptionalDType("problem.output_dtype", in.output_dtype(), p.input_dtype);
  if (!output.ok()) return output.status();
  p.output_dtype = *output;
  auto weight = OptionalDType("problem.weight_dtype", in.weight_dtype(), p.input_dtype);
  if (!weight.ok()) return weight.status();
  p.weight_dtype = *weight;
  p.has_weight = in.has_weight();
  p.has_bias = in.has_bias();
  p.eps = in.eps() == 0.0f ? kDefaultNormEps : in.eps();
  p.residual = in.residual();
  p.weight_offset = in.weight_offset();
  p.out_scale = in.out_scale();
  return p;
}

v1::NormProblem NormProblemToProto(const NormProblem& p) {
  v1::NormProblem out;
  out.set_op(p.op == NormOp::kRMSNorm ? v1::RMSNORM : v1::LAYERNORM);
  out.set_norm_pass(p.pass == NormPass::kForward ? v1::FWD : v1::BWD);
  out.set_m(p.m);
  out.set_n(p.n);
  out.set_input_dtype(DTypeToProto(p.input_dtype));
  out.set_output_dtype(DTypeToProto(p.output_dtype));
  out.set_weight_dtype(DTypeToProto(p.weight_dtype));
  out.set_has_weight(p.has_weight);
  out.set_has_bias(p.has_bias);
  out.set_eps(p.eps);
  out.set_residual(p.residual);
  out.set_weight_offset(p.weight_offset);
  out.set_out_scale(p.out_scale);
  return out;
}

absl::StatusOr<NormConfig> NormConfigFromProto(const v1::NormConfig& in) {
  NormConfig c;
  c.x_block = in.x_block();
  c.r_block = in.r_block();
  c.num_warps = in.num_warps();
  c.vec = in.vec();
  c.pipeline_depth = in.pipeline_depth();
  c.split_size = in.split_size();
  c.persistent = in.persistent();
  c.reduce_rows = in.reduce_rows();
  c.cluster = in.cluster() == 0 ? 1 : in.cluster();  // unset: written before clusters existed
  const absl::Status positive = RequirePositive("config.norm.", {{"x_block", c.x_block},
                                                                 {"r_block", c.r_block},
                                                                 {"num_warps", c.num_warps},
                                                                 {"vec", c.vec},
                                                                 {"pipeline_depth", c.pipeline_depth}});
  if (!positive.ok()) return positive;
  if (c.split_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.norm.split_size: must be >= 0, got ", c.split_size));
  }
  if (c.reduce_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.norm.reduce_rows: must be >= 0, got ", c.reduce_rows));
  }
  if (c.cluster < 0) {
    return absl::InvalidArgumentError(absl::StrCat("config.norm.cluster: must be >= 0, got ", in.cluster()));
  }
  return c;
}

v1::NormConfig NormConfigToProto(const NormConfig& c) {
  v1::NormConfig out;
  out.set_x_block(c.x_block);
  out.set_r_block(c.r_block);
  out.set_num_warps(c.num_warps);
  out.set_vec(c.vec);
  out.set_pipeline_depth(c.pipeline_depth);
  out.set_split_size(c.split_size);
  out.set_persistent(c.persistent);
  out.set_reduce_rows(c.reduce_rows);
  if (c.cluster > 1) out.set_cluster(c.cluster);  // 1 stays unset: older readers see what they knew
  return out;
}

DeviceInfo DeviceFromProto(const v1::DeviceFingerprint& in) {
  DeviceInfo d;
  d.name = in.name();
  d.cc_major = in.cc_major();
  d.cc_minor = in.cc_minor();
  d.sm_count = in.sm_count();
  d.memory_bytes = in.memory_bytes();
  d.driver_version = in.driver_version();
  return d;
}

v1::DeviceFingerprint DeviceToProto(const DeviceInfo& d) {
  v1::DeviceFingerprint out;
  out.set_name(d.name);
  out.set_cc_major(d.cc_major);
  out.set_cc_minor(d.cc_minor);
  out.set_sm_count(d.sm_count);
  out.set_memory_bytes(d.memory_bytes);
  out.set_driver_version(d.driver_version);
  return out;
}

SoftwareFingerprint SoftwareFromProto(const v1::SoftwareFingerprint& in) {
  SoftwareFingerprint s;
  s.template_hash = in.template_hash();
  s.nvrtc_version = in.nvrtc_version();
  s.schema_version = in.schema_version();
  return s;
}

v1::SoftwareFingerprint SoftwareToProto(const SoftwareFingerprint& s) {
  v1::SoftwareFingerprint out;
  out.set_template_hash(s.template_hash);
  out.set_nvrtc_version(s.nvrtc_version);
  out.set_schema_version(s.schema_version);
  return out;
}

v1::LaunchRecipe RecipeToProto(const LaunchRecipe& r, bool include_cubin) {
  v1::LaunchRecipe out;
  out.set_template_id(r.template_id);
  out.set_template_hash(r.template_hash);
  for (const auto& o : r.nvrtc_options) out.add_nvrtc_options(o);
  out.set_arch(r.arch);
  for (const KernelLaunch& k : r.kernels) {
    v1::KernelLaunch* pk = out.add_kernels();
    pk->set_lowered_name(k.lowered_name);
    pk->set_name_expression(k.name_expression);
    for (uint32_t g : k.grid) pk->add_grid(g);
    for (uint32_t b : k.block) pk->add_block(b);
    pk->set_dynamic_smem_bytes(k.dynamic_smem_bytes);
    for (const auto& p : k.params) pk->add_params(p);
    pk->set_programmatic_dependent(k.programmatic_dependent);
    for (const v1::KernelArg& a : k.args) *pk->add_args() = a;
  }
  out.set_workspace_bytes(r.workspace_bytes);
  if (include_cubin) out.set_cubin(r.cubin);
  out.set_cublaslt_algo(r.cublaslt_algo);
  out.set_workspace_zeroed(r.workspace_zeroed);
  for (const v1::TensorSpec& t : r.tensors) *out.add_tensors() = t;
  if (r.is_cublaslt_call()) *out.mutable_cublaslt_call() = r.cublaslt_call;
  return out;
}

LaunchRecipe RecipeFromProto(const v1::LaunchRecipe& in) {
  LaunchRecipe r;
  r.template_id = in.template_id();
  r.template_hash = in.template_hash();
  r.nvrtc_options.assign(in.nvrtc_options().begin(), in.nvrtc_options().end());
  r.arch = in.arch();
  for (const v1::KernelLaunch& pk : in.kernels()) {
    KernelLaunch k;
    k.lowered_name = pk.lowered_name();
    k.name_expression = pk.name_expression();
    for (int i = 0; i < 3 && i < pk.grid_size(); ++i) k.grid[i] = pk.grid(i);
    for (int i = 0; i < 3 && i < pk.block_size(); ++i) k.block[i] = pk.block(i);
    k.dynamic_smem_bytes = pk.dynamic_smem_bytes();
    k.params.assign(pk.params().begin(), pk.params().end());
    k.programmatic_dependent = pk.programmatic_dependent();
    k.args.assign(pk.args().begin(), pk.args().end());
    r.kernels.push_back(std::move(k));
  }
  r.workspace_bytes = in.workspace_bytes();
  r.cubin = in.cubin();
  r.cublaslt_algo = in.cublaslt_algo();
  r.workspace_zeroed = in.workspace_zeroed();
  r.tensors.assign(in.tensors().begin(), in.tensors().end());
  r.cublaslt_call = in.cublaslt_call();
  return r;
}

v1::Problem ProblemOf(const NormProblem& problem) {
  v1::Problem p;
  *p.mutable_norm() = NormProblemToProto(problem);
  return p;
}

v1::Problem ProblemOf(const v1::GemmProblem& problem) {
  v1::Problem p;
  *p.mutable_gemm() = problem;
  return p;
}

}  // namespace ktune
