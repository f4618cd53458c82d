// GEMM candidates on a real GPU: every pruned mma.sync, wgmma and skinny candidate and every
// algorithm cuBLASLt's heuristic returns compute D = epilogue(alpha A x B +
// beta C) within bf16 tolerance of a float64 host reference, on small and odd
// problems; cuBLASLt's algorithms are re-created from their 64 bytes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_env.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_tuner.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/gpu/host_float.h"
#include "tuner/problem_runners.h"
#include "tuner/run/executor.h"

namespace ktune {
namespace {

// Host data, device copies and the float64 reference of one problem.
struct GemmCase {
  v1::GemmProblem p;
  std::vector<uint16_t> a, b, c, bias;  // bf16 bits (C: D's type bf16 here)
  std::vector<double> ref;              // [batch, M, N]
  DeviceBuffer da, db, dc, dd, dbias;
  float alpha = 1.0f, beta = 0.0f;

  int64_t batch() const { return p.batch() == 0 ? 1 : p.batch(); }
  size_t d_elems() const { return static_cast<size_t>(batch() * p.m() * p.n()); }

  static GemmCase Make(Device* device, int64_t m, int64_t n, int64_t k, v1::Layout b_layout, v1::Epilogue epilogue,
                       bool with_c, int64_t batch) {
    GemmCase g;
    g.p = TestGemm(m, n, k, b_layout, epilogue, with_c ? v1::BF16 : v1::DTYPE_UNSPECIFIED, v1::BF16, batch);
    g.alpha = 0.75f;
    g.beta = with_c ? 0.5f : 0.0f;
    std::mt19937 rng(static_cast<uint32_t>(m * 131 + n * 7 + k));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](std::vector<uint16_t>* v, size_t count) {
      v->resize(count);
      for (uint16_t& x : *v) x = FloatToBf16(u(rng));
    };
    fill(&g.a, batch * m * k);
    fill(&g.b, batch * n * k);
    fill(&g.c, with_c ? batch * m * n : 0);
    fill(&g.bias, epilogue == v1::EPILOGUE_NONE || epilogue == v1::EPILOGUE_RESIDUAL_ADD ? 0 : n);
    g.ref.assign(g.d_elems(), 0.0);
    const bool b_nk = b_layout == v1::COL_MAJOR;
    for (int64_t z = 0; z < batch; ++z) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t q = 0; q < k; ++q) {
            const double bv = b_nk ? Bf16ToFloat(g.b[(z * n + j) * k + q]) : Bf16ToFloat(g.b[(z * k + q) * n + j]);
            s += Bf16ToFloat(g.a[(z * m + i) * k + q]) * bv;
          }
          double v = g.alpha * s;
          if (with_c) v += g.beta * Bf16ToFloat(g.c[(z * m + i) * n + j]);
          if (!g.bias.empty()) v += Bf16ToFloat(g.bias[j]);
          if (epilogue == v1::EPILOGUE_BIAS_GELU) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
          if (epilogue == v1::EPILOGUE_BIAS_SILU) v = v / (1.0 + std::exp(-v));
          g.ref[(z * m + i) * n + j] = v;
        }
      }
    }
    auto upload = [&](const std::vector<uint16_t>& host, DeviceBuffer* out) {
      absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(device, std::max<size_t>(host.size() * 2, 16));
      REQUIRE(buf.ok());
      if (!host.empty()) REQUIRE(device->CopyToDevice(buf->get(), host.data(), host.size() * 2).ok());
      *out = *std::move(buf);
    };
    upload(g.a, &g.da);
    upload(g.b, &g.db);
    upload(g.c, &g.dc);
    upload(g.bias, &g.dbias);
    upload(std::vector<uint16_t>(g.d_elems()), &g.dd);
    return g;
  }

  // Poisons D (0xFFFF is a bf16 NaN) so an unwritten output fails.
  void Poison(Device* device) { REQUIRE(device->Fill(dd.get(), 0xFF, d_elems() * 2).ok()); }

  // D's bits as the last launch left them.
  std::vector<uint16_t> Output(Device* device) {
    std::vector<uint16_t> d(d_elems());
    REQUIRE(device->CopyToHost(d.data(), dd.get(), d.size() * 2).ok());
    return d;
  }

  // Relative Frobenius error of D against the reference (NaN: unwritten).
  double Error(Device* device) {
    std::vector<uint16_t> d(d_elems());
    REQUIRE(device->CopyToHost(d.data(), dd.get(), d.size() * 2).ok());
    double num = 0, den = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      const double diff = Bf16ToFloat(d[i]) - ref[i];
      num += diff * diff;
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
};

