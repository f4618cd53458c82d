#include "tuner/norm_runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

uint16_t FloatToBf16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
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
    return mant != 0 ? std::numeric_limits<double>::quiet_NaN()
                     : sign * std::numeric_limits<double>::infinity();
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
      break;
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

// Uniform in [0, 1) from (seed, stream, index): the same values whatever the
// number of threads that generate them.
double Uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t r = SplitMix64(SplitMix64(seed * 0x100000001b3ull + stream) ^ index);
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

// A magnitude in [lo, hi) with a random sign: never zero.
float SignedMagnitude(double u, double lo, double hi) {
  const double m = lo + (hi - lo) * std::fmod(2.0 * u, 1.0);
  return static_cast<float>(u < 0.5 ? -m : m);
}

// Runs fn(begin, end) over [0, count) split across the machine's cores.
void ParallelFor(int64_t count, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::clamp<int64_t>(count / std::max<int64_t>(min_per_thread, 1), 1, cores);
  if (threads == 1) {
    fn(0, count);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (count + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * per;
    const int64_t end = std::min(count, begin + per);
    if (begin >= end) break;
    pool.emplace_back(fn, begin, end);
  }
  for (std::thread& t : pool) t.join();
}

constexpr uint64_t kStreamX = 1;
constexpr uint64_t kStreamW = 2;
constexpr uint64_t kStreamRowScale = 3;

}  // namespace

// ---- reference and tolerances -------------------------------------------------

