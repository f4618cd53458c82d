// ktune::Launcher on a real GPU: an RMSNorm forward recipe, compiled here
// through NVRTC as the daemon would answer it, is launched from its fields
// alone (through the C++ API and through the C ABI) on the stream of the
// tests' own Device (another user of the same primary context, as PyTorch
// would be) and compared with a host reference in double; and a cuBLASLt
// recipe (a bf16 GEMM with an fp32 D) runs as one cublasLtMatmul built
// from its CublasLtCall.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "client/ktune_launch.h"
#include "client/launch.h"
#include "tests/gpu/gpu_env.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/gpu/host_float.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

constexpr int64_t kM = 333, kN = 1000;

// The recipe's interface, written by hand from the template's signature
// (kernel_templates/norm/rmsnorm_fwd.cuh: x, residual, w, y, rstd, scale,
// int M, int N, float eps; residual and scale absent for a plain norm, rstd
// may be null): the norm writer's own args and tensors are tested where they
// are written, and this test must not depend on them.
void DescribeByHand(const NormProblem& p, v1::LaunchRecipe* r) {
  REQUIRE(r->kernels_size() == 1);
  v1::KernelLaunch* k = r->mutable_kernels(0);
  REQUIRE(std::vector<std::string>(k->params().begin(), k->params().end()) ==
          std::vector<std::string>{"x", "residual", "w", "y", "rstd", "scale", "M", "N", "eps"});
  r->clear_tensors();
  k->clear_args();
  auto tensor = [&](const char* name, v1::TensorRole role, std::vector<int64_t> shape, bool optional) {
    v1::TensorSpec* t = r->add_tensors();
    t->set_name(name);
    t->set_role(role);
    t->set_dtype(v1::FP32);
    for (int64_t d : shape) t->add_shape(d);
    if (shape.size() == 2) {
      t->add_strides(shape[1]);
      t->add_strides(1);
    } else {
      t->add_strides(1);
    }
    t->set_alignment_bytes(16);
    t->set_optional(optional);
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    t->set_bytes(static_cast<uint64_t>(elements) * 4);
    v1::KernelArg* a = k->add_args();
    a->set_name(name);
    a->set_tensor(name);
  };
  // A tensor the problem lacks: optional, empty, bound to null.
  auto absent = [&](const char* name, v1::TensorRole role) {
    v1::TensorSpec* t = r->add_tensors();
    t->set_name(name);
    t->set_role(role);
    t->set_dtype(v1::FP32);
    t->add_shape(0);
    t->add_strides(1);
    t->set_alignment_bytes(1);
    t->set_optional(true);
    t->set_bytes(0);
    v1::KernelArg* a = k->add_args();
    a->set_name(name);
    a->set_tensor(name);
  };
  tensor("x", v1::ROLE_INPUT, {p.m, p.n}, false);
  absent("residual", v1::ROLE_INPUT_OUTPUT);
  tensor("w", v1::ROLE_INPUT, {p.n}, false);
  tensor("y", v1::ROLE_OUTPUT, {p.m, p.n}, false);
  tensor("rstd", v1::ROLE_OUTPUT, {p.m}, true);
  absent("scale", v1::ROLE_SCALE);
  v1::KernelArg* m = k->add_args();
  m->set_name("M");
  m->set_i32(static_cast<int32_t>(p.m));
  v1::KernelArg* n = k->add_args();
  n->set_name("N");
  n->set_i32(static_cast<int32_t>(p.n));
  v1::KernelArg* eps = k->add_args();
  eps->set_name("eps");
  eps->set_f32(p.eps);
}

struct Buffers {
  DeviceBuffer x, w, y, rstd;
  std::vector<float> hx, hw;
};

Buffers MakeBuffers(Device* device) {
  Buffers b;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  b.hx.resize(kM * kN);
  b.hw.resize(kN);
  for (float& v : b.hx) v = u(rng);
  for (float& v : b.hw) v = u(rng);
  auto make = [&](size_t bytes) {
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(device, bytes);
    REQUIRE(buf.ok());
    return *std::move(buf);
  };
  b.x = make(b.hx.size() * 4);
  b.w = make(b.hw.size() * 4);
  b.y = make(b.hx.size() * 4);
  b.rstd = make(kM * 4);
  REQUIRE(device->CopyToDevice(b.x.get(), b.hx.data(), b.hx.size() * 4).ok());
  REQUIRE(device->CopyToDevice(b.w.get(), b.hw.data(), b.hw.size() * 4).ok());
  REQUIRE(device->Fill(b.y.get(), 0xFF, b.hx.size() * 4).ok());  // NaN: unwritten outputs cannot pass
  REQUIRE(device->Fill(b.rstd.get(), 0xFF, kM * 4).ok());
  return b;
}