std::vector<GemmCase> Cases(Device* device) {
  std::vector<GemmCase> cases;
  cases.push_back(GemmCase::Make(device, 256, 384, 512, v1::COL_MAJOR, v1::EPILOGUE_NONE, false, 1));
  cases.push_back(GemmCase::Make(device, 1, 520, 264, v1::COL_MAJOR, v1::EPILOGUE_BIAS, false, 1));
  cases.push_back(GemmCase::Make(device, 7, 257, 136, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU, false, 2));
  cases.push_back(GemmCase::Make(device, 127, 264, 1000, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 1));
  cases.push_back(GemmCase::Make(device, 129, 136, 72, v1::ROW_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, true, 3));
  return cases;
}

constexpr double kTolerance = 1e-2;  // bf16 D: about 4e-3 from rounding alone

// Compiles `r`, runs it on g's inputs (parameters a, b, c, d, bias, M, N, K,
// alpha, beta, and ws, a_scale, b_scale (null: bf16) where the recipe names
// them, in its order) over a poisoned D and returns
// the largest error against the reference. A split-K recipe's workspace is
// zeroed once, as its contract says, and the kernel runs twice, so what the
// first launch leaves in it (the counters) is tested too.
double RunPlainRecipe(Device* device, GemmCase& g, LaunchRecipe r) {
  const CompileResult compiled = Compile(&r);
  INFO(compiled.log);
  REQUIRE(compiled.ok);
  absl::StatusOr<LoadedKernel> k = device->LoadKernel(r.cubin, r.kernels[0].lowered_name);
  REQUIRE(k.ok());
  absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Create(device, std::max<uint64_t>(r.workspace_bytes, 16));
  REQUIRE(ws.ok());
  REQUIRE(device->Fill(ws->get(), 0, ws->size()).ok());
  uint64_t a = g.da.get(), b = g.db.get(), cc = g.p.c_dtype() ? g.dc.get() : 0, d = g.dd.get();
  uint64_t bias = g.bias.empty() ? 0 : g.dbias.get();
  uint64_t pws = r.workspace_bytes > 0 ? ws->get() : 0;
  int m = static_cast<int>(g.p.m()), n = static_cast<int>(g.p.n()), kk = static_cast<int>(g.p.k());
  uint64_t no_scale = 0;
  const std::map<std::string, void*> values = {{"a", &a},
                                               {"b", &b},
                                               {"c", &cc},
                                               {"d", &d},
                                               {"bias", &bias},
                                               {"M", &m},
                                               {"N", &n},
                                               {"K", &kk},
                                               {"alpha", &g.alpha},
                                               {"beta", &g.beta},
                                               {"ws", &pws},
                                               {"a_scale", &no_scale},
                                               {"b_scale", &no_scale}};
  std::vector<void*> args;
  for (const std::string& param : r.kernels[0].params) {
    INFO(param);
    REQUIRE(values.count(param) == 1);
    args.push_back(values.at(param));
  }
  CHECK(r.workspace_zeroed == (r.workspace_bytes > 0));
  double worst = 0;
  for (int launch = 0; launch < (r.workspace_bytes > 0 ? 2 : 1); ++launch) {
    g.Poison(device);
    REQUIRE(device->Launch(*k, r.kernels[0], args.data()).ok());
    REQUIRE(device->Synchronize().ok());
    worst = std::max(worst, g.Error(device));
  }
  device->UnloadKernel(*k);
  return worst;
}

TEST_CASE("every pruned mma.sync GEMM candidate matches a float64 reference", "[gpu][gemm]") {
  Device* device = testing::GpuDevice();
  int split = 0;
  for (GemmCase& g : Cases(device)) {
    for (const GemmTileConfig& c : GemmSearchSpace(g.p, device->info())) {
      INFO(GemmCanonicalKey(g.p) << " " << ToString(c));
      absl::StatusOr<LaunchRecipe> r = GemmLaunchRecipe(g.p, c, device->info());
      REQUIRE(r.ok());
      CHECK(RunPlainRecipe(device, g, *r) < kTolerance);
      split += c.split_k > 1;
    }
  }
  CHECK(split > 0);  // the small cases leave SMs idle: split-K is among them
}