void RmsNormForwardReference(const std::vector<double>& x, const std::vector<double>* w,
                             int64_t m, int64_t n, double eps, std::vector<double>* y,
                             std::vector<double>* rstd) {
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

Tolerance ToleranceFor(DType output_dtype) {
  switch (output_dtype) {
    case DType::kBF16:
      return {1e-3, 0x1.0p-7};  // 2 ulp of an 8-bit significand
    case DType::kFP16:
      return {1e-4, 0x1.0p-9};  // 2 ulp of an 11-bit significand
    case DType::kFP32:
      return {1e-6, 1e-5};  // fp32 accumulation over up to 2^18 elements
    case DType::kFP8E4M3:
      return {1e-2, 0x1.0p-2};
  }
  return {0, 0};
}

// ---- NormRunner ------------------------------------------------------------------

struct NormRunner::Impl {
  NormProblem problem;
  Device* device = nullptr;
  int rotation = 1;
  std::vector<DeviceBuffer> x;     // rotation sets of (M, N) inputs, identical contents
  std::vector<DeviceBuffer> y;     // rotation sets of (M, N) outputs
  std::vector<DeviceBuffer> rstd;  // rotation sets of (M) f32
  DeviceBuffer w;                  // (N), shared by every set
  std::vector<uint8_t> host_x;     // (M, N) raw input dtype
  std::vector<uint8_t> host_w;     // (N) raw input dtype
  std::vector<double> rstd_ref;    // (M) float64 reference rstd
  std::vector<uint8_t> host_y;     // (M, N) raw output dtype, read back
  std::vector<float> host_rstd;    // (M), read back

  int64_t x_bytes() const { return problem.m * problem.n * DTypeBytes(problem.input_dtype); }
  int64_t y_bytes() const { return problem.m * problem.n * DTypeBytes(problem.output_dtype); }

  // The kernel arguments for input set `set` in the order of `k.params`.
  struct Args {
    DevicePtr x = 0, w = 0, y = 0, rstd = 0;
    int m = 0, n = 0;
    float eps = 0;
    std::vector<void*> pointers;
  };
  absl::Status BuildArgs(const KernelLaunch& k, int set, bool with_rstd, Args* a) {
    a->x = x[set].get();
    a->w = problem.has_weight ? w.get() : 0;
    a->y = y[set].get();
    a->rstd = with_rstd ? rstd[set].get() : 0;
    a->m = static_cast<int>(problem.m);
    a->n = static_cast<int>(problem.n);
    a->eps = problem.eps;
    a->pointers.clear();
    for (const std::string& p : k.params) {
      if (p == "x") {
        a->pointers.push_back(&a->x);
      } else if (p == "w") {
        a->pointers.push_back(&a->w);
      } else if (p == "y") {
        a->pointers.push_back(&a->y);
      } else if (p == "rstd") {
        a->pointers.push_back(&a->rstd);
      } else if (p == "M") {
        a->pointers.push_back(&a->m);
      } else if (p == "N") {
        a->pointers.push_back(&a->n);
      } else if (p == "eps") {
        a->pointers.push_back(&a->eps);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("recipe kernel parameter \"", p, "\" is unknown to the norm runner"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<VerifyResult> Check() const;
};

NormRunner::NormRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NormRunner::~NormRunner() = default;

absl::StatusOr<std::unique_ptr<NormRunner>> NormRunner::Create(const NormProblem& problem,
                                                               Device* device, uint64_t seed) {
  if (absl::Status s = ValidateNormProblem(problem); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->problem = problem;
  impl->device = device;
  const int64_t m = problem.m;
  const int64_t n = problem.n;
  const int in_bytes = DTypeBytes(problem.input_dtype);

  // Inputs: each row scaled by 2^[-2, 2) so rows have clearly different rstd
  // (a kernel mixing up rows fails), elements of magnitude [0.05, 2) * scale
  // with random signs (never zero), weights of magnitude [0.5, 1.5) with random
  // signs (a kernel skipping or misplacing the weight fails).
  impl->host_x.resize(impl->x_bytes());
  impl->host_w.resize(n * in_bytes);
  impl->rstd_ref.resize(m);
  ParallelFor(m, std::max<int64_t>(1, (int64_t{1} << 16) / n), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double scale = std::exp2(4.0 * Uniform(seed, kStreamRowScale, i) - 2.0);
      double ss = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const float v = static_cast<float>(
            scale * SignedMagnitude(Uniform(seed, kStreamX, i * n + j), 0.05, 2.0));
        Encode(problem.input_dtype, v, impl->host_x.data(), i * n + j);
        const double xr = Decode(problem.input_dtype, impl->host_x.data(), i * n + j);
        ss += xr * xr;
      }
      impl->rstd_ref[i] = 1.0 / std::sqrt(ss / static_cast<double>(n) + problem.eps);
    }
  });
  for (int64_t j = 0; j < n; ++j) {
    Encode(problem.input_dtype, SignedMagnitude(Uniform(seed, kStreamW, j), 0.5, 1.5),
           impl->host_w.data(), j);
  }

  // Device buffers: enough sets that one sweep moves >= 3x L2.
  impl->rotation = RotationCount(device->info(), impl->x_bytes() + impl->y_bytes());
  for (int s = 0; s < impl->rotation; ++s) {
    absl::StatusOr<DeviceBuffer> xb = DeviceBuffer::Create(device, impl->x_bytes());
    if (!xb.ok()) return xb.status();
    absl::StatusOr<DeviceBuffer> yb = DeviceBuffer::Create(device, impl->y_bytes());
    if (!yb.ok()) return yb.status();
    absl::StatusOr<DeviceBuffer> rb = DeviceBuffer::Create(device, m * sizeof(float));
    if (!rb.ok()) return rb.status();
    if (absl::Status st = device->CopyToDevice(xb->get(), impl->host_x.data(), impl->x_bytes());
        !st.ok()) {
      return st;
    }
    impl->x.push_back(*std::move(xb));
    impl->y.push_back(*std::move(yb));
    impl->rstd.push_back(*std::move(rb));
  }
  absl::StatusOr<DeviceBuffer> wb = DeviceBuffer::Create(device, n * in_bytes);
  if (!wb.ok()) return wb.status();
  impl->w = *std::move(wb);
  if (absl::Status st = device->CopyToDevice(impl->w.get(), impl->host_w.data(), n * in_bytes);
      !st.ok()) {
    return st;
  }
  impl->host_y.resize(impl->y_bytes());
  impl->host_rstd.resize(m);
  return std::unique_ptr<NormRunner>(new NormRunner(std::move(impl)));
}

absl::StatusOr<VerifyResult> NormRunner::Verify(const LaunchRecipe& recipe) {
  Impl& im = *impl_;
  if (recipe.kernels.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "norm forward recipes have exactly one kernel, got ", recipe.kernels.size()));
  }
  const KernelLaunch& k = recipe.kernels[0];
  absl::StatusOr<LoadedKernel> kernel = im.device->LoadKernel(recipe.cubin, k.lowered_name);
  if (!kernel.ok()) return kernel.status();
  struct Unload {
    Device* d;
    LoadedKernel k;
    ~Unload() { d->UnloadKernel(k); }
  } unload{im.device, *kernel};

  // Poison every output byte: 0xFF is NaN in every float format, so an
  // element the kernel never wrote cannot pass.
  if (absl::Status s = im.device->Fill(im.y[0].get(), 0xFF, im.y_bytes()); !s.ok()) return s;
  if (absl::Status s = im.device->Fill(im.rstd[0].get(), 0xFF, im.problem.m * sizeof(float));
      !s.ok()) {
    return s;
  }
  Impl::Args args;
  if (absl::Status s = im.BuildArgs(k, 0, /*with_rstd=*/true, &args); !s.ok()) return s;
  if (absl::Status s = im.device->Launch(*kernel, k, args.pointers.data()); !s.ok()) return s;
  if (absl::Status s = im.device->Synchronize(); !s.ok()) return s;
  if (absl::Status s = im.device->CopyToHost(im.host_y.data(), im.y[0].get(), im.y_bytes());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = im.device->CopyToHost(im.host_rstd.data(), im.rstd[0].get(),
                                             im.problem.m * sizeof(float));
      !s.ok()) {
    return s;
  }
  return im.Check();
}

absl::StatusOr<VerifyResult> NormRunner::Impl::Check() const {
  const int64_t m = problem.m;
  const int64_t n = problem.n;
  const Tolerance tol = ToleranceFor(problem.output_dtype);
  const Tolerance rstd_tol = ToleranceFor(DType::kFP32);
  std::vector<double> w_ref(n, 1.0);
  if (problem.has_weight) {
    for (int64_t j = 0; j < n; ++j) w_ref[j] = Decode(problem.input_dtype, host_w.data(), j);
  }

  std::mutex mu;  // guards the fields below
  double max_error = 0;
  int64_t first_bad = std::numeric_limits<int64_t>::max();  // row-major index; m*n+i for rstd[i]
  std::string first_detail;
  auto report = [&](int64_t index, double err, const std::string& detail) {
    std::lock_guard<std::mutex> lock(mu);
    max_error = std::max(max_error, err);
    if (!detail.empty() && index < first_bad) {
      first_bad = index;
      first_detail = detail;
    }
  };
  auto describe = [&](const char* what, int64_t i, int64_t j, double got, double want,
                      double allowed) {
    std::string where = j >= 0 ? absl::StrFormat("%s[%d, %d]", what, i, j)
                               : absl::StrFormat("%s[%d]", what, i);
    if (std::isnan(got)) {
      return absl::StrFormat("%s is NaN (not written: outputs were poisoned with 0xFF), "
                             "expected %.6g", where, want);
    }
    return absl::StrFormat("%s = %.6g, expected %.6g (|error| %.3g > allowed %.3g)", where, got,
                           want, std::fabs(got - want), allowed);
  };

  ParallelFor(m, std::max<int64_t>(1, (int64_t{1} << 16) / n), [&](int64_t begin, int64_t end) {
    double local_max = 0;
    int64_t local_bad = -1;
    std::string local_detail;
    for (int64_t i = begin; i < end && local_bad < 0; ++i) {
      const double r = rstd_ref[i];
      for (int64_t j = 0; j < n; ++j) {
        const double want = Decode(problem.input_dtype, host_x.data(), i * n + j) * r * w_ref[j];
        const double got = Decode(problem.output_dtype, host_y.data(), i * n + j);
        const double allowed = tol.atol + tol.rtol * std::fabs(want);
        const double err = std::fabs(got - want) / allowed;
        if (!(err <= 1.0)) {  // NaN fails too
          local_bad = i * n + j;
          local_detail = describe("y", i, j, got, want, allowed);
          local_max = std::isnan(err) ? std::numeric_limits<double>::infinity()
                                      : std::max(local_max, err);
          break;
        }
        local_max = std::max(local_max, err);
      }
      if (local_bad >= 0) break;
      const double got_r = host_rstd[i];
      const double allowed_r = rstd_tol.atol + rstd_tol.rtol * std::fabs(r);
      const double err_r = std::fabs(got_r - r) / allowed_r;
      if (!(err_r <= 1.0)) {
        local_bad = m * n + i;
        local_detail = describe("rstd", i, -1, got_r, r, allowed_r);
        local_max = std::isnan(err_r) ? std::numeric_limits<double>::infinity()
                                      : std::max(local_max, err_r);
        break;
      }
      local_max = std::max(local_max, err_r);
    }
    report(local_bad < 0 ? std::numeric_limits<int64_t>::max() : local_bad, local_max,
           local_detail);
  });

  VerifyResult result;
  result.max_error = max_error;
  result.ok = first_detail.empty();
  result.detail = first_detail;
  return result;
}

absl::StatusOr<Timing> NormRunner::Time(const LaunchRecipe& recipe,
                                        const MeasureOptions& options) {
  Impl& im = *impl_;
  if (recipe.kernels.size() != 1) {
    return absl::InvalidArgumentError("norm forward recipes have exactly one kernel");
  }
  const KernelLaunch& k = recipe.kernels[0];
  absl::StatusOr<LoadedKernel> kernel = im.device->LoadKernel(recipe.cubin, k.lowered_name);
  if (!kernel.ok()) return kernel.status();
  struct Unload {
    Device* d;
    LoadedKernel k;
    ~Unload() { d->UnloadKernel(k); }
  } unload{im.device, *kernel};

  // Timed without rstd: MinimumBytes counts x, w and y, as peers' inference
  // forward does; rstd adds 4 bytes per row when a training caller asks.
  std::vector<Impl::Args> args(im.rotation);
  for (int s = 0; s < im.rotation; ++s) {
    if (absl::Status st = im.BuildArgs(k, s, /*with_rstd=*/false, &args[s]); !st.ok()) return st;
  }
  absl::StatusOr<Timing> timing = Measure(
      im.device,
      [&](int set) { return im.device->Launch(*kernel, k, args[set].pointers.data()); },
      im.rotation, options);
  if (!timing.ok()) return timing.status();
  if (absl::Status s = im.device->Synchronize(); !s.ok()) return s;
  return timing;
}

}  // namespace ktune
