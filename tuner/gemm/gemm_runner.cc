#include "tuner/gemm/gemm_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "client/launch.h"
#include "spdlog/spdlog.h"
#include "tuner/compile/kernel_instance.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/parallel.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gpu/host_float.h"

namespace ktune {
namespace {

constexpr int kRefTile = 16;  // gemm_reference.cuh's tile and block

std::vector<uint16_t> RandomBf16(size_t count, std::mt19937_64* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> v(count);
  for (uint16_t& x : v) x = FloatToBf16(u(*rng));
  return v;
}

// A or B in the problem's input type, as bytes: bf16, or fp8 e4m3.
std::string RandomInput(bool fp8, size_t count, std::mt19937_64* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::string bytes(count * (fp8 ? 1 : 2), '\0');
  for (size_t i = 0; i < count; ++i) {
    if (fp8) {
      bytes[i] = static_cast<char>(FloatToE4m3(u(*rng)));
    } else {
      const uint16_t b = FloatToBf16(u(*rng));
      std::memcpy(&bytes[2 * i], &b, 2);
    }
  }
  return bytes;
}

// FP8's per-tensor scales (applied to A x B): not 1, so a candidate that
// ignores one fails the check.
constexpr float kFp8ScaleA = 0.5f;
constexpr float kFp8ScaleB = 0.25f;

size_t DBytes(const v1::GemmProblem& p) { return GemmDType(p) == v1::FP32 ? 4 : 2; }

}  // namespace

std::string GemmCandidate::Name() const {
  if (tile.has_value()) return absl::StrCat("mma_sync ", ToString(*tile));
  if (wgmma.has_value()) return absl::StrCat("wgmma ", ToString(*wgmma));
  if (skinny.has_value()) return absl::StrCat("skinny ", ToString(*skinny));
  return absl::StrCat("cublaslt #", cublaslt_rank);
}

double GemmRelativeTolerance(v1::DType d_dtype) { return d_dtype == v1::FP32 ? 1e-3 : 1e-2; }

VerifyResult CompareGemmOutput(const std::vector<float>& got, const std::vector<float>& ref, double ref_rms,
                               double rtol, int64_t m, int64_t n) {
  // Each slice finds its largest scaled error and its first failing element;
  // the slices' results combine in order, so the first failure overall wins.
  struct Slice {
    double max_error = 0;
    int64_t first_bad = -1;
  };
  const int64_t total = static_cast<int64_t>(got.size());
  constexpr int64_t kPerThread = int64_t{1} << 22;  // below this, threads cost more than they save
  std::vector<Slice> slices(RangeSlices(total, kPerThread));
  ParallelForRanges(total, kPerThread, [&](int t, int64_t begin, int64_t end) {
    Slice& out = slices[t];
    for (int64_t i = begin; i < end; ++i) {
      const double want = ref[i];
      const double tol = rtol * (std::abs(want) + ref_rms);
      const double scaled = std::isnan(got[i]) ? INFINITY : std::abs(static_cast<double>(got[i]) - want) / tol;
      out.max_error = std::max(out.max_error, scaled);
      if (scaled > 1.0 && out.first_bad < 0) out.first_bad = i;
    }
  });

  VerifyResult v;
  v.ok = true;
  for (const Slice& slice : slices) {
    v.max_error = std::max(v.max_error, slice.max_error);
    if (slice.first_bad < 0 || !v.ok) continue;
    v.ok = false;
    const int64_t i = slice.first_bad, mn = m * n;
    const double want = ref[i];
    v.detail = std::isnan(got[i])
                   ? absl::StrFormat("d[%d, %d, %d] is NaN (not written: D was poisoned)", i / mn, i % mn / n, i % n)
                   : absl::StrFormat("d[%d, %d, %d] = %g, reference %g (tolerance %g)", i / mn, i % mn / n, i % n,
                                     got[i], want, rtol * (std::abs(want) + ref_rms));
  }
  return v;
}

struct GemmRunner::Impl {
  v1::GemmProblem p;
  Device* device = nullptr;
  CublasLt* cublaslt = nullptr;
  int rotation = 1;
  // Per rotation set (identical contents):
  std::vector<DeviceBuffer> a, b, c, d;
  DeviceBuffer bias, workspace;   // workspace: cuBLASLt's
  DeviceBuffer kernel_workspace;  // the loaded template recipe's (split-K), zeroed at Load
  DeviceBuffer a_scale, b_scale;  // fp8 only
  std::vector<float> ref;         // (batch, M, N) f32, the reference D of set 0
  double ref_rms = 0;

  size_t d_elems() const { return static_cast<size_t>(GemmBatch(p) * p.m() * p.n()); }