TEST_CASE("every split of the mma.sync template matches a float64 reference, K tail and batch included",
          "[gpu][gemm]") {
  Device* device = testing::GpuDevice();
  std::vector<GemmCase> cases;
  // K of 1000 is 31.25 steps of 32 (a tail in the last split), B both ways,
  // C and a batch; 16 rows as in decoding.
  cases.push_back(GemmCase::Make(device, 127, 264, 1000, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 1));
  cases.push_back(GemmCase::Make(device, 16, 512, 1000, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU, false, 3));
  for (GemmCase& g : cases) {
    for (int split_k : {2, 4, 8, 16}) {
      for (GemmTileConfig c : {GemmTileConfig{}, GemmTileConfig{64, 64, 64, 2, 2, 3, 8, 1}}) {
        c.split_k = split_k;
        INFO(GemmCanonicalKey(g.p) << " " << ToString(c));
        absl::StatusOr<LaunchRecipe> r = GemmLaunchRecipe(g.p, c, device->info());
        REQUIRE(r.ok());
        CHECK(RunPlainRecipe(device, g, *r) < kTolerance);
      }
    }
  }
}

TEST_CASE("every skinny GEMM candidate matches a float64 reference", "[gpu][gemm][skinny]") {
  Device* device = testing::GpuDevice();
  std::vector<GemmCase> cases;
  // M of 1, 7 and 16 (both MMA widths); N with a tail of 16-column blocks; K
  // not a multiple of the 32-wide chunks; every epilogue, C, a batch.
  cases.push_back(GemmCase::Make(device, 1, 520, 264, v1::COL_MAJOR, v1::EPILOGUE_BIAS, false, 1));
  cases.push_back(GemmCase::Make(device, 7, 257, 136, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU, false, 2));
  cases.push_back(GemmCase::Make(device, 16, 4096, 1000, v1::COL_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 1));
  cases.push_back(GemmCase::Make(device, 9, 136, 4104, v1::COL_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, true, 3));
  cases.push_back(GemmCase::Make(device, 16, 1024, 2048, v1::COL_MAJOR, v1::EPILOGUE_NONE, false, 1));
  int tested = 0;
  for (GemmCase& g : cases) {
    for (const SkinnyConfig& c : SkinnySearchSpace(g.p, device->info())) {
      INFO(GemmCanonicalKey(g.p) << " skinny " << ToString(c));
      absl::StatusOr<LaunchRecipe> r = SkinnyLaunchRecipe(g.p, c, device->info());
      REQUIRE(r.ok());
      CHECK(RunPlainRecipe(device, g, *r) < kTolerance);
      ++tested;
    }
  }
  CHECK(tested == 45);  // nine configs (six plain, three pipelined) per case
}

