#include "tuner/norm/norm_runner.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/launch.h"
#include "tuner/compile/kernel_instance.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/parallel.h"
#include "tuner/core/wire.h"
#include "tuner/gpu/host_float.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

// ---- host-side element encodings ---------------------------------------------

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToFp16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t mant = x & 0x7fffffu;
  const int exp = static_cast<int>((x >> 23) & 0xffu);
  if (exp == 0xff) return sign | 0x7c00u | (mant != 0 ? 0x200u : 0u);
  const int e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00u;
  if (e <= 0) {  // subnormal half
    if (e < -10) return sign;
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry rounds up to inf
  return static_cast<uint16_t>(sign | h);
}

double Fp16ToDouble(uint16_t h) {
  const int sign = (h & 0x8000u) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  if (exp == 31) {
    return mant != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  }
  return sign * std::ldexp(static_cast<double>(1024 + mant), exp - 25);
}

// Reads element i of a raw array of `dtype` as a double.
double Decode(DType dtype, const uint8_t* data, int64_t i) {
  switch (dtype) {
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, data + 2 * i, 2);
      return BitsFloat(static_cast<uint32_t>(b) << 16);
    }
    case DType::kFP16: {
      uint16_t b;
      std::memcpy(&b, data + 2 * i, 2);
      return Fp16ToDouble(b);
    }
    case DType::kFP32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    case DType::kFP8E4M3:
      return E4m3ToFloat(data[i]);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Writes v rounded to `dtype` as element i.
void Encode(DType dtype, float v, uint8_t* data, int64_t i) {
  switch (dtype) {
    case DType::kBF16: {
      const uint16_t b = FloatToBf16(v);
      std::memcpy(data + 2 * i, &b, 2);
      return;
    }
    case DType::kFP16: {
      const uint16_t b = FloatToFp16(v);
      std::memcpy(data + 2 * i, &b, 2);
      return;
    }
    case DType::kFP32:
      std::memcpy(data + 4 * i, &v, 4);
      return;
    case DType::kFP8E4M3:
      data[i] = FloatToE4m3(v);
      return;
  }
}

// ---- deterministic, parallel random numbers -----------------------------------

uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform values in [0, 1), one per index of a (seed, stream) pair: the same
// values whatever the number of threads that generate them. The pair is
// hashed once, so a value costs one SplitMix64.
class UniformStream {
 public:
  UniformStream(uint64_t seed, uint64_t stream) : key_(SplitMix64(seed * 0x100000001b3ull + stream)) {}
  double operator()(uint64_t index) const { return static_cast<double>(SplitMix64(key_ ^ index) >> 11) * 0x1.0p-53; }

 private:
  uint64_t key_;
};

// A magnitude in [lo, hi) with a random sign: never zero. The fraction of
// 2u, taken without fmod (a quarter of the inputs' generation time): 2u - 1
// is exact for 2u in [1, 2), so the values are fmod's.
float SignedMagnitude(double u, double lo, double hi) {
  const double twice = 2.0 * u;
  const double m = lo + (hi - lo) * (twice < 1.0 ? twice : twice - 1.0);
  return static_cast<float>(u < 0.5 ? -m : m);
}

constexpr uint64_t kStreamX = 1;
constexpr uint64_t kStreamW = 2;
constexpr uint64_t kStreamRowScale = 3;
constexpr uint64_t kStreamDy = 4;
constexpr uint64_t kStreamB = 5;
constexpr uint64_t kStreamResidual = 6;
constexpr uint64_t kStreamDResidual = 7;

bool IsForward(const NormProblem& p) { return p.pass == NormPass::kForward; }
bool IsLayerNorm(const NormProblem& p) { return p.op == NormOp::kLayerNorm; }
bool HasBias(const NormProblem& p) { return IsLayerNorm(p) && p.has_bias; }
bool IsFp8Output(const NormProblem& p) { return p.output_dtype == DType::kFP8E4M3; }
constexpr double kE4m3Max = 448.0;  // the largest finite e4m3

// Relative error of fp32 summation the weight-gradient check allows per
// summed term: the kernels add M terms in fp32 in blocks (per CTA, then across
// CTAs), whose rounding error stays far below M * 2^-20 of the terms' root sum
// of squares for any M the problem allows, while dropping or doubling even one
// row (one term per column, of the order of that root mean square) exceeds it
// for M up to ~10^6.
constexpr double kSumTolerancePerRow = 0x1.0p-20;

}  // namespace

// ---- references and tolerances -------------------------------------------------

void RmsNormForwardReference(const std::vector<double>& x, const std::vector<double>* w, int64_t m, int64_t n,
                             double eps, std::vector<double>* y, std::vector<double>* rstd) {
  y->assign(m * n, 0.0);
  rstd->assign(m, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0.0;
    for (int64_t j = 0; j < n; ++j) ss += x[i * n + j] * x[i * n + j];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    (*rstd)[i] = r;
    for (int64_t j = 0; j < n; ++j) {
      (*y)[i * n + j] = x[i * n + j] * r * (w != nullptr ? (*w)[j] : 1.0);
    }
  }
}

void LayerNormForwardReference(const std::vector<double>& x, const std::vector<double>* w, const std::vector<double>* b,
                               int64_t m, int64_t n, double eps, std::vector<double>* y, std::vector<double>* mean,
                               std::vector<double>* rstd) {
  y->assign(m * n, 0.0);
  mean->assign(m, 0.0);
  rstd->assign(m, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += x[i * n + j];
    const double mu = s / static_cast<double>(n);
    double ss = 0.0;
    for (int64_t j = 0; j < n; ++j) ss += (x[i * n + j] - mu) * (x[i * n + j] - mu);
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    (*mean)[i] = mu;
    (*rstd)[i] = r;
    for (int64_t j = 0; j < n; ++j) {
      (*y)[i * n + j] = (x[i * n + j] - mu) * r * (w != nullptr ? (*w)[j] : 1.0) + (b != nullptr ? (*b)[j] : 0.0);
    }
  }
}

