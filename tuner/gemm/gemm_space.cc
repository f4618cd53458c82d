#include "tuner/gemm/gemm_space.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/compile/kernel_instance.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/gemm/gemm_interface.h"

namespace ktune {
namespace {

constexpr char kTemplateId[] = "gemm/gemm_mma";
constexpr int kChunkElements = 8;      // one 16-byte cp.async of bf16
constexpr int kMaxBatch = 65535;       // gridDim.z
constexpr int kMaxAccumulators = 128;  // fp32 accumulators per thread (ptxas used 247 regs at 128)
constexpr int kRegisterOverhead = 40;  // addresses, loop state, epilogue temporaries
constexpr int kMaxRegisters = 255;
constexpr int kSmemReservedPerCta = 1024;
constexpr int kMaxThreads = 1024;
// The model's machine: mma.sync's dense bf16 rate on an H100/H200-class SM
// (about half of wgmma's) and the HBM rate the norm kernels reach.
constexpr double kMmaSyncTflopsPerSm = 600.0 / 132;
constexpr double kMemoryTBps = 4.0;
// Split-K partials travel through L2 at an SM's share of its bandwidth (the
// wgmma space's assumption, about 8 TB/s over 132 SMs; not yet measured).
constexpr double kL2GBpsPerSm = 60.0;
constexpr int kMaxSplitK = 16;
constexpr int kSplitKs[] = {1, 2, 4, 8};  // the grid's; CanImplementGemm takes up to kMaxSplitK
// A split-K workspace larger than this is refused: split-K pays only where
// the tiles are few (the pruned space offers it only then), and an imported
// or unpruned config must not ask a caller for gigabytes.
constexpr uint64_t kMaxSplitKWorkspaceBytes = uint64_t{256} << 20;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool IsPowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

int Accumulators(const GemmTileConfig& c) { return c.block_m * c.block_n / c.threads(); }

// Registers per thread: the accumulators, A and B fragments (twice: ptxas
// keeps the next k step's in flight) and a fixed overhead.
int EstimatedRegisters(const GemmTileConfig& c) {
  const int mma_m = c.block_m / c.warps_m / 16;
  const int mma_n = c.block_n / c.warps_n / 8;
  return Accumulators(c) + 2 * (4 * mma_m + 2 * mma_n) + kRegisterOverhead;
}

int CtasPerSm(const GemmTileConfig& c, const DeviceInfo& d) {
  const int regs = std::min(kMaxRegisters + 1, (EstimatedRegisters(c) + 7) / 8 * 8);
  const int regs_per_sm = d.regs_per_sm > 0 ? d.regs_per_sm : 65536;
  const int threads_per_sm = d.max_threads_per_sm > 0 ? d.max_threads_per_sm : 2048;
  const int64_t optin = d.max_smem_per_block_optin > 0 ? d.max_smem_per_block_optin : 227 << 10;
  const int by_regs = regs_per_sm / (regs * c.threads());
  const int by_threads = threads_per_sm / c.threads();
  const int by_smem =
      static_cast<int>((optin + kSmemReservedPerCta) / (GemmSharedMemoryBytes(c) + kSmemReservedPerCta));
  return std::max(0, std::min({by_regs, by_threads, by_smem, 32}));
}

int64_t Tiles(const v1::GemmProblem& p, const GemmTileConfig& c) {
  return CeilDiv(p.m(), c.block_m) * CeilDiv(p.n(), c.block_n);
}

// The split-K workspace: (batch, tiles, split_k, BM * BN) f32 partials, then
// (batch, tiles) u32 counters.
uint64_t SplitKWorkspaceBytes(const v1::GemmProblem& p, const GemmTileConfig& c) {
  if (c.split_k <= 1) return 0;
  const uint64_t slots = static_cast<uint64_t>(GemmBatch(p) * Tiles(p, c));
  return slots * c.split_k * c.block_m * c.block_n * sizeof(float) + slots * sizeof(uint32_t);
}

std::string TypeName(v1::DType d) { return d == v1::FP32 ? "float" : "ktune::bf16"; }

// The grid, in its fixed order. Power-of-two tiles from 64 to 256 on M and N
// (the m16n8k16 MMA and 16-byte copies need multiples of 16 and 8), K steps of
// 32 or 64, 4 or 8 warps (2 warps leave the SM's tensor cores idle), 3 to 5
// stages (a 2-stage ring keeps one tile in flight while one is multiplied,
// too little to cover HBM latency at these tile sizes; at 128 accumulators it
// also spilled with B given as [K, N]), K split 1, 2, 4 or 8 ways.
std::vector<GemmTileConfig> Grid() {
  std::vector<GemmTileConfig> grid;
  for (int bm : {64, 128, 256}) {
    for (int bn : {64, 128, 256}) {
      for (int bk : {32, 64}) {
        for (auto [wm, wn] : {std::pair{2, 2}, std::pair{1, 4}, std::pair{4, 1}, std::pair{2, 4}, std::pair{4, 2}}) {
          for (int stages : {3, 4, 5}) {
            for (int split_k : kSplitKs) {
              GemmTileConfig c;
              c.block_m = bm;
              c.block_n = bn;
              c.block_k = bk;
              c.warps_m = wm;
              c.warps_n = wn;
              c.stages = stages;
              c.split_k = split_k;
              grid.push_back(c);
            }
          }
        }
      }
    }
  }
  return grid;
}

}  // namespace

std::string ToString(const GemmTileConfig& c) {
  return absl::StrFormat("bm%d bn%d bk%d w%dx%d s%d g%d%s", c.block_m, c.block_n, c.block_k, c.warps_m, c.warps_n,
                         c.stages, c.group_m, c.split_k > 1 ? absl::StrCat(" k", c.split_k) : "");
}

int64_t GemmSharedMemoryBytes(const GemmTileConfig& c) {
  return int64_t{c.stages} * (c.block_m + c.block_n) * c.block_k * 2;
}

absl::Status CanImplementGemm(const v1::GemmProblem& p, const GemmTileConfig& c, const DeviceInfo& d) {
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(ToString(c), ": ", why));
  };
  // The problem.
  if (p.a_dtype() != v1::BF16 || p.b_dtype() != v1::BF16) {
    return fail("the mma.sync template serves bf16 A and B");
  }
  if (p.k() % kChunkElements != 0) {
    return fail(absl::StrCat("K = ", p.k(), " is not a multiple of 8 (16-byte rows)"));
  }
  if (!GemmBIsNK(p) && p.n() % kChunkElements != 0) {
    return fail(absl::StrCat("N = ", p.n(), " is not a multiple of 8 with B given as [K, N]"));
  }
  if (GemmBatch(p) > kMaxBatch) return fail(absl::StrCat("batch over ", kMaxBatch));
  if (d.cc_major < 8) return fail(absl::StrCat("needs sm_80 or newer, device is ", Arch(d)));
  // The config.
  if (!IsPowerOfTwo(c.block_m) || !IsPowerOfTwo(c.block_n) || !IsPowerOfTwo(c.block_k) || !IsPowerOfTwo(c.warps_m) ||
      !IsPowerOfTwo(c.warps_n) || c.stages < 2 || c.group_m < 1) {
    return fail("tiles and warps must be powers of two, stages >= 2, group_m >= 1");
  }
  if (c.block_m % (16 * c.warps_m) != 0 || c.block_n % (16 * c.warps_n) != 0) {
    return fail("warp tiles must be multiples of 16 x 16");
  }
  if (c.block_k < 16 || c.block_k > 128) return fail("block_k must be 16 to 128");
  if (!GemmBIsNK(p) && c.block_n < 16) return fail("block_n must be >= 16 with B given as [K, N]");
  if (c.threads() > kMaxThreads) return fail("more than 1024 threads");
  if (c.split_k < 1 || c.split_k > kMaxSplitK || !IsPowerOfTwo(c.split_k)) {
    return fail(absl::StrCat("split_k must be a power of two <= ", kMaxSplitK));
  }
  if (const int64_t k_steps = CeilDiv(p.k(), c.block_k); k_steps < c.split_k) {
    return fail(
        absl::StrCat("split_k = ", c.split_k, " leaves a split without K: K has ", k_steps, " steps of ", c.block_k));
  }
  if (const uint64_t ws = SplitKWorkspaceBytes(p, c); ws > kMaxSplitKWorkspaceBytes) {
    return fail(absl::StrCat("a split-K workspace of ", ws, " bytes, over the ", kMaxSplitKWorkspaceBytes, " allowed"));
  }
  const int chunks_a = c.block_m * c.block_k / kChunkElements;
  const int chunks_b = c.block_n * c.block_k / kChunkElements;
  if (chunks_a % c.threads() != 0 || chunks_b % c.threads() != 0) {
    return fail("every thread must copy whole 16-byte chunks of each tile");
  }
  if (Accumulators(c) > kMaxAccumulators) {
    return fail(absl::StrCat(Accumulators(c), " accumulators per thread, more than ", kMaxAccumulators));
  }
  // At 128 accumulators ptxas is at its 255-register ceiling; the addresses of
  // a 64-deep K step's copies push it over (the compile-all test saw 12-144
  // bytes of spills at block_k 64).
  if (Accumulators(c) == kMaxAccumulators && c.block_k > 32) {
    return fail("block_k must be 32 at 128 accumulators per thread (ptxas spills)");
  }
  if (EstimatedRegisters(c) > kMaxRegisters) {
    return fail(absl::StrCat("an estimated ", EstimatedRegisters(c), " registers per thread"));
  }
  const int64_t optin = d.max_smem_per_block_optin > 0 ? d.max_smem_per_block_optin : 48 << 10;
  if (GemmSharedMemoryBytes(c) > optin) {
    return fail(absl::StrCat(GemmSharedMemoryBytes(c), " bytes of shared memory, the device allows ", optin));
  }
  if (CtasPerSm(c, d) < 1) return fail("not even one CTA fits an SM");
  if (Tiles(p, c) > INT_MAX) return fail("more tiles than a grid holds");
  return absl::OkStatus();
}