// Verifies each of `space`'s configs of the wgmma template on g against the
// float64 reference.
void VerifyWgmmaConfigs(Device* device, GemmCase& g, const std::vector<WgmmaTileConfig>& space) {
  std::vector<LaunchRecipe> recipes;
  for (const WgmmaTileConfig& c : space) {
    absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(g.p, c, device->info());
    REQUIRE(r.ok());
    recipes.push_back(*std::move(r));
  }
  const std::vector<CompileResult> compiled = CompileAll(&recipes);
  for (size_t i = 0; i < space.size(); ++i) {
    const WgmmaTileConfig& c = space[i];
    const LaunchRecipe* r = &recipes[i];
    INFO(GemmCanonicalKey(g.p) << " wgmma " << ToString(c));
    INFO(compiled[i].log);
    REQUIRE(compiled[i].ok);
    absl::StatusOr<LoadedKernel> k = device->LoadKernel(r->cubin, r->kernels[0].lowered_name);
    REQUIRE(k.ok());
    // The tensors and boxes the recipe names (a cluster's CTA fetches half of B's tile).
    absl::StatusOr<TmaTensor> ta = GemmTmaTensor(g.p, r->kernels[0].params[0], g.da.get(), g.db.get());
    absl::StatusOr<TmaTensor> tb = GemmTmaTensor(g.p, r->kernels[0].params[1], g.da.get(), g.db.get());
    REQUIRE(ta.ok());
    REQUIRE(tb.ok());
    absl::StatusOr<TmaDescriptorBytes> tma_a = device->EncodeTma(*ta), tma_b = device->EncodeTma(*tb);
    REQUIRE(tma_a.ok());
    REQUIRE(tma_b.ok());
    uint64_t cc = g.p.c_dtype() ? g.dc.get() : 0, d = g.dd.get();
    uint64_t bias = g.bias.empty() ? 0 : g.dbias.get();
    int m = static_cast<int>(g.p.m()), n = static_cast<int>(g.p.n()), kk = static_cast<int>(g.p.k());
    // Swapped tiles compute D^T: the recipe names their sizes (N, M), not (M, N).
    CHECK(r->kernels[0].params[5] == (c.swap_ab ? "N" : "M"));
    if (c.swap_ab) std::swap(m, n);
    // A split-K (or tail split) recipe's workspace, zeroed once as its
    // contract says; it runs twice, so what the first launch leaves in it
    // (the counters) is tested too.
    const bool split = r->workspace_bytes > 0;
    CHECK(split == (c.split_k > 1 || c.tail_split > 1));
    CHECK(r->workspace_zeroed == split);
    absl::StatusOr<DeviceBuffer> ws = DeviceBuffer::Create(device, std::max<uint64_t>(r->workspace_bytes, 16));
    REQUIRE(ws.ok());
    REQUIRE(device->Fill(ws->get(), 0, ws->size()).ok());
    uint64_t pws = r->workspace_bytes > 0 ? ws->get() : 0;
    uint64_t no_scale = 0;  // bf16: no per-tensor scales
    void* args[] = {&*tma_a, &*tma_b, &cc, &d, &bias, &m, &n, &kk, &g.alpha, &g.beta, &pws, &no_scale, &no_scale};
    std::vector<uint16_t> first;  // split-K: D of the first launch
    for (int launch = 0; launch < (split ? 2 : 1); ++launch) {
      INFO("launch " << launch);
      g.Poison(device);
      REQUIRE(device->Launch(*k, r->kernels[0], args).ok());
      REQUIRE(device->Synchronize().ok());
      CHECK(g.Error(device) < kTolerance);
      // Summed in split order whichever split finished last: the same bits.
      if (launch == 0) first = g.Output(device);
      if (launch == 1) CHECK(g.Output(device) == first);
    }
    device->UnloadKernel(*k);
  }
}

// Verifies every config of g's wgmma space (pruned: the model's pick; else
// all of it; swapped_only: its swapped tiles alone) against the float64
// reference; returns how many ran.
int VerifyWgmmaSpace(Device* device, GemmCase& g, bool pruned, bool swapped_only = false) {
  GemmSpaceOptions options;
  options.pruned = pruned;
  std::vector<WgmmaTileConfig> space = WgmmaSearchSpace(g.p, device->info(), options);
  if (swapped_only) {
    space.erase(std::remove_if(space.begin(), space.end(), [](const WgmmaTileConfig& c) { return !c.swap_ab; }),
                space.end());
  }
  VerifyWgmmaConfigs(device, g, space);
  return static_cast<int>(space.size());
}

TEST_CASE("every wgmma GEMM config with B as [N, K] matches a float64 reference", "[gpu][gemm][wgmma]") {
  Device* device = testing::GpuDevice();
  std::vector<GemmCase> cases;
  for (GemmCase& g : Cases(device)) {
    if (g.p.b_layout() == v1::COL_MAJOR) cases.push_back(std::move(g));
  }
  // K tails, a C and SiLU; more tiles than SMs (each CTA takes several, the
  // producer running ahead into the next tile); a batch with fp32-sized tails.
  cases.push_back(GemmCase::Make(device, 127, 264, 1000, v1::COL_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 1));
  cases.push_back(GemmCase::Make(device, 2304, 2304, 136, v1::COL_MAJOR, v1::EPILOGUE_NONE, false, 1));
  cases.push_back(GemmCase::Make(device, 300, 130, 200, v1::COL_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, true, 3));
  int tested = 0;
  for (GemmCase& g : cases) tested += VerifyWgmmaSpace(device, g, /*pruned=*/false);
  CHECK(tested >= 20);
}