void NormBackwardReference(bool layernorm, const std::vector<double>& x, const std::vector<double>& dy,
                           const std::vector<double>* w, const std::vector<double>& mean,
                           const std::vector<double>& rstd, int64_t m, int64_t n, std::vector<double>* dx,
                           std::vector<double>* dw, std::vector<double>* db) {
  dx->assign(m * n, 0.0);
  dw->assign(n, 0.0);
  db->assign(n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    const double mu = layernorm ? mean[i] : 0.0;
    const double r = rstd[i];
    double sgx = 0.0;  // sum_j g * xhat
    double sg = 0.0;   // sum_j g
    for (int64_t j = 0; j < n; ++j) {
      const double xh = (x[i * n + j] - mu) * r;
      const double g = dy[i * n + j] * (w != nullptr ? (*w)[j] : 1.0);
      sgx += g * xh;
      sg += g;
    }
    const double c1 = sgx / static_cast<double>(n);
    const double c2 = layernorm ? sg / static_cast<double>(n) : 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double xh = (x[i * n + j] - mu) * r;
      const double g = dy[i * n + j] * (w != nullptr ? (*w)[j] : 1.0);
      (*dx)[i * n + j] = r * (g - c2 - xh * c1);
      (*dw)[j] += dy[i * n + j] * xh;
      (*db)[j] += dy[i * n + j];
    }
  }
}

double ResidualAddReference(DType dtype, double x, double residual) {
  uint8_t bytes[4];
  Encode(dtype, static_cast<float>(x) + static_cast<float>(residual), bytes, 0);
  return Decode(dtype, bytes, 0);
}

double Fp8OutputReference(double y, double scale) { return std::clamp(y / scale, -kE4m3Max, kE4m3Max); }

Tolerance ToleranceFor(DType output_dtype) {
  switch (output_dtype) {
    case DType::kBF16:
      return {1e-3, 0x1.0p-7};  // 2 ulp of an 8-bit significand
    case DType::kFP16:
      return {1e-4, 0x1.0p-9};  // 2 ulp of an 11-bit significand
    case DType::kFP32:
      return {1e-6, 1e-5};  // fp32 accumulation over up to 2^18 elements
    case DType::kFP8E4M3:
      // One ulp of a 4-bit significand (rounding to nearest is half of it,
      // the margin covers the fp32 product landing across a rounding
      // midpoint), and one step of the subnormals (2^-9) near zero.
      return {0x1.0p-9, 0x1.0p-3};
  }
  return {0, 0};
}

absl::StatusOr<LaunchRecipe> NormCheckRecipe(const NormProblem& p, const DeviceInfo& device) {
  if (absl::Status s = ValidateNormProblem(p); !s.ok()) return s;
  LaunchRecipe recipe;
  recipe.template_id = "norm/norm_check";
  absl::StatusOr<const KernelSource*> source = FindKernelSource(recipe.template_id);
  if (!source.ok()) return source.status();
  recipe.template_hash = (*source)->hash;
  recipe.arch = Arch(device);
  // --fmad=false: no product fused into an add the host check does not fuse,
  // so both checks compute the same errors.
  recipe.nvrtc_options = {absl::StrCat("--gpu-architecture=", recipe.arch), "-std=c++17", "--fmad=false"};
  KernelLaunch k;
  const absl::Status named = KernelInstance("norm_check")
                                 .Type("TIn", TemplateTypeName(p.input_dtype))
                                 .Type("TW", TemplateTypeName(p.weight_dtype))
                                 .Type("TOut", TemplateTypeName(p.output_dtype))
                                 .Bool("BACKWARD", !IsForward(p))
                                 .Bool("LAYERNORM", IsLayerNorm(p))
                                 .Bool("HAS_W", p.has_weight)
                                 .Bool("HAS_B", IsForward(p) && HasBias(p))
                                 .Bool("WEIGHT_OFFSET", p.weight_offset)
                                 .Bool("RESIDUAL", !IsForward(p) && p.residual)
                                 .NameInto(&k);
  if (!named.ok()) return named;
  constexpr int64_t kThreads = 256;  // norm_check's block
  const int64_t blocks =
      std::min<int64_t>((p.m * p.n + kThreads - 1) / kThreads, int64_t{8} * std::max(device.sm_count, 1));
  k.grid = {static_cast<uint32_t>(blocks), 1, 1};
  k.block = {static_cast<uint32_t>(kThreads), 1, 1};
  k.params = {"x", "dy", "dres", "w", "b", "out", "rows", "M", "N", "atol", "rtol", "out_scale", "verdict"};
  recipe.kernels.push_back(std::move(k));
  return recipe;
}

// ---- NormRunner ------------------------------------------------------------------

struct NormRunner::Impl {
  NormProblem problem;
  Device* device = nullptr;
  int rotation = 1;
  // Per input set (identical contents; rotated past L2 when timing):
  std::vector<DeviceBuffer> x;     // (M, N) input dtype
  std::vector<DeviceBuffer> dy;    // (M, N) input dtype, backward
  std::vector<DeviceBuffer> out;   // (M, N) output dtype: y or dx
  std::vector<DeviceBuffer> mean;  // (M) f32: forward output (LayerNorm), backward input
  std::vector<DeviceBuffer> rstd;  // (M) f32: forward output, backward input
  std::vector<DeviceBuffer> ws;    // backward workspace, recipe.workspace_bytes
  std::vector<DeviceBuffer> res;   // (M, N) input dtype: forward residual (in place), backward dresidual
  uint64_t ws_bytes = 0;
  DeviceBuffer h;       // (M, N) input dtype, forward residual: x + residual, the device check's x
  DeviceBuffer scale;   // one f32, fp8 output: VerifyScale(problem)
  DeviceBuffer w, b;    // (N) weight dtype, shared by every set
  DeviceBuffer dw, db;  // (N) weight dtype, backward outputs
  // Host copies: raw inputs, references, read-back outputs.
  std::vector<uint8_t> host_x, host_dy, host_w, host_b;
  // Residual (forward): its input, and h = x + residual rounded to the input
  // dtype as the kernel rounds it (fp32 add), what the residual must hold
  // afterwards and what is normalized. Backward: dresidual.
  std::vector<uint8_t> host_res, host_h, host_res_out;
  std::vector<double> mean_ref, rstd_ref;  // (M) float64 statistics of x
  std::vector<float> mean_f, rstd_f;       // (M) the same rounded to f32 (backward inputs)
  std::vector<double> c1_ref, c2_ref;      // (M) backward: mean_j(g * xhat), mean_j(g)
  std::vector<double> dw_ref, db_ref;      // (N) backward
  std::vector<double> dw_scale, db_scale;  // (N) root sum of squares of the summed terms
  std::vector<uint8_t> host_out, host_dw, host_db;
  std::vector<float> host_mean, host_rstd;
  // The device check (kernel_templates/norm/norm_check.cuh): its kernel,
  // loaded for the runner's life, the float64 per-row terms it reads, and
  // its two-word verdict.
  LaunchRecipe check_recipe;
  LoadedKernel check_kernel;
  DeviceBuffer check_rows;     // float64 [4][M]: mean, rstd, c1, c2
  DeviceBuffer verdict;        // uint64 [2]: the largest error's bits, the first failing index
  bool cross_checked = false;  // a Verify has compared the device check with the host's