double GemmModelTimeUs(const v1::GemmProblem& p, const GemmTileConfig& c, const DeviceInfo& d) {
  const int sms = std::max(d.sm_count, 1);
  const int ctas = std::max(CtasPerSm(c, d), 1);
  const int64_t tiles = Tiles(p, c) * GemmBatch(p);
  const int64_t units = tiles * c.split_k;  // CTAs: (tile, split)
  const int64_t waves = CeilDiv(units, int64_t{sms} * ctas);
  // A warp tile of wm x wn reads (wm + wn) * 16 elements from shared memory
  // per k16 step for wm * wn * 16 MACs: full speed from 64 x 64 on; and the SM
  // needs about 8 warps to hide the MMA and ldmatrix latencies.
  const double wm = c.block_m / c.warps_m, wn = c.block_n / c.warps_n;
  const double warp_efficiency = std::min(1.0, (wm * wn / (wm + wn)) / 32.0);
  const double occupancy = std::min(1.0, ctas * c.warps_m * c.warps_n / 8.0);
  // The ring keeps (stages - 1) K steps in flight: about 96 deep in K covers
  // the load latency (on the H200, 128 x 128 x 32 tiles ran best at 4 stages).
  const double pipelining = std::min(1.0, (c.stages - 1) * c.block_k / 96.0);
  // A split's K: the longest split's steps.
  const double k_padded = static_cast<double>(CeilDiv(CeilDiv(p.k(), c.block_k), c.split_k) * c.block_k);
  const double unit_flops = 2.0 * c.block_m * c.block_n * k_padded;
  const double cta_tflops = kMmaSyncTflopsPerSm / ctas * warp_efficiency * occupancy * pipelining;
  double compute_us = static_cast<double>(waves) * unit_flops / (cta_tflops * 1e6);
  if (c.split_k > 1) {
    // Every CTA writes its fp32 partial tile (the SM's CTAs share its share of
    // L2); the last split of a tile reads the other split_k - 1 back.
    const double tile_bytes = 4.0 * c.block_m * c.block_n;
    compute_us += (static_cast<double>(waves) * ctas + (c.split_k - 1)) * tile_bytes / (kL2GBpsPerSm * 1e3);
  }
  // Memory: each operand once, D (and C) once; while fewer CTAs than SMs run,
  // only that share of the bandwidth is drawn.
  const double d_bytes = GemmDType(p) == v1::FP32 ? 4 : 2;
  const double bytes = static_cast<double>(GemmBatch(p)) *
                       (2.0 * (p.m() * p.k() + p.n() * p.k()) + d_bytes * p.m() * p.n() * (GemmHasC(p) ? 2 : 1));
  const double busy = std::min(1.0, static_cast<double>(units) / sms);
  const double memory_us = bytes / (kMemoryTBps * 1e6 * busy);
  return std::max(compute_us, memory_us);
}