// The swapped tiles (D^T = B x A^T, problems of at most 32 rows), every
// config: one row with an N tail and a bias (wgmma N = 8), seven rows in a
// batch of two with GELU, 16 rows with C and an N tail (N = 16), 20 rows
// with C, SiLU, a K tail and a batch (N = 32).
TEST_CASE("every swapped wgmma config matches a float64 reference", "[gpu][gemm][wgmma][swap]") {
  Device* device = testing::GpuDevice();
  std::vector<GemmCase> cases;
  cases.push_back(GemmCase::Make(device, 1, 520, 264, v1::COL_MAJOR, v1::EPILOGUE_BIAS, false, 1));
  cases.push_back(GemmCase::Make(device, 7, 257, 136, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU, false, 2));
  cases.push_back(GemmCase::Make(device, 16, 1000, 1040, v1::COL_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, true, 1));
  cases.push_back(GemmCase::Make(device, 20, 264, 4104, v1::COL_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 2));
  int tested = 0;
  for (GemmCase& g : cases) {
    const int here = VerifyWgmmaSpace(device, g, /*pruned=*/false, /*swapped_only=*/true);
    CHECK(here >= 12);  // split-K only where K's steps divide (not at K = 4104)
    tested += here;
  }
  std::printf("swapped wgmma configs verified: %d\n", tested);
}

// The tail split: whole waves of tiles, then the tiles left over split
// along K across every SM, their partials summed by the last split. Shapes
// with more tile units than the grid has clusters (so a tail exists): 1100 x
// 2200 x 1000 (K tail: 15.6 steps of 64; 162 tiles of 128 x 128, 30 left
// over on 132 SMs; in 2x1 clusters 90 units on 66, 24 over), with C and
// SiLU; B as [K, N]; and a batch of two (66 clusters each) with a bias.
// Splits of 2, 3, 5 and 8 ways (uneven: 16 steps in 3 and 5), with one
// consumer and two, alone and in clusters.
TEST_CASE("every tail split of the wgmma template matches a float64 reference", "[gpu][gemm][wgmma][tail]") {
  Device* device = testing::GpuDevice();
  std::vector<GemmCase> cases;
  cases.push_back(GemmCase::Make(device, 1100, 2200, 1000, v1::COL_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 1));
  cases.push_back(GemmCase::Make(device, 1100, 2200, 1000, v1::ROW_MAJOR, v1::EPILOGUE_NONE, false, 1));
  cases.push_back(GemmCase::Make(device, 1100, 1100, 520, v1::COL_MAJOR, v1::EPILOGUE_BIAS, false, 2));
  int tested = 0;
  for (GemmCase& g : cases) {
    std::vector<WgmmaTileConfig> configs;
    for (auto [bm, bn, consumers] : {std::tuple{128, 128, 2}, {128, 64, 1}, {64, 128, 1}}) {
      for (int cluster_m : {1, 2}) {
        for (int split : {2, 3, 5, 8}) {
          WgmmaTileConfig c;
          c.block_m = bm;
          c.block_n = bn;
          c.consumers = consumers;
          c.cluster_m = cluster_m;
          c.tail_split = split;
          // Only configs that leave a tail here (their recipe has a workspace).
          absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(g.p, c, device->info());
          if (r.ok() && r->workspace_bytes > 0) configs.push_back(c);
        }
      }
    }
    INFO(GemmCanonicalKey(g.p));
    CHECK(configs.size() >= 8);
    VerifyWgmmaConfigs(device, g, configs);
    tested += static_cast<int>(configs.size());
  }
  std::printf("tail-split wgmma configs verified: %d\n", tested);
}

// B as [K, N], read N-major. Every config once, at a problem
// with a K tail, split-K, a C and SiLU; the tuner's pick at the others (the
// unpruned spaces of all five are about 1100 compiles).
TEST_CASE("every wgmma GEMM config with B as [K, N] matches a float64 reference", "[gpu][gemm][wgmma][kn]") {
  Device* device = testing::GpuDevice();
  GemmCase every = GemmCase::Make(device, 127, 264, 1000, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU, true, 1);
  int tested = VerifyWgmmaSpace(device, every, /*pruned=*/false);
  CHECK(tested >= 100);
  std::vector<GemmCase> cases;
  cases.push_back(GemmCase::Make(device, 129, 136, 72, v1::ROW_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, true, 3));
  // More tiles than SMs with an N tail of half a block, and a batch.
  cases.push_back(GemmCase::Make(device, 2304, 2336, 136, v1::ROW_MAJOR, v1::EPILOGUE_NONE, false, 1));
  cases.push_back(GemmCase::Make(device, 300, 200, 200, v1::ROW_MAJOR, v1::EPILOGUE_BIAS, false, 2));
  cases.push_back(GemmCase::Make(device, 256, 384, 512, v1::ROW_MAJOR, v1::EPILOGUE_NONE, false, 1));
  for (GemmCase& g : cases) tested += VerifyWgmmaSpace(device, g, /*pruned=*/true);
  CHECK(tested >= 150);
}