  ~Impl() {
    if (check_kernel.function != nullptr) device->UnloadKernel(check_kernel);
  }

  int64_t x_bytes() const { return problem.m * problem.n * DTypeBytes(problem.input_dtype); }
  int64_t out_bytes() const { return problem.m * problem.n * DTypeBytes(problem.output_dtype); }
  int64_t w_bytes() const { return problem.n * DTypeBytes(problem.weight_dtype); }
  int64_t stat_bytes() const { return problem.m * static_cast<int64_t>(sizeof(float)); }
  bool fwd_residual() const { return IsForward(problem) && problem.residual; }
  bool bwd_residual() const { return !IsForward(problem) && problem.residual; }
  // The row the norm normalizes: x, or the forward's h = x + residual.
  double x_at(int64_t k) const {
    return Decode(problem.input_dtype, fwd_residual() ? host_h.data() : host_x.data(), k);
  }
  double dy_at(int64_t k) const { return Decode(problem.input_dtype, host_dy.data(), k); }
  double dres_at(int64_t k) const { return bwd_residual() ? Decode(problem.input_dtype, host_res.data(), k) : 0.0; }
  // The weight as the norm applies it: w, or 1 + w with the weight offset.
  double w_at(int64_t j) const {
    if (!problem.has_weight) return 1.0;
    const double w = Decode(problem.weight_dtype, host_w.data(), j);
    return problem.weight_offset ? 1.0 + w : w;
  }
  double b_at(int64_t j) const { return HasBias(problem) ? Decode(problem.weight_dtype, host_b.data(), j) : 0.0; }

  // Output element (i, j) (y, or dx) as the float64 reference has it, and
  // the error it is allowed. norm_check.cuh evaluates the same expressions.
  struct Expected {
    double want = 0;
    double allowed = 0;
  };
  Expected ExpectedAt(int64_t i, int64_t j) const {
    const Tolerance tol = ToleranceFor(problem.output_dtype);
    const int64_t k = i * problem.n + j;
    const double w = w_at(j);
    if (IsForward(problem)) {
      double want = (x_at(k) - mean_ref[i]) * rstd_ref[i] * w + b_at(j);
      // fp8: quantized with the per-tensor scale, saturated.
      if (IsFp8Output(problem)) want = Fp8OutputReference(want, VerifyScale(problem));
      // LayerNorm: the f32 mean's rounding moves y by up to ~rtol * |w|.
      return {want, tol.atol + tol.rtol * (std::fabs(want) + (IsLayerNorm(problem) ? std::fabs(w) : 0.0))};
    }
    // The backward is given the statistics rounded to f32 (mean_f, rstd_f).
    const double mu = IsLayerNorm(problem) ? mean_f[i] : 0.0;
    const double r = rstd_f[i];
    const double xh = (x_at(k) - mu) * r;
    const double g = dy_at(k) * w;
    const double d = dres_at(k);  // the residual stream's gradient (0 without)
    const double want = r * (g - c2_ref[i] - xh * c1_ref[i]) + d;
    // dx is a difference of terms of size r * |g|: fp32 rounding of those
    // terms, not of the (possibly small) result, bounds the error.
    return {want, tol.atol * r + tol.rtol * (std::fabs(want) + r * std::fabs(g)) + tol.rtol * std::fabs(d)};
  }

  // The device addresses for input set `set`, one per tensor of the recipe
  // (recipe.tensors, by name): what a caller binds. The scalars (M, N, eps,
  // the reduce kernel's P) are the recipe's own arguments, so a candidate
  // runs with exactly what an answer carries. The workspace is the runner's,
  // per input set, so verification can poison it.
  absl::StatusOr<std::vector<uint64_t>> Bindings(const LaunchRecipe& recipe, int set, bool with_stats) {
    const bool fwd = IsForward(problem);
    // Forward statistics are outputs, written only when asked; backward inputs.
    const bool stats = !fwd || with_stats;
    const std::pair<const char*, DevicePtr> known[] = {{"x", x[set].get()},
                                                       {"dy", fwd ? 0 : dy[set].get()},
                                                       {"w", problem.has_weight ? w.get() : 0},
                                                       {"b", HasBias(problem) && fwd ? b.get() : 0},
                                                       {"y", out[set].get()},
                                                       {"dx", out[set].get()},
                                                       {"mean", stats && IsLayerNorm(problem) ? mean[set].get() : 0},
                                                       {"rstd", stats ? rstd[set].get() : 0},
                                                       {"ws", ws.empty() ? 0 : ws[set].get()},
                                                       {"dw", problem.has_weight && !fwd ? dw.get() : 0},
                                                       {"db", HasBias(problem) && !fwd ? db.get() : 0},
                                                       {"residual", fwd_residual() ? res[set].get() : 0},
                                                       {"dresidual", bwd_residual() ? res[set].get() : 0},
                                                       {"scale", IsFp8Output(problem) ? scale.get() : 0}};
    std::vector<uint64_t> addresses;
    for (const v1::TensorSpec& t : recipe.tensors) {
      const auto* it = std::find_if(std::begin(known), std::end(known),
                                    [&](const std::pair<const char*, DevicePtr>& k) { return t.name() == k.first; });
      if (it == std::end(known)) {
        return absl::InvalidArgumentError(
            absl::StrCat("recipe tensor \"", t.name(), "\" is unknown to the norm runner"));
      }
      addresses.push_back(it->second);
    }
    return addresses;
  }