// y and (when `check_rstd`) rstd against y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
void CheckAgainstHost(Device* device, const Buffers& b, float eps, bool check_rstd) {
  REQUIRE(device->Synchronize().ok());
  std::vector<float> y(kM * kN), rstd(kM);
  REQUIRE(device->CopyToHost(y.data(), b.y.get(), y.size() * 4).ok());
  REQUIRE(device->CopyToHost(rstd.data(), b.rstd.get(), rstd.size() * 4).ok());
  int bad = 0;
  for (int64_t i = 0; i < kM; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < kN; ++j) ss += double(b.hx[i * kN + j]) * b.hx[i * kN + j];
    const double r = 1.0 / std::sqrt(ss / kN + eps);
    if (check_rstd && !(std::abs(rstd[i] - r) <= 1e-5 * r)) ++bad;
    for (int64_t j = 0; j < kN; ++j) {
      const double want = b.hx[i * kN + j] * r * b.hw[j];
      if (!(std::abs(y[i * kN + j] - want) <= 1e-5 + 1e-5 * std::abs(want))) ++bad;
    }
  }
  CHECK(bad == 0);
}

v1::LaunchRecipe CompiledNormRecipe(Device* device, NormProblem* problem) {
  NormProblem& p = *problem;
  p.op = NormOp::kRMSNorm;
  p.pass = NormPass::kForward;
  p.m = kM;
  p.n = kN;
  p.input_dtype = p.output_dtype = p.weight_dtype = DType::kFP32;
  p.has_weight = true;
  absl::StatusOr<LaunchRecipe> recipe = NormLaunchRecipe(p, HeuristicNormConfig(p, device->info()), device->info());
  REQUIRE(recipe.ok());
  const CompileResult c = Compile(&*recipe);
  INFO(c.log);
  REQUIRE(c.ok);
  v1::LaunchRecipe wire = RecipeToProto(*recipe, /*include_cubin=*/true);
  DescribeByHand(p, &wire);
  return wire;
}

TEST_CASE("Launcher: an RMSNorm forward recipe launched from its fields computes RMSNorm", "[gpu][launch]") {
  Device* device = testing::GpuDevice();
  NormProblem p;
  const v1::LaunchRecipe recipe = CompiledNormRecipe(device, &p);
  absl::StatusOr<std::unique_ptr<Launcher>> launcher = Launcher::Create(0);
  INFO(launcher.status().ToString());
  REQUIRE(launcher.ok());
  absl::StatusOr<const LoadedRecipe*> loaded = (*launcher)->Load(recipe);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());

  SECTION("with every tensor bound") {
    Buffers b = MakeBuffers(device);
    const uint64_t addresses[] = {b.x.get(), 0, b.w.get(), b.y.get(), b.rstd.get(), 0};
    const absl::Status s = (*launcher)->Launch(**loaded, addresses, device->stream());
    INFO(s.ToString());
    REQUIRE(s.ok());
    CheckAgainstHost(device, b, p.eps, /*check_rstd=*/true);
  }
  SECTION("with the optional rstd unbound") {
    Buffers b = MakeBuffers(device);
    const uint64_t addresses[] = {b.x.get(), 0, b.w.get(), b.y.get(), 0, 0};
    REQUIRE((*launcher)->Launch(**loaded, addresses, device->stream()).ok());
    CheckAgainstHost(device, b, p.eps, /*check_rstd=*/false);
  }
}

TEST_CASE("C ABI: the same recipe through ktune_recipe_load and ktune_recipe_launch", "[gpu][launch]") {
  Device* device = testing::GpuDevice();
  NormProblem p;
  const std::string bytes = CompiledNormRecipe(device, &p).SerializeAsString();
  ktune_launcher* launcher = nullptr;
  REQUIRE(ktune_launcher_create(0, &launcher) == 0);
  ktune_recipe* recipe = nullptr;
  const int loaded = ktune_recipe_load(launcher, bytes.data(), bytes.size(), &recipe);
  INFO(ktune_last_error());
  REQUIRE(loaded == 0);
  Buffers b = MakeBuffers(device);
  const uint64_t addresses[] = {b.x.get(), 0, b.w.get(), b.y.get(), b.rstd.get(), 0};
  REQUIRE(ktune_recipe_launch(recipe, addresses, 6, device->stream()) == 0);
  CheckAgainstHost(device, b, p.eps, /*check_rstd=*/true);
  REQUIRE(device->Synchronize().ok());
  ktune_launcher_destroy(launcher);
}