std::vector<GemmTileConfig> GemmSearchSpace(const v1::GemmProblem& p, const DeviceInfo& d,
                                            const GemmSpaceOptions& options) {
  std::vector<std::pair<double, GemmTileConfig>> whole, split;
  for (const GemmTileConfig& c : Grid()) {
    if (!CanImplementGemm(p, c, d).ok()) continue;
    // Split-K only pays where the tiles alone leave SMs idle.
    if (options.pruned && c.split_k > 1 && Tiles(p, c) * GemmBatch(p) >= std::max(d.sm_count, 1)) continue;
    (c.split_k > 1 ? split : whole).emplace_back(options.pruned ? GemmModelTimeUs(p, c, d) : 0.0, c);
  }
  if (!options.pruned) {
    whole.insert(whole.end(), split.begin(), split.end());
    return PruneByModel(std::move(whole), options);
  }
  // The model's split-K term is unmeasured: the split configs (half as many
  // at most) come after the unsplit ones, which are pruned as before.
  std::vector<GemmTileConfig> space = PruneByModel(std::move(whole), options);
  GemmSpaceOptions half = options;
  half.max_candidates = std::max(1, options.max_candidates / 2);
  for (const GemmTileConfig& c : PruneByModel(std::move(split), half)) space.push_back(c);
  return space;
}