  // The recipe as the device's launcher loaded it (client/launch.h: the
  // launcher callers use), with its workspace sized.
  absl::StatusOr<const LoadedRecipe*> Load(const LaunchRecipe& recipe) {
    // A backward with partials is the fused kernel and its reduce, or the
    // single-CTA or single-cluster kernel alone (no workspace: it takes dw
    // and db and writes them itself). What the kernels compute is Verify's
    // to prove.
    const bool partials = !IsForward(problem) && (problem.has_weight || HasBias(problem));
    auto takes = [&](const char* name) {
      const std::vector<std::string>& params = recipe.kernels[0].params;
      return std::find(params.begin(), params.end(), name) != params.end();
    };
    const bool writes_gradients = partials && recipe.kernels.size() == 1 && recipe.workspace_bytes == 0 &&
                                  !takes("ws") && (takes("dw") || takes("db"));
    const size_t expected = partials && !writes_gradients ? 2 : 1;
    if (recipe.kernels.size() != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(OpName(problem), " recipes here have ", expected, " kernel(s), got ", recipe.kernels.size()));
    }
    if (!IsForward(problem)) {
      if (absl::Status s = EnsureWorkspace(recipe.workspace_bytes); !s.ok()) return s;
    }
    absl::StatusOr<Launcher*> launcher = device->launcher();
    if (!launcher.ok()) return launcher.status();
    return (*launcher)->Load(RecipeToProto(recipe, /*include_cubin=*/true));
  }

  // The workspace per input set, grown to the recipe's size when needed.
  absl::Status EnsureWorkspace(uint64_t bytes) {
    ws_bytes = bytes;
    if (bytes == 0 || (!ws.empty() && ws[0].size() >= bytes)) return absl::OkStatus();
    ws.clear();
    for (int s = 0; s < rotation; ++s) {
      absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Create(device, bytes);
      if (!buffer.ok()) return buffer.status();
      ws.push_back(*std::move(buffer));
    }
    return absl::OkStatus();
  }

  // Enqueues the recipe on input set `set` as a caller would.
  absl::Status LaunchOn(const LoadedRecipe& loaded, const std::vector<std::vector<uint64_t>>& addresses, int set) {
    return loaded.launcher()->Launch(loaded, addresses[set], device->stream());
  }

  // Poisons every output, launches every kernel of the recipe once on input
  // set 0 and waits for them.
  absl::Status RunOnce(const LaunchRecipe& recipe);
  // The (M, N) output against the reference: on the device (reading back the
  // verdict, and the failing element if any), or on the host (reading back
  // all of it).
  absl::StatusOr<VerifyResult> CheckElementsOnDevice();
  absl::StatusOr<VerifyResult> CheckElementsOnHost();
  // The small outputs, read back and checked on the host: the forward's
  // statistics, or the backward's dw and db.
  absl::StatusOr<VerifyResult> CheckSmallOutputs();
  VerifyResult CheckStatistics() const;
  // The forward's residual after the launch: exactly h, bit for bit (the
  // kernel and the host both add in f32 and round once).
  VerifyResult CheckUpdatedResidual() const;
  VerifyResult CheckWeightGradients() const;
};

NormRunner::NormRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NormRunner::~NormRunner() = default;