TEST_CASE("cuBLASLt's algorithms and their variants match a float64 reference and come back from their bytes",
          "[gpu][gemm][cublaslt]") {
  Device* device = testing::GpuDevice();
  absl::StatusOr<std::unique_ptr<CublasLt>> lt = CublasLt::Open();
  INFO(lt.status().ToString());
  REQUIRE(lt.ok());
  absl::StatusOr<DeviceBuffer> workspace = DeviceBuffer::Create(device, 32 << 20);
  REQUIRE(workspace.ok());
  int served = 0;
  size_t all_variants = 0;
  for (GemmCase& g : Cases(device)) {
    INFO(GemmCanonicalKey(g.p));
    if (!CublasLtCanServe(g.p).ok()) continue;
    ++served;
    absl::StatusOr<std::vector<CublasLtAlgo>> algos = (*lt)->Heuristic(g.p, 16, 32 << 20);
    INFO(algos.status().ToString());
    REQUIRE(algos.ok());
    CHECK(algos->size() >= 1);
    // And the variants of the first two, as the tuner adds them (CublasLt::Candidates).
    const std::vector<CublasLtAlgo> seeds(algos->begin(), algos->begin() + std::min<size_t>(algos->size(), 2));
    absl::StatusOr<std::vector<CublasLtAlgo>> variants = (*lt)->Variants(g.p, seeds, 32 << 20, true, 12);
    INFO(variants.status().ToString());
    REQUIRE(variants.ok());
    std::printf("%s: %zu cuBLASLt algorithms, %zu variants\n", GemmCanonicalKey(g.p).c_str(), algos->size(),
                variants->size());
    all_variants += variants->size();
    // Each variant is a seed with one of stages, swizzle, custom option or
    // cluster shape changed, every other setting as it was (NeighbourConfigs).
    std::vector<CublasLtAlgoSettings> seed_settings;
    for (const CublasLtAlgo& seed : seeds) {
      absl::StatusOr<CublasLtAlgoSettings> s = (*lt)->ReadSettings(seed);
      REQUIRE(s.ok());
      seed_settings.push_back(*s);
    }
    for (const CublasLtAlgo& v : *variants) {
      CHECK(v.workspace_bytes <= (32u << 20));
      for (const CublasLtAlgo& seed : seeds) CHECK(v.data != seed.data);
      absl::StatusOr<CublasLtAlgoSettings> vs = (*lt)->ReadSettings(v);
      REQUIRE(vs.ok());
      INFO(ToString(*vs));
      const bool one_away = std::any_of(seed_settings.begin(), seed_settings.end(), [&](const CublasLtAlgoSettings& s) {
        const int changed = (vs->stages != s.stages) + (vs->swizzle != s.swizzle) + (vs->custom != s.custom) +
                            (vs->cluster != s.cluster);
        return vs->id == s.id && vs->tile == s.tile && vs->split_k == s.split_k && vs->reduction == s.reduction &&
               vs->inner == s.inner && changed == 1;
      });
      CHECK(one_away);
    }
    // The tuner's list: cuBLASLt's default first, every variant after every
    // heuristic algorithm.
    absl::Status candidates_variants;
    absl::StatusOr<std::vector<CublasLtAlgo>> candidates = (*lt)->Candidates(g.p, 16, true, &candidates_variants);
    REQUIRE(candidates.ok());
    CHECK(candidates_variants.ok());
    REQUIRE(candidates->size() >= algos->size());
    for (size_t i = 0; i < algos->size(); ++i) CHECK((*candidates)[i].data == (*algos)[i].data);
    CHECK(candidates->size() <= 16 + variants->size());
    for (const CublasLtAlgo& v : *variants) {
      const auto at =
          std::find_if(candidates->begin(), candidates->end(), [&](const CublasLtAlgo& c) { return c.data == v.data; });
      REQUIRE(at != candidates->end());
      CHECK(static_cast<size_t>(at - candidates->begin()) >= algos->size());
    }
    std::vector<CublasLtAlgo> every = *algos;
    every.insert(every.end(), variants->begin(), variants->end());
    for (const CublasLtAlgo& algo : every) {
      CublasLtAlgo stored;  // as read back from an entry: bytes and workspace only
      stored.data = std::string(algo.data.data(), algo.data.size());
      stored.workspace_bytes = algo.workspace_bytes;
      REQUIRE((*lt)->Check(g.p, stored).ok());
      GemmOperands o;
      o.a = g.da.get();
      o.b = g.db.get();
      o.c = g.p.c_dtype() ? g.dc.get() : 0;
      o.d = g.dd.get();
      o.bias = g.bias.empty() ? 0 : g.dbias.get();
      o.alpha = g.alpha;
      o.beta = g.beta;
      g.Poison(device);
      REQUIRE((*lt)->Run(g.p, stored, o, workspace->get(), workspace->size(), device->stream()).ok());
      CHECK(g.Error(device) < kTolerance);  // the copy back is ordered after it on the stream
    }
  }
  CHECK(served >= 3);
  CHECK(all_variants > 0);  // an H200 offers at least the cluster shapes somewhere
}