absl::StatusOr<LaunchRecipe> GemmTemplateRecipe(const std::string& template_id, const std::string& arch) {
  LaunchRecipe recipe;
  recipe.template_id = template_id;
  absl::StatusOr<const KernelSource*> source = FindKernelSource(recipe.template_id);
  if (!source.ok()) return source.status();
  recipe.template_hash = (*source)->hash;
  recipe.arch = arch;
  recipe.nvrtc_options = {absl::StrCat("--gpu-architecture=", arch), "-std=c++17"};
  return recipe;
}

absl::StatusOr<LaunchRecipe> GemmLaunchRecipe(const v1::GemmProblem& p, const GemmTileConfig& c, const DeviceInfo& d) {
  if (absl::Status s = CanImplementGemm(p, c, d); !s.ok()) return s;
  absl::StatusOr<LaunchRecipe> recipe = GemmTemplateRecipe(kTemplateId, Arch(d));
  if (!recipe.ok()) return recipe.status();
  KernelLaunch k;
  const absl::Status named = KernelInstance("gemm_mma")
                                 .Type("T", "ktune::bf16")
                                 .Type("TD", TypeName(GemmDType(p)))
                                 .Bool("B_NK", GemmBIsNK(p))
                                 .Int("EPI", GemmEpilogueCode(p))
                                 .Bool("HAS_C", GemmHasC(p))
                                 .Int("BM", c.block_m)
                                 .Int("BN", c.block_n)
                                 .Int("BK", c.block_k)
                                 .Int("WARPS_M", c.warps_m)
                                 .Int("WARPS_N", c.warps_n)
                                 .Int("STAGES", c.stages)
                                 .Int("GROUP_M", c.group_m)
                                 .Int("SPLIT_K", c.split_k)
                                 .NameInto(&k);
  if (!named.ok()) return named;
  k.grid = {static_cast<uint32_t>(Tiles(p, c)), static_cast<uint32_t>(c.split_k), static_cast<uint32_t>(GemmBatch(p))};
  k.block = {static_cast<uint32_t>(c.threads()), 1, 1};
  k.dynamic_smem_bytes = static_cast<uint32_t>(GemmSharedMemoryBytes(c));
  k.params = {"a", "b", "c", "d", "bias", "M", "N", "K", "alpha", "beta", "ws"};
  recipe->kernels.push_back(std::move(k));
  recipe->workspace_bytes = SplitKWorkspaceBytes(p, c);
  recipe->workspace_zeroed = c.split_k > 1;  // the arrival counters
  if (absl::Status s = WriteGemmInterface(p, &*recipe); !s.ok()) return s;
  return recipe;
}

}  // namespace ktune