absl::StatusOr<std::unique_ptr<NormRunner>> NormRunner::Create(const NormProblem& problem, Device* device,
                                                               uint64_t seed) {
  if (absl::Status s = ValidateNormProblem(problem); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  Impl& im = *impl;
  im.problem = problem;
  im.device = device;
  const int64_t m = problem.m;
  const int64_t n = problem.n;
  const bool fwd = IsForward(problem);
  const bool ln = IsLayerNorm(problem);

  // The device check compiles while the host builds the inputs and references.
  absl::StatusOr<LaunchRecipe> check = NormCheckRecipe(problem, device->info());
  if (!check.ok()) return check.status();
  im.check_recipe = *std::move(check);
  std::future<CompileResult> check_compiled =
      std::async(std::launch::async, [&im] { return Compile(&im.check_recipe); });

  // Inputs: each row scaled by 2^[-2, 2) so rows have clearly different
  // statistics (a kernel mixing up rows fails), elements of magnitude
  // [0.05, 2) * scale with random signs (never zero); LayerNorm rows also get
  // an offset of up to 4 * scale, so a kernel forgetting the mean, or one whose
  // variance cancels, fails. Weights and biases of magnitude [0.5, 1.5) with
  // random signs; dy like x without the offset. The residual (forward) and
  // dresidual (backward) like dy, drawn from streams of their own.
  im.host_x.resize(im.x_bytes());
  if (!fwd) im.host_dy.resize(im.x_bytes());
  if (problem.residual) im.host_res.resize(im.x_bytes());
  if (im.fwd_residual()) {
    im.host_h.resize(im.x_bytes());
    im.host_res_out.resize(im.x_bytes());
  }
  im.host_w.resize(im.w_bytes());
  im.host_b.resize(im.w_bytes());
  im.mean_ref.assign(m, 0.0);
  im.rstd_ref.assign(m, 0.0);
  const UniformStream row_scale(seed, kStreamRowScale), row_offset(seed + 1, kStreamRowScale);
  const UniformStream x_values(seed, kStreamX), dy_values(seed, kStreamDy);
  const UniformStream res_values(seed, fwd ? kStreamResidual : kStreamDResidual);
  ParallelForRanges(m, std::max<int64_t>(1, (int64_t{1} << 16) / n), [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double scale = std::exp2(4.0 * row_scale(i) - 2.0);
      const double offset = ln ? scale * (8.0 * row_offset(i) - 4.0) : 0.0;
      double s = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const float v = static_cast<float>(offset + scale * SignedMagnitude(x_values(i * n + j), 0.05, 2.0));
        Encode(problem.input_dtype, v, im.host_x.data(), i * n + j);
        if (problem.residual) {
          const float r = static_cast<float>(scale * SignedMagnitude(res_values(i * n + j), 0.05, 2.0));
          Encode(problem.input_dtype, r, im.host_res.data(), i * n + j);
        }
        if (im.fwd_residual()) {
          const double sum =
              ResidualAddReference(problem.input_dtype, Decode(problem.input_dtype, im.host_x.data(), i * n + j),
                                   Decode(problem.input_dtype, im.host_res.data(), i * n + j));
          Encode(problem.input_dtype, static_cast<float>(sum), im.host_h.data(), i * n + j);  // exact
        }
        s += im.x_at(i * n + j);
        if (!fwd) {
          const float d = static_cast<float>(scale * SignedMagnitude(dy_values(i * n + j), 0.05, 2.0));
          Encode(problem.input_dtype, d, im.host_dy.data(), i * n + j);
        }
      }
      const double mu = ln ? s / static_cast<double>(n) : 0.0;
      double ss = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double d = im.x_at(i * n + j) - mu;
        ss += d * d;
      }
      im.mean_ref[i] = mu;
      im.rstd_ref[i] = 1.0 / std::sqrt(ss / static_cast<double>(n) + problem.eps);
    }
  });
  const UniformStream w_values(seed, kStreamW), b_values(seed, kStreamB);
  for (int64_t j = 0; j < n; ++j) {
    Encode(problem.weight_dtype, SignedMagnitude(w_values(j), 0.5, 1.5), im.host_w.data(), j);
    Encode(problem.weight_dtype, SignedMagnitude(b_values(j), 0.5, 1.5), im.host_b.data(), j);
  }
  im.mean_f.resize(m);
  im.rstd_f.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    im.mean_f[i] = static_cast<float>(im.mean_ref[i]);
    im.rstd_f[i] = static_cast<float>(im.rstd_ref[i]);
  }

  // Backward references, with the statistics the kernel is given (rounded to
  // f32), so the comparison measures the kernel and not the saved inputs.
  if (!fwd) {
    im.c1_ref.assign(m, 0.0);
    im.c2_ref.assign(m, 0.0);
    ParallelForRanges(m, std::max<int64_t>(1, (int64_t{1} << 16) / n), [&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const double mu = ln ? im.mean_f[i] : 0.0;
        const double r = im.rstd_f[i];
        double sgx = 0.0, sg = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          const double g = im.dy_at(i * n + j) * im.w_at(j);
          sgx += g * (im.x_at(i * n + j) - mu) * r;
          sg += g;
        }
        im.c1_ref[i] = sgx / static_cast<double>(n);
        im.c2_ref[i] = ln ? sg / static_cast<double>(n) : 0.0;
      }
    });
    im.dw_ref.assign(n, 0.0);
    im.db_ref.assign(n, 0.0);
    im.dw_scale.assign(n, 0.0);
    im.db_scale.assign(n, 0.0);
    ParallelForRanges(n, std::max<int64_t>(1, (int64_t{1} << 16) / m), [&](int, int64_t begin, int64_t end) {
      for (int64_t i = 0; i < m; ++i) {
        const double mu = ln ? im.mean_f[i] : 0.0;
        const double r = im.rstd_f[i];
        for (int64_t j = begin; j < end; ++j) {
          const double d = im.dy_at(i * n + j);
          const double t = d * (im.x_at(i * n + j) - mu) * r;
          im.dw_ref[j] += t;
          im.dw_scale[j] += t * t;
          im.db_ref[j] += d;
          im.db_scale[j] += d * d;
        }
      }
    });
    for (int64_t j = 0; j < n; ++j) {
      im.dw_scale[j] = std::sqrt(im.dw_scale[j]);
      im.db_scale[j] = std::sqrt(im.db_scale[j]);
    }
  }

  // Device buffers: enough sets that one sweep moves >= 3x L2.
  const int64_t per_set = im.x_bytes() * (fwd ? 1 : 2) + im.out_bytes() + (problem.residual ? im.x_bytes() : 0);
  im.rotation = RotationCount(device->info(), per_set);
  for (int s = 0; s < im.rotation; ++s) {
    for (auto [list, bytes, host] :
         {std::tuple{&im.x, im.x_bytes(), static_cast<const void*>(im.host_x.data())},
          std::tuple{&im.dy, fwd ? 0 : im.x_bytes(), static_cast<const void*>(im.host_dy.data())},
          std::tuple{&im.out, im.out_bytes(), static_cast<const void*>(nullptr)},
          std::tuple{&im.mean, im.stat_bytes(), static_cast<const void*>(im.mean_f.data())},
          std::tuple{&im.rstd, im.stat_bytes(), static_cast<const void*>(im.rstd_f.data())},
          std::tuple{&im.res, problem.residual ? im.x_bytes() : 0, static_cast<const void*>(im.host_res.data())}}) {
      if (bytes == 0) continue;
      absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Create(device, bytes);
      if (!buffer.ok()) return buffer.status();
      if (host != nullptr) {
        if (absl::Status st = device->CopyToDevice(buffer->get(), host, bytes); !st.ok()) return st;
      }
      list->push_back(*std::move(buffer));
    }
  }
  for (auto [buffer, host] :
       {std::pair{&im.w, im.host_w.data()}, std::pair{&im.b, im.host_b.data()},
        std::pair{&im.dw, static_cast<uint8_t*>(nullptr)}, std::pair{&im.db, static_cast<uint8_t*>(nullptr)}}) {
    absl::StatusOr<DeviceBuffer> created = DeviceBuffer::Create(device, im.w_bytes());
    if (!created.ok()) return created.status();
    if (host != nullptr) {
      if (absl::Status st = device->CopyToDevice(created->get(), host, im.w_bytes()); !st.ok()) {
        return st;
      }
    }
    *buffer = *std::move(created);
  }
  // The forward residual's h, the device check's x; the fp8 output's scale.
  if (im.fwd_residual()) {
    absl::StatusOr<DeviceBuffer> created = DeviceBuffer::Create(device, im.x_bytes());
    if (!created.ok()) return created.status();
    if (absl::Status st = device->CopyToDevice(created->get(), im.host_h.data(), im.x_bytes()); !st.ok()) return st;
    im.h = *std::move(created);
  }
  if (IsFp8Output(problem)) {
    const float verify_scale = VerifyScale(problem);
    absl::StatusOr<DeviceBuffer> created = DeviceBuffer::Create(device, sizeof(float));
    if (!created.ok()) return created.status();
    if (absl::Status st = device->CopyToDevice(created->get(), &verify_scale, sizeof(float)); !st.ok()) return st;
    im.scale = *std::move(created);
  }
  im.host_out.resize(im.out_bytes());
  im.host_dw.resize(im.w_bytes());
  im.host_db.resize(im.w_bytes());
  im.host_mean.resize(m);
  im.host_rstd.resize(m);

  // The device check: the per-row terms of ExpectedAt, its verdict, its kernel.
  std::vector<double> rows(4 * m, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    rows[i] = fwd ? im.mean_ref[i] : ln ? im.mean_f[i] : 0.0;
    rows[m + i] = fwd ? im.rstd_ref[i] : im.rstd_f[i];
    if (!fwd) {
      rows[2 * m + i] = im.c1_ref[i];
      rows[3 * m + i] = im.c2_ref[i];
    }
  }
  for (auto [buffer, host, bytes] :
       {std::tuple{&im.check_rows, static_cast<const void*>(rows.data()), rows.size() * sizeof(double)},
        std::tuple{&im.verdict, static_cast<const void*>(nullptr), 2 * sizeof(uint64_t)}}) {
    absl::StatusOr<DeviceBuffer> created = DeviceBuffer::Create(device, bytes);
    if (!created.ok()) return created.status();
    if (host != nullptr) {
      if (absl::Status st = device->CopyToDevice(created->get(), host, bytes); !st.ok()) return st;
    }
    *buffer = *std::move(created);
  }
  const CompileResult compiled = check_compiled.get();
  if (!compiled.ok) {
    return absl::InternalError(absl::StrCat("the norm check kernel (", im.check_recipe.kernels[0].name_expression,
                                            ") does not compile: ", compiled.log));
  }
  absl::StatusOr<LoadedKernel> kernel =
      device->LoadKernel(im.check_recipe.cubin, im.check_recipe.kernels[0].lowered_name);
  if (!kernel.ok()) return kernel.status();
  im.check_kernel = *kernel;
  return std::unique_ptr<NormRunner>(new NormRunner(std::move(impl)));
}