TEST_CASE("TuneGemm answers correctly and never measurably slower than cuBLASLt's default", "[gpu][gemm]") {
  Device* device = testing::GpuDevice();
  std::unique_ptr<CandidateExecutor> executor = NewInProcessExecutor(device);
  for (GemmCase& g : Cases(device)) {
    INFO(GemmCanonicalKey(g.p));
    GemmTuneOptions options;
    options.measure.repetitions = 20;
    absl::StatusOr<GemmTuneResult> r = TuneGemm(g.p, executor.get(), options);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    // Every candidate of both sources passed the runner's reference check
    // (the reference itself: cuBLASLt and the template agree with float64
    // above, and with it here).
    for (const GemmCandidateOutcome& o : r->outcomes) {
      INFO(o.name << ": " << o.status);
      CHECK(o.status == "ok");
    }
    CHECK(r->template_candidates >= 1);
    if (CublasLtCanServe(g.p).ok()) {
      CHECK(r->cublaslt_candidates >= 1);
      REQUIRE(r->cublaslt_default.has_value());
      // Ties within the window go to cuBLASLt's default, so the answer is
      // faster or within 3% (the widest window).
      CHECK(r->winner_timing.median_us <= r->cublaslt_default->median_us * 1.03);
    }
    std::printf("%s: %s at %.2f us (cuBLASLt default %.2f us, best template %s %.2f us)\n",
                GemmCanonicalKey(g.p).c_str(), r->winner.Name().c_str(), r->winner_timing.median_us,
                r->cublaslt_default ? r->cublaslt_default->median_us : 0.0, r->best_template_name.c_str(),
                r->best_template ? r->best_template->median_us : 0.0);
  }
}

TEST_CASE("a large GEMM's finalists are timed again after their own heat, and those timings pick the answer",
          "[gpu][gemm][sustained]") {
  Device* device = testing::GpuDevice();
  std::unique_ptr<CandidateExecutor> executor = NewInProcessExecutor(device);
  // Long enough (about 0.9 ms on an H200) that the power limit sets its clocks.
  const v1::GemmProblem p = Fp8Gemm(8192, 8192, 8192);
  GemmTuneOptions options;
  absl::StatusOr<GemmTuneResult> r = TuneGemm(p, executor.get(), options);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->sustained);
  REQUIRE(r->cublaslt_default.has_value());
  REQUIRE(r->best_template.has_value());  // the best template is always among them
  int sustained = 0;
  const GemmCandidateOutcome* answer = nullptr;
  for (const GemmCandidateOutcome& o : r->outcomes) {
    if (o.name == r->winner.Name()) answer = &o;
    if (!o.sustained) continue;
    INFO(o.name);
    ++sustained;
    CHECK(o.finalist);
    CHECK(o.status == "ok");
    CHECK(o.sustained->repetitions >= options.sustained_rounds * 20);
  }
  CHECK(sustained >= options.sustained_finalists);
  CHECK(sustained <= options.sustained_finalists + 2);  // and the best template and the default
  REQUIRE(answer != nullptr);
  REQUIRE(answer->sustained.has_value());
  CHECK(r->winner_timing.median_us == answer->sustained->median_us);
  // Faster than the default under the same protocol, or within the widest tie window.
  CHECK(r->winner_timing.median_us <= r->cublaslt_default->median_us * (1 + kMaxTieWindow));
  std::printf("%s: %s at %.1f us sustained (cuBLASLt default %.1f, best template %s %.1f)\n",
              GemmCanonicalKey(p).c_str(), r->winner.Name().c_str(), r->winner_timing.median_us,
              r->cublaslt_default->median_us, r->best_template_name.c_str(), r->best_template->median_us);
}