  absl::Status ComputeReference();
  // The template candidate as the device's launcher loaded it (the launcher
  // callers use: client/launch.h); null for a cuBLASLt candidate.
  absl::StatusOr<const LoadedRecipe*> Load(const LaunchRecipe& recipe) {
    if (recipe.is_cublaslt_call()) return nullptr;
    if (recipe.kernels.size() != 1) return absl::InvalidArgumentError("a GEMM recipe has one kernel");
    kernel_workspace = DeviceBuffer();
    if (recipe.workspace_bytes > 0) {
      absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Create(device, recipe.workspace_bytes);
      if (!ws.ok()) return ws.status();
      // Zeroed once, as the recipe's contract asks of a caller's workspace;
      // the kernel leaves it so.
      if (absl::Status s = device->Fill(ws->get(), 0, ws->size()); !s.ok()) return s;
      kernel_workspace = *std::move(ws);
    }
    absl::StatusOr<Launcher*> launcher = device->launcher();
    if (!launcher.ok()) return launcher.status();
    return (*launcher)->Load(RecipeToProto(recipe, /*include_cubin=*/true));
  }
  // Unloads a candidate once verified or timed (each is loaded once per
  // call, and a tune loads hundreds). REQUIRES: the device is synchronized.
  void Release(const LoadedRecipe* loaded) {
    if (loaded != nullptr) loaded->launcher()->Release(loaded);
  }
  // Enqueues the recipe on set `set` (through the launcher, or a cuBLASLt call).
  absl::Status Launch(const LaunchRecipe& recipe, const LoadedRecipe* loaded, int set);
};

absl::Status GemmRunner::Impl::ComputeReference() {
  LaunchRecipe r;
  r.template_id = "gemm/gemm_reference";
  absl::StatusOr<const KernelSource*> source = FindKernelSource(r.template_id);
  if (!source.ok()) return source.status();
  r.template_hash = (*source)->hash;
  r.arch = Arch(device->info());
  r.nvrtc_options = {absl::StrCat("--gpu-architecture=", r.arch), "-std=c++17"};
  KernelLaunch k;
  const absl::Status named = KernelInstance("gemm_reference")
                                 .Type("TAB", p.a_dtype() == v1::FP8_E4M3 ? "ktune::e4m3" : "ktune::bf16")
                                 .Type("TD", GemmDType(p) == v1::FP32 ? "float" : "ktune::bf16")
                                 .Bool("B_NK", GemmBIsNK(p))
                                 .Int("EPI", GemmEpilogueCode(p))
                                 .Bool("HAS_C", GemmHasC(p))
                                 .NameInto(&k);
  if (!named.ok()) return named;
  k.grid = {static_cast<uint32_t>((p.n() + kRefTile - 1) / kRefTile),
            static_cast<uint32_t>((p.m() + kRefTile - 1) / kRefTile), static_cast<uint32_t>(GemmBatch(p))};
  k.block = {kRefTile, kRefTile, 1};
  r.kernels.push_back(k);
  const CompileResult compiled = Compile(&r);
  if (!compiled.ok) return absl::InternalError(absl::StrCat("the GEMM reference does not compile: ", compiled.log));
  absl::StatusOr<LoadedKernel> kernel = device->LoadKernel(r.cubin, r.kernels[0].lowered_name);
  if (!kernel.ok()) return kernel.status();
  absl::StatusOr<DeviceBuffer> out = DeviceBuffer::Create(device, d_elems() * sizeof(float));
  if (!out.ok()) return out.status();
  uint64_t pa = a[0].get(), pb = b[0].get(), pc = c.empty() ? 0 : c[0].get(), pd = out->get(), pbias = bias.get();
  int m = static_cast<int>(p.m()), n = static_cast<int>(p.n()), kk = static_cast<int>(p.k());
  float alpha = 1.0f, beta = 1.0f;
  uint64_t pas = a_scale.get(), pbs = b_scale.get();  // 0 for bf16: no scale
  void* args[] = {&pa, &pb, &pc, &pd, &pbias, &m, &n, &kk, &alpha, &beta, &pas, &pbs};
  absl::Status s = device->Launch(*kernel, r.kernels[0], args);
  if (s.ok()) s = device->Synchronize();
  device->UnloadKernel(*kernel);
  if (!s.ok()) return s;
  ref.resize(d_elems());
  if (absl::Status copy = device->CopyToHost(ref.data(), out->get(), ref.size() * sizeof(float)); !copy.ok()) {
    return copy;
  }
  double sum = 0;
  for (float v : ref) sum += static_cast<double>(v) * v;
  ref_rms = std::sqrt(sum / static_cast<double>(std::max<size_t>(ref.size(), 1)));
  return absl::OkStatus();
}

absl::Status GemmRunner::Impl::Launch(const LaunchRecipe& recipe, const LoadedRecipe* loaded, int set) {
  if (!recipe.is_cublaslt_call()) {
    if (loaded == nullptr) return absl::FailedPreconditionError("a template candidate launched before it was loaded");
    // The tensors a caller binds, by the recipe's names; M, N, K, alpha,
    // beta and the TMA descriptors are the recipe's own arguments.
    const std::pair<const char*, DevicePtr> known[] = {{"a", a[set].get()},
                                                       {"b", b[set].get()},
                                                       {"c", c.empty() ? 0 : c[set].get()},
                                                       {"d", d[set].get()},
                                                       {"bias", GemmHasBias(p) ? bias.get() : 0},
                                                       {"ws", kernel_workspace.get()},
                                                       {"a_scale", a_scale.get()},
                                                       {"b_scale", b_scale.get()}};
    uint64_t addresses[std::size(known)];
    if (recipe.tensors.size() > std::size(known)) {
      return absl::InvalidArgumentError("a GEMM recipe with more tensors than the runner binds");
    }
    for (size_t i = 0; i < recipe.tensors.size(); ++i) {
      const std::string& name = recipe.tensors[i].name();
      const auto* it = std::find_if(std::begin(known), std::end(known),
                                    [&](const std::pair<const char*, DevicePtr>& k) { return name == k.first; });
      if (it == std::end(known)) {
        return absl::InvalidArgumentError(absl::StrCat("GEMM recipe tensor '", name, "' is not one the runner binds"));
      }
      addresses[i] = it->second;
    }
    return loaded->launcher()->Launch(*loaded, absl::MakeSpan(addresses, recipe.tensors.size()), device->stream());
  }
  if (cublaslt == nullptr) return absl::FailedPreconditionError("a cuBLASLt candidate without cuBLASLt");
  GemmOperands o;
  o.a = a[set].get();
  o.b = b[set].get();
  o.c = c.empty() ? 0 : c[set].get();
  o.d = d[set].get();
  o.bias = GemmHasBias(p) ? bias.get() : 0;
  o.a_scale = a_scale.get();
  o.b_scale = b_scale.get();
  o.alpha = 1.0f;
  o.beta = 1.0f;
  return cublaslt->Run(p, CublasLtAlgoOf(recipe), o, workspace.get(), workspace.size(), device->stream());
}

GemmRunner::GemmRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GemmRunner::~GemmRunner() = default;

absl::StatusOr<std::unique_ptr<GemmRunner>> GemmRunner::Create(const v1::GemmProblem& p, Device* device,
                                                               CublasLt* cublaslt, uint64_t seed) {
  const bool fp8 = p.a_dtype() == v1::FP8_E4M3;
  auto im = std::make_unique<Impl>();
  im->p = p;
  im->device = device;
  im->cublaslt = cublaslt;
  const int64_t batch = GemmBatch(p);
  const size_t a_elems = static_cast<size_t>(batch * p.m() * p.k());
  const size_t b_elems = static_cast<size_t>(batch * p.n() * p.k());
  const size_t c_elems = GemmHasC(p) ? im->d_elems() : 0;
  const size_t in_bytes = fp8 ? 1 : 2;
  const int64_t per_set = static_cast<int64_t>(in_bytes * (a_elems + b_elems) + DBytes(p) * (c_elems + im->d_elems()));
  im->rotation = RotationCount(device->info(), per_set);

  std::mt19937_64 rng(seed);
  const std::string a = RandomInput(fp8, a_elems, &rng);
  const std::string b = RandomInput(fp8, b_elems, &rng);
  std::vector<uint16_t> c16;
  std::vector<float> c32;
  if (c_elems > 0) {
    c16 = RandomBf16(c_elems, &rng);
    if (DBytes(p) == 4) {
      c32.resize(c_elems);
      for (size_t i = 0; i < c_elems; ++i) c32[i] = Bf16ToFloat(c16[i]);
    }
  }
  const std::vector<uint16_t> bias = RandomBf16(static_cast<size_t>(p.n()), &rng);

  auto upload = [&](const void* host, size_t bytes, DeviceBuffer* out) -> absl::Status {
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(device, std::max<size_t>(bytes, 16));
    if (!buf.ok()) return buf.status();
    if (bytes > 0) {
      if (absl::Status s = device->CopyToDevice(buf->get(), host, bytes); !s.ok()) return s;
    }
    *out = *std::move(buf);
    return absl::OkStatus();
  };
  im->a.resize(im->rotation);
  im->b.resize(im->rotation);
  im->d.resize(im->rotation);
  if (c_elems > 0) im->c.resize(im->rotation);
  for (int s = 0; s < im->rotation; ++s) {
    if (absl::Status st = upload(a.data(), a.size(), &im->a[s]); !st.ok()) return st;
    if (absl::Status st = upload(b.data(), b.size(), &im->b[s]); !st.ok()) return st;
    if (c_elems > 0) {
      const void* host = DBytes(p) == 4 ? static_cast<const void*>(c32.data()) : c16.data();
      if (absl::Status st = upload(host, c_elems * DBytes(p), &im->c[s]); !st.ok()) return st;
    }
    absl::StatusOr<DeviceBuffer> d = DeviceBuffer::Create(device, im->d_elems() * DBytes(p));
    if (!d.ok()) return d.status();
    im->d[s] = *std::move(d);
  }
  if (absl::Status st = upload(bias.data(), bias.size() * 2, &im->bias); !st.ok()) return st;
  if (fp8) {
    if (absl::Status st = upload(&kFp8ScaleA, sizeof(float), &im->a_scale); !st.ok()) return st;
    if (absl::Status st = upload(&kFp8ScaleB, sizeof(float), &im->b_scale); !st.ok()) return st;
  }
  if (cublaslt != nullptr) {
    absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Create(device, kCublasLtWorkspaceBytes);
    if (!ws.ok()) return ws.status();
    im->workspace = *std::move(ws);
  }
  if (absl::Status st = im->ComputeReference(); !st.ok()) return st;
  return std::unique_ptr<GemmRunner>(new GemmRunner(std::move(im)));
}

absl::StatusOr<VerifyResult> GemmRunner::Verify(const LaunchRecipe& recipe) {
  Impl& im = *impl_;
  absl::StatusOr<const LoadedRecipe*> loaded = im.Load(recipe);
  if (!loaded.ok()) return loaded.status();
  absl::Status s = im.device->Fill(im.d[0].get(), 0xFF, im.d[0].size());  // NaN in bf16 and fp32
  if (s.ok()) s = im.Launch(recipe, *loaded, 0);
  if (s.ok()) s = im.device->Synchronize();
  im.Release(*loaded);
  if (!s.ok()) return s;

  std::vector<float> got(im.d_elems());
  if (DBytes(im.p) == 4) {
    s = im.device->CopyToHost(got.data(), im.d[0].get(), got.size() * 4);
  } else {
    std::vector<uint16_t> raw(got.size());
    s = im.device->CopyToHost(raw.data(), im.d[0].get(), raw.size() * 2);
    for (size_t i = 0; i < raw.size(); ++i) got[i] = Bf16ToFloat(raw[i]);
  }
  if (!s.ok()) return s;
  return CompareGemmOutput(got, im.ref, im.ref_rms, GemmRelativeTolerance(GemmDType(im.p)), im.p.m(), im.p.n());
}

absl::StatusOr<Timing> GemmRunner::Time(const LaunchRecipe& recipe, const MeasureOptions& options) {
  Impl& im = *impl_;
  absl::StatusOr<const LoadedRecipe*> loaded = im.Load(recipe);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<Timing> t = Measure(
      im.device, [&](int set) { return im.Launch(recipe, *loaded, set); }, im.rotation, options);
  if (absl::Status s = im.device->Synchronize(); !s.ok()) return s;  // a fault leaves the context unusable
  im.Release(*loaded);
  return t;
}

absl::StatusOr<std::vector<LaunchRecipe>> GemmRunner::LibraryCandidates(int max) {
  Impl& im = *impl_;
  std::vector<LaunchRecipe> out;
  if (im.cublaslt == nullptr || !CublasLtCanServe(im.p).ok()) return out;
  absl::Status variants;
  absl::StatusOr<std::vector<CublasLtAlgo>> algos =
      im.cublaslt->Candidates(im.p, max, im.device->info().cc_major >= 9, &variants);
  if (!algos.ok()) return algos.status();
  if (!variants.ok()) {
    spdlog::warn("event=cublaslt_variants_failed reason=\"{}\"", std::string(variants.message()));
  }
  for (const CublasLtAlgo& a : *algos) {
    out.push_back(CublasLtRecipe(a, im.cublaslt->version()));
    out.back().arch = Arch(im.device->info());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ProblemRunner>> GemmProblemRunner(const v1::GemmProblem& problem, Device* device,
                                                                 CublasLt* cublaslt, uint64_t seed) {
  if (absl::Status s = ValidateGemmProblem(problem); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<GemmRunner>> runner = GemmRunner::Create(problem, device, cublaslt, seed);
  if (!runner.ok()) return runner.status();
  return std::unique_ptr<ProblemRunner>(*std::move(runner));
}

}  // namespace ktune