absl::Status NormRunner::Impl::RunOnce(const LaunchRecipe& recipe) {
  const bool fwd = IsForward(problem);
  absl::StatusOr<const LoadedRecipe*> loaded = Load(recipe);
  if (!loaded.ok()) return loaded.status();

  // Poison every output byte (and the workspace): 0xFF is NaN in every float
  // format, so an element the kernels never wrote cannot pass, and a reduce
  // kernel reading a partial the fused kernel never wrote yields NaN.
  std::vector<std::pair<DevicePtr, uint64_t>> poison = {{out[0].get(), out_bytes()}};
  if (fwd) {
    poison.push_back({rstd[0].get(), stat_bytes()});
    if (IsLayerNorm(problem)) poison.push_back({mean[0].get(), stat_bytes()});
  } else {
    poison.push_back({dw.get(), w_bytes()});
    poison.push_back({db.get(), w_bytes()});
    if (!ws.empty()) poison.push_back({ws[0].get(), ws[0].size()});
  }
  for (auto [ptr, bytes] : poison) {
    if (absl::Status s = device->Fill(ptr, 0xFF, bytes); !s.ok()) return s;
  }
  // The residual is updated in place (by every timed launch too): set 0
  // gets its input back before the checked launch.
  if (fwd_residual()) {
    if (absl::Status s = device->CopyToDevice(res[0].get(), host_res.data(), x_bytes()); !s.ok()) return s;
  }
  absl::StatusOr<std::vector<uint64_t>> bound = Bindings(recipe, 0, /*with_stats=*/true);
  if (!bound.ok()) return bound.status();
  absl::Status s = LaunchOn(**loaded, {*std::move(bound)}, 0);
  if (s.ok()) s = device->Synchronize();
  if (s.ok()) (*loaded)->launcher()->Release(*loaded);  // a tune loads hundreds of candidates
  return s;
}

absl::StatusOr<VerifyResult> NormRunner::Impl::CheckSmallOutputs() {
  std::vector<std::tuple<void*, DevicePtr, uint64_t>> back;
  if (IsForward(problem)) {
    back.push_back({host_rstd.data(), rstd[0].get(), stat_bytes()});
    if (IsLayerNorm(problem)) back.push_back({host_mean.data(), mean[0].get(), stat_bytes()});
  } else {
    back.push_back({host_dw.data(), dw.get(), w_bytes()});
    back.push_back({host_db.data(), db.get(), w_bytes()});
  }
  if (fwd_residual()) back.push_back({host_res_out.data(), res[0].get(), static_cast<uint64_t>(x_bytes())});
  for (auto [host, dev, bytes] : back) {
    if (absl::Status s = device->CopyToHost(host, dev, bytes); !s.ok()) return s;
  }
  if (fwd_residual()) {
    const VerifyResult updated = CheckUpdatedResidual();
    if (!updated.ok) return updated;
  }
  return IsForward(problem) ? CheckStatistics() : CheckWeightGradients();
}

namespace {

// Both parts must pass; the detail is the first part's failure if it has one.
VerifyResult Merge(const VerifyResult& first, const VerifyResult& second) {
  VerifyResult r;
  r.ok = first.ok && second.ok;
  r.detail = !first.ok ? first.detail : second.detail;
  r.max_error = std::max(first.max_error, second.max_error);
  return r;
}

// The device and host checks of one output agree: the same verdict, the same
// first failure, and (passing) the same largest error up to rounding of the
// last digit.
absl::Status SameVerdict(const NormProblem& problem, const VerifyResult& on_device, const VerifyResult& on_host) {
  const bool same = on_device.ok == on_host.ok && (on_device.ok ? std::fabs(on_device.max_error - on_host.max_error) <=
                                                                      1e-9 * std::max(1.0, on_host.max_error)
                                                                : on_device.detail == on_host.detail);
  if (same) return absl::OkStatus();
  auto verdict = [](const VerifyResult& v) {
    return v.ok ? absl::StrFormat("pass (largest error %.17g)", v.max_error) : v.detail;
  };
  return absl::InternalError(absl::StrCat("the device and host checks of ", CanonicalKey(problem), " disagree: device ",
                                          verdict(on_device), "; host ", verdict(on_host)));
}

}  // namespace