TEST_CASE("fp8 GEMMs are tuned over cuBLASLt and the wgmma template and checked against the scaled reference",
          "[gpu][gemm]") {
  Device* device = testing::GpuDevice();
  std::unique_ptr<CandidateExecutor> executor = NewInProcessExecutor(device);
  struct Fp8Case {
    v1::GemmProblem p;
    bool pruned;
  };
  // The last: M, N and K tails (K = 1040 is eight steps of 128 and a 16-wide
  // tail) and SiLU, over every wgmma config rather than the model's pick.
  // M <= 16 adds the skinny template's fp8 form (one row, and 16 with an N
  // tail and a K of 65 chunks of 64, so some warps take one chunk more).
  const Fp8Case cases[] = {{Fp8Gemm(256, 512, 1024, v1::EPILOGUE_NONE), true},
                           {Fp8Gemm(256, 512, 1024, v1::EPILOGUE_BIAS), true},
                           {Fp8Gemm(127, 264, 1040, v1::EPILOGUE_BIAS_SILU), false},
                           {Fp8Gemm(1, 512, 1024, v1::EPILOGUE_BIAS), true},
                           {Fp8Gemm(16, 264, 4160, v1::EPILOGUE_BIAS_GELU), true},
                           // K over one fp8 accumulator's 4096: promotion (and split-K
                           // where the tiles are few). 8320 is 65 steps of 128, so
                           // 16 spans of 4 steps and one of 1 (PromoteSteps);
                           // 2304 x 1024 is more tiles than SMs.
                           {Fp8Gemm(256, 264, 8320, v1::EPILOGUE_NONE), false},
                           {Fp8Gemm(2304, 1024, 8192, v1::EPILOGUE_BIAS), true},
                           // 216 tiles of 128 x 192 on 132 SMs: the model's best
                           // promoted configs come with a tail split too.
                           {Fp8Gemm(2200, 2200, 8320, v1::EPILOGUE_BIAS_GELU), true}};
  for (const Fp8Case& c : cases) {
    INFO(GemmCanonicalKey(c.p) << (c.pruned ? "" : ", unpruned"));
    GemmTuneOptions options;
    options.measure.repetitions = 20;  // Measure's least
    options.space.pruned = c.pruned;
    absl::StatusOr<GemmTuneResult> r = TuneGemm(c.p, executor.get(), options);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->template_candidates >= 1);  // wgmma, and skinny for M <= 16 (mma.sync is bf16 only)
    if (c.p.m() <= 16) {
      int skinny = 0;
      for (const GemmCandidateOutcome& o : r->outcomes) skinny += o.name.rfind("skinny", 0) == 0;
      CHECK(skinny == static_cast<int>(SkinnySearchSpace(c.p, device->info()).size()));
      CHECK(skinny > 0);
    }
    if (CublasLtCanServe(c.p).ok()) CHECK(r->cublaslt_candidates >= 1);  // not SiLU
    // Every candidate, each wgmma config included, matched the reference
    // (the product scaled by both per-tensor scales, which are not 1).
    for (const GemmCandidateOutcome& o : r->outcomes) {
      INFO(o.name << ": " << o.status);
      CHECK(o.status == "ok");
    }
    if (c.p.m() == 2200) {
      int tail_split = 0;
      for (const GemmCandidateOutcome& o : r->outcomes) tail_split += o.name.find(" pr t") != std::string::npos;
      CHECK(tail_split >= 1);
    }
    std::printf("%s: %s at %.2f us (best template %s %.2f us, %d template candidates)\n", GemmCanonicalKey(c.p).c_str(),
                r->winner.Name().c_str(), r->winner_timing.median_us, r->best_template_name.c_str(),
                r->best_template ? r->best_template->median_us : 0.0, r->template_candidates);
  }
}

}  // namespace
}  // namespace ktune