// D[M, N] (fp32) = A[M, K] x B[K, N] (bf16 operands, row-major) as
// the cuBLASLt recipe's call, written by hand in cuBLASLt's column-major
// terms: its first operand is B (N x K, ld N), its second A (K x M, ld K), D
// is N x M. The algorithm is the first of cuBLASLt's heuristic for the problem.
TEST_CASE("Launcher: a cuBLASLt recipe computes its GEMM", "[gpu][launch]") {
  Device* device = testing::GpuDevice();
  constexpr int64_t m = 96, n = 160, k = 64;
  v1::GemmProblem problem;
  problem.set_m(m);
  problem.set_n(n);
  problem.set_k(k);
  problem.set_a_dtype(v1::BF16);
  problem.set_b_dtype(v1::BF16);
  problem.set_d_dtype(v1::FP32);
  problem.set_a_layout(v1::ROW_MAJOR);
  problem.set_b_layout(v1::ROW_MAJOR);
  // No bias: cuBLASLt has no bf16 bias with an fp32 D (the heuristic refuses it).
  problem.set_epilogue(v1::EPILOGUE_NONE);
  absl::StatusOr<std::unique_ptr<CublasLt>> lt = CublasLt::Open();
  REQUIRE(lt.ok());
  absl::StatusOr<std::vector<CublasLtAlgo>> algos = (*lt)->Heuristic(problem, 1, kCublasLtWorkspaceBytes);
  INFO(algos.status().ToString());
  REQUIRE(algos.ok());

  v1::LaunchRecipe r;
  r.set_template_id("cublaslt");
  r.set_cublaslt_algo((*algos)[0].data);
  r.set_workspace_bytes((*algos)[0].workspace_bytes);
  auto tensor = [&](const char* name, v1::TensorRole role, v1::DType dtype) {
    v1::TensorSpec* t = r.add_tensors();
    t->set_name(name);
    t->set_role(role);
    t->set_dtype(dtype);
    t->set_alignment_bytes(16);
  };
  tensor("a", v1::ROLE_INPUT, v1::BF16);
  tensor("b", v1::ROLE_INPUT, v1::BF16);
  tensor("d", v1::ROLE_OUTPUT, v1::FP32);
  tensor("workspace", v1::ROLE_WORKSPACE, v1::DTYPE_UNSPECIFIED);
  v1::CublasLtCall* call = r.mutable_cublaslt_call();
  call->set_compute_type(68);  // CUBLAS_COMPUTE_32F
  call->set_scale_type(0);     // CUDA_R_32F
  call->set_trans_a(0);        // CUBLAS_OP_N
  call->set_trans_b(0);
  call->set_epilogue(1);  // CUBLASLT_EPILOGUE_DEFAULT
  auto matrix = [](v1::CublasLtCall::Matrix* x, const char* name, uint32_t type, int64_t rows, int64_t cols) {
    x->set_tensor(name);
    x->set_data_type(type);
    x->set_rows(rows);
    x->set_cols(cols);
    x->set_ld(rows);
  };
  matrix(call->mutable_a(), "b", 14, n, k);  // CUDA_R_16BF
  matrix(call->mutable_b(), "a", 14, k, m);
  matrix(call->mutable_d(), "d", 0, n, m);  // CUDA_R_32F
  call->set_alpha(1.0f);
  call->set_beta(0.0f);

  // Multiples of 1/4 in [-2, 2]: exact in bf16, and every sum exact in fp32.
  std::mt19937 rng(11);
  auto value = [&] { return static_cast<float>(static_cast<int>(rng() % 17) - 8) / 4.0f; };
  std::vector<float> ha(m * k), hb(k * n);
  for (float& v : ha) v = value();
  for (float& v : hb) v = value();
  auto upload = [&](const std::vector<float>& host) {
    std::vector<uint16_t> bf(host.size());
    for (size_t i = 0; i < host.size(); ++i) bf[i] = FloatToBf16(host[i]);
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(device, bf.size() * 2);
    REQUIRE(buf.ok());
    REQUIRE(device->CopyToDevice(buf->get(), bf.data(), bf.size() * 2).ok());
    return *std::move(buf);
  };
  DeviceBuffer a = upload(ha), b = upload(hb);
  absl::StatusOr<DeviceBuffer> d = DeviceBuffer::Create(device, m * n * 4);
  REQUIRE(d.ok());
  REQUIRE(device->Fill(d->get(), 0xFF, m * n * 4).ok());

  absl::StatusOr<std::unique_ptr<Launcher>> launcher = Launcher::Create(0);
  REQUIRE(launcher.ok());
  absl::StatusOr<const LoadedRecipe*> loaded = (*launcher)->Load(r);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  const uint64_t addresses[] = {a.get(), b.get(), d->get(), 0};
  const absl::Status s = (*launcher)->Launch(**loaded, addresses, device->stream());
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(device->Synchronize().ok());
  std::vector<float> hd(m * n);
  REQUIRE(device->CopyToHost(hd.data(), d->get(), hd.size() * 4).ok());
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t x = 0; x < k; ++x) want += double(ha[i * k + x]) * hb[x * n + j];
      if (!(std::abs(hd[i * n + j] - want) <= 1e-6)) ++bad;
    }
  }
  CHECK(bad == 0);
}

}  // namespace
}  // namespace ktune