absl::StatusOr<VerifyResult> NormRunner::Verify(const LaunchRecipe& recipe) {
  Impl& im = *impl_;
  if (absl::Status s = im.RunOnce(recipe); !s.ok()) return s;
  absl::StatusOr<VerifyResult> elements = im.CheckElementsOnDevice();
  if (!elements.ok()) return elements.status();
  if (!im.cross_checked) {  // once per runner: the device check is itself checked
    absl::StatusOr<VerifyResult> on_host = im.CheckElementsOnHost();
    if (!on_host.ok()) return on_host.status();
    if (absl::Status s = SameVerdict(im.problem, *elements, *on_host); !s.ok()) return s;
    im.cross_checked = true;
  }
  absl::StatusOr<VerifyResult> small = im.CheckSmallOutputs();
  if (!small.ok()) return small.status();
  return Merge(*elements, *small);
}

absl::StatusOr<VerifyResult> NormRunner::VerifyOnHost(const LaunchRecipe& recipe) {
  Impl& im = *impl_;
  if (absl::Status s = im.RunOnce(recipe); !s.ok()) return s;
  absl::StatusOr<VerifyResult> elements = im.CheckElementsOnHost();
  if (!elements.ok()) return elements.status();
  absl::StatusOr<VerifyResult> small = im.CheckSmallOutputs();
  if (!small.ok()) return small.status();
  return Merge(*elements, *small);
}

namespace {

// Collects the worst error and the first failure (by a caller-chosen index)
// from the checking threads.
class Findings {
 public:
  void Report(int64_t index, double err, const std::string& detail) {
    std::lock_guard<std::mutex> lock(mu_);
    max_error_ = std::max(max_error_, err);
    if (!detail.empty() && index < first_bad_) {
      first_bad_ = index;
      first_detail_ = detail;
    }
  }
  VerifyResult Result() const {
    VerifyResult r;
    r.max_error = max_error_;
    r.ok = first_detail_.empty();
    r.detail = first_detail_;
    return r;
  }

 private:
  std::mutex mu_;
  double max_error_ = 0;
  int64_t first_bad_ = std::numeric_limits<int64_t>::max();
  std::string first_detail_;
};

std::string Describe(const char* what, int64_t i, int64_t j, double got, double want, double allowed) {
  std::string where = j >= 0 ? absl::StrFormat("%s[%d, %d]", what, i, j) : absl::StrFormat("%s[%d]", what, i);
  if (std::isnan(got)) {
    return absl::StrFormat(
        "%s is NaN (not written: outputs were poisoned with 0xFF), "
        "expected %.6g",
        where, want);
  }
  return absl::StrFormat("%s = %.6g, expected %.6g (|error| %.3g > allowed %.3g)", where, got, want,
                         std::fabs(got - want), allowed);
}

// Compares one value; false (and fills `detail`) when it fails. NaN fails.
bool Compare(const char* what, int64_t i, int64_t j, double got, double want, double allowed, double* local_max,
             std::string* detail) {
  const double err = std::fabs(got - want) / allowed;
  if (!(err <= 1.0)) {
    *detail = Describe(what, i, j, got, want, allowed);
    *local_max = std::isnan(err) ? std::numeric_limits<double>::infinity() : std::max(*local_max, err);
    return false;
  }
  *local_max = std::max(*local_max, err);
  return true;
}

}  // namespace

absl::StatusOr<VerifyResult> NormRunner::Impl::CheckElementsOnHost() {
  if (absl::Status s = device->CopyToHost(host_out.data(), out[0].get(), out_bytes()); !s.ok()) {
    return s;
  }
  const int64_t m = problem.m;
  const int64_t n = problem.n;
  const char* what = IsForward(problem) ? "y" : "dx";
  Findings findings;
  ParallelForRanges(m, std::max<int64_t>(1, (int64_t{1} << 16) / n), [&](int, int64_t begin, int64_t end) {
    double local_max = 0;
    int64_t bad = -1;
    std::string detail;
    for (int64_t i = begin; i < end && bad < 0; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const Expected e = ExpectedAt(i, j);
        const double got = Decode(problem.output_dtype, host_out.data(), i * n + j);
        if (!Compare(what, i, j, got, e.want, e.allowed, &local_max, &detail)) {
          bad = i * n + j;
          break;
        }
      }
    }
    findings.Report(bad < 0 ? std::numeric_limits<int64_t>::max() : bad, local_max, detail);
  });
  return findings.Result();
}

absl::StatusOr<VerifyResult> NormRunner::Impl::CheckElementsOnDevice() {
  constexpr uint64_t kNoFailure = ~uint64_t{0};
  const uint64_t start[2] = {0, kNoFailure};
  if (absl::Status s = device->CopyToDevice(verdict.get(), start, sizeof(start)); !s.ok()) return s;
  DevicePtr px = fwd_residual() ? h.get() : x[0].get(), pdy = IsForward(problem) ? 0 : dy[0].get();
  DevicePtr pdres = bwd_residual() ? res[0].get() : 0;
  DevicePtr pw = problem.has_weight ? w.get() : 0;
  DevicePtr pb = IsForward(problem) && HasBias(problem) ? b.get() : 0;
  DevicePtr pout = out[0].get(), prows = check_rows.get(), pverdict = verdict.get();
  int m = static_cast<int>(problem.m), n = static_cast<int>(problem.n);
  const Tolerance tol = ToleranceFor(problem.output_dtype);
  double atol = tol.atol, rtol = tol.rtol, out_scale = VerifyScale(problem);
  void* args[] = {&px, &pdy, &pdres, &pw, &pb, &pout, &prows, &m, &n, &atol, &rtol, &out_scale, &pverdict};
  static_assert(sizeof(args) / sizeof(args[0]) == 13, "norm_check's parameters");
  if (absl::Status s = device->Launch(check_kernel, check_recipe.kernels[0], args); !s.ok()) return s;
  if (absl::Status s = device->Synchronize(); !s.ok()) return s;
  uint64_t result[2];
  if (absl::Status s = device->CopyToHost(result, verdict.get(), sizeof(result)); !s.ok()) return s;
  VerifyResult r;
  std::memcpy(&r.max_error, &result[0], sizeof(double));
  if (result[1] == kNoFailure) {
    r.ok = true;
    return r;
  }
  const uint64_t k = result[1];
  if (k >= static_cast<uint64_t>(problem.m * problem.n)) {
    return absl::InternalError(absl::StrCat("the norm check reported element ", k, " of ", problem.m * problem.n));
  }
  // The failing element, read back and described as the host check would.
  const int64_t i = static_cast<int64_t>(k) / problem.n, j = static_cast<int64_t>(k) % problem.n;
  const int bytes = DTypeBytes(problem.output_dtype);
  uint8_t got_bytes[sizeof(double)] = {};
  if (absl::Status s = device->CopyToHost(got_bytes, pout + k * bytes, bytes); !s.ok()) return s;
  const double got = Decode(problem.output_dtype, got_bytes, 0);
  const Expected e = ExpectedAt(i, j);
  double unused = 0;
  if (Compare(IsForward(problem) ? "y" : "dx", i, j, got, e.want, e.allowed, &unused, &r.detail)) {
    return absl::InternalError(
        absl::StrFormat("the norm check failed element [%d, %d] = %.9g, which is within %.3g of the reference %.9g", i,
                        j, got, e.allowed, e.want));
  }
  r.ok = false;
  return r;
}

VerifyResult NormRunner::Impl::CheckUpdatedResidual() const {
  VerifyResult result;
  result.ok = true;
  if (std::memcmp(host_res_out.data(), host_h.data(), host_h.size()) == 0) return result;
  const int bytes = DTypeBytes(problem.input_dtype);
  for (int64_t k = 0; k < problem.m * problem.n; ++k) {
    if (std::memcmp(host_res_out.data() + k * bytes, host_h.data() + k * bytes, bytes) == 0) continue;
    const double got = Decode(problem.input_dtype, host_res_out.data(), k);
    const double want = Decode(problem.input_dtype, host_h.data(), k);
    result.ok = false;
    result.max_error = std::numeric_limits<double>::infinity();
    result.detail = std::isnan(got) ? absl::StrFormat("residual[%d, %d] is NaN, expected x + residual = %.6g",
                                                      k / problem.n, k % problem.n, want)
                                    : absl::StrFormat("residual[%d, %d] = %.6g, expected x + residual = %.6g",
                                                      k / problem.n, k % problem.n, got, want);
    break;
  }
  return result;
}

VerifyResult NormRunner::Impl::CheckStatistics() const {
  const Tolerance stat_tol = {0, 2e-5};  // fp32 statistics: relative to the row's scale
  double local_max = 0;
  std::string detail;
  for (int64_t i = 0; i < problem.m; ++i) {
    const double r = rstd_ref[i];
    if (!Compare("rstd", i, -1, host_rstd[i], r, stat_tol.rtol * r, &local_max, &detail)) break;
    // The mean is compared on the scale of the row's spread (1 / rstd): a
    // mean near zero has no meaningful relative precision of its own.
    const double mu = mean_ref[i];
    if (IsLayerNorm(problem) &&
        !Compare("mean", i, -1, host_mean[i], mu, stat_tol.rtol * (std::fabs(mu) + 1 / r), &local_max, &detail)) {
      break;
    }
  }
  VerifyResult result;
  result.ok = detail.empty();
  result.detail = detail;
  result.max_error = local_max;
  return result;
}

VerifyResult NormRunner::Impl::CheckWeightGradients() const {
  const int64_t m = problem.m;
  const int64_t n = problem.n;
  const Tolerance wtol = ToleranceFor(problem.weight_dtype);
  // dw and db: sums over all M rows. Allowed: the weight dtype's rounding of
  // the result plus fp32 summation error (kSumTolerancePerRow * M of the
  // terms' root sum of squares): a dropped or doubled row block fails.
  double local_max = 0;
  std::string detail;
  const double sum_tol = kSumTolerancePerRow * static_cast<double>(m);
  for (int64_t j = 0; j < n && detail.empty(); ++j) {
    if (problem.has_weight) {
      const double got = Decode(problem.weight_dtype, host_dw.data(), j);
      const double allowed = wtol.atol * 1e-3 + wtol.rtol * std::fabs(dw_ref[j]) + sum_tol * dw_scale[j];
      if (!Compare("dw", j, -1, got, dw_ref[j], allowed, &local_max, &detail)) break;
    }
    if (HasBias(problem)) {
      const double got = Decode(problem.weight_dtype, host_db.data(), j);
      const double allowed = wtol.atol * 1e-3 + wtol.rtol * std::fabs(db_ref[j]) + sum_tol * db_scale[j];
      if (!Compare("db", j, -1, got, db_ref[j], allowed, &local_max, &detail)) break;
    }
  }
  VerifyResult result;
  result.ok = detail.empty();
  result.detail = detail;
  result.max_error = local_max;
  return result;
}

absl::StatusOr<Timing> NormRunner::Time(const LaunchRecipe& recipe, const MeasureOptions& options) {
  Impl& im = *impl_;
  absl::StatusOr<const LoadedRecipe*> loaded = im.Load(recipe);
  if (!loaded.ok()) return loaded.status();
  // Forward timed without the statistics: MinimumBytes counts x, w (b) and y,
  // as peers' inference forward does; they add 4 bytes per row each when a
  // training caller asks. Backward: every kernel of the recipe back to back,
  // inside one event pair.
  std::vector<std::vector<uint64_t>> addresses;
  for (int s = 0; s < im.rotation; ++s) {
    absl::StatusOr<std::vector<uint64_t>> bound = im.Bindings(recipe, s, /*with_stats=*/false);
    if (!bound.ok()) return bound.status();
    addresses.push_back(*std::move(bound));
  }
  absl::StatusOr<Timing> timing = Measure(
      im.device, [&](int set) { return im.LaunchOn(**loaded, addresses, set); }, im.rotation, options);
  if (absl::Status s = im.device->Synchronize(); !s.ok()) return s;
  (*loaded)->launcher()->Release(*loaded);
  return timing;
}

absl::StatusOr<std::vector<LaunchRecipe>> NormRunner::LibraryCandidates(int) { return std::vector<LaunchRecipe>(); }

absl::StatusOr<std::unique_ptr<ProblemRunner>> NormProblemRunner(const v1::NormProblem& problem, Device* device,
                                                                 uint64_t seed) {
  absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem);
  if (!norm.ok()) return norm.status();
  if (absl::Status s = ValidateNormProblem(*norm); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<NormRunner>> runner = NormRunner::Create(*norm, device, seed);
  if (!runner.ok()) return runner.status();
  return std::unique_ptr<ProblemRunner>(*std::move(runner));
}

}  // namespace ktune
