#include "tuner/gemm/gemm_wgmma_space.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tuner/compile/kernel_instance.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/gemm/gemm_interface.h"

namespace ktune {
namespace {

constexpr char kTemplateId[] = "gemm/gemm_wgmma";
constexpr int kRowBytes = 128;         // of K per stage and tile row: one 128-byte swizzle row
constexpr int kNBlock = 64;            // B as [K, N]: columns per TMA box (128 bytes of bf16)
constexpr int kMaxAccumulators = 128;  // fp32 per consumer thread (of 232 registers after setmaxnreg)
// With promotion's second set: 192 in all, a 64 x 192 tile per consumer
// (ptxas: no spills under the consumers' 232 registers, with a bias-SiLU
// epilogue and C).
constexpr int kMaxPromotedAccumulators = 96;
constexpr int kMaxOneConsumerSplitAccumulators = 64;  // see CanImplementWgmma
constexpr int kMaxBatch = 65535;                      // gridDim.z
// wgmma's dense bf16 rate per SM on an H100/H200 (989 TFLOP/s over 132 SMs)
// and the HBM rate the norm kernels reach.
constexpr double kWgmmaTflopsPerSm = 989.0 / 132;  // fp8: twice this
constexpr double kMemoryTBps = 4.0;
// Split-K partials travel through L2 at an SM's share of its bandwidth (an
// assumption, about 8 TB/s over 132 SMs; not yet measured).
constexpr double kL2GBpsPerSm = 60.0;
constexpr int kMaxSplitK = 16;
constexpr int kMaxStages = 16;
// How long a freed stage takes to come back full while every SM streams
// (the model's streaming bound): fitted to a 64 x 64 fp8 tile at M = 128 on
// the H200, whose 4- and 6-stage times gave 1.0-1.3 us
// (bench/results/2026-11-30-gemm-deep-rings-3b7825f.md, "Small tiles at small M
// want deeper rings").
constexpr double kLoadLatencyUs = 1.2;
constexpr int kFixedStages[] = {4, 5, 3, 6};  // the grid's rings besides the deepest that fits
// Raster groups besides the default 8 (WgmmaTileConfig::group_m): tile rows
// walked together, so a wave of CTAs shares A rows and B columns in L2. Which
// is fastest depends on the grid's shape against the wave; the model does not
// know, so the tuner measures them on the model's best few configs, as it
// does two slices of K per stage (WgmmaTileConfig::k_rows).
constexpr int kRasterGroups[] = {4, 16};
constexpr int kUnrankedKnobsTried = 2;  // the model's best unsplit configs tried with each
// The model's best unsplit configs offered with a tail split too, where it
// models at least kMinTailSplitGain faster (the split whose model time is
// least, of 2 to kMaxTailSplit ways).
constexpr int kTailSplitTried = 4;
constexpr int kMaxTailSplit = 8;
constexpr double kMinTailSplitGain = 0.005;
constexpr int64_t kMaxSwapRows = 32;  // problems the swapped tiles are offered for (wgmma N <= 32)

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Dynamic shared memory a CTA may opt in to (48 KiB where the device does not say).
int64_t SmemOptin(const DeviceInfo& d) {
  return d.max_smem_per_block_optin > 0 ? d.max_smem_per_block_optin : 48 << 10;
}

// The most stages (at most kMaxStages) of `config`'s tile and k_rows whose
// shared memory fits `smem_optin` bytes; 0 if not even two do.
int DeepestRing(WgmmaTileConfig config, int64_t smem_optin) {
  int deepest = 0;
  for (config.stages = 2; config.stages <= kMaxStages; ++config.stages) {
    if (WgmmaSharedMemoryBytes(config) <= smem_optin) deepest = config.stages;
  }
  return deepest;
}

int OperandBytes(const v1::GemmProblem& p) { return GemmIsFp8(p) ? 1 : 2; }
// The template's K step in elements: one 128-byte row (64 bf16, 128 e4m3).
int BlockK(const v1::GemmProblem& p) { return kRowBytes / OperandBytes(p); }

int Accumulators(const WgmmaTileConfig& c) { return c.rows_per_consumer() * c.block_n / 128; }

// The template's PROMOTE_STEPS: steps of K (k_rows 128-byte slices each) per
// span of the wgmma accumulator; 0 without promotion.
//
// Spans of kMaxFp8KPerAccumulator are not enough once there are several: on
// the H200 every promoted config at K = 8192 and 14336 missed the tolerance by
// the same margin (4096-spans; bench/results/2026-11-30-gemm-paired-263d781.md,
// "fp8 promotion: wrong at K = 8192 and 14336", fixed in 0a61686). The tensor cores'
// reduced-precision adds truncate, so the error has a sign: per add it scales
// with the running sum (~sqrt(span)), and the spans' errors add up, giving an
// error ~ K * sqrt(span), against a tolerance ~ sqrt(K) (the output's rms).
// K * span is what must stay bounded: K = 8192 at 4096 (2^25) failed by 2%,
// so spans are the longest power of two, at most kMaxPromotionSpan, that
// keeps K * span within 2^23 (about half the tolerance), and at least a step.
// Why: bench/results/decisions/fp8-promotion.md
int PromoteSteps(const v1::GemmProblem& p, const WgmmaTileConfig& c) {
  if (!c.promote) return 0;
  constexpr int64_t kMaxPromotionSpan = 1024;  // the model charges a step per span
  constexpr int64_t kMaxKTimesSpan = int64_t{1} << 23;
  const int64_t step = int64_t{BlockK(p)} * c.k_rows;
  int64_t span = kMaxPromotionSpan;
  while (span > step && p.k() * span > kMaxKTimesSpan) span /= 2;
  return static_cast<int>(std::max<int64_t>(1, span / step));
}

// The kernel's M and N: the problem's, or with swap_ab its N and M (the
// kernel computes D^T).
int64_t KernelM(const v1::GemmProblem& p, const WgmmaTileConfig& c) { return c.swap_ab ? p.n() : p.m(); }
int64_t KernelN(const v1::GemmProblem& p, const WgmmaTileConfig& c) { return c.swap_ab ? p.m() : p.n(); }

int64_t Tiles(const v1::GemmProblem& p, const WgmmaTileConfig& c) {
  return CeilDiv(KernelM(p, c), c.block_m) * CeilDiv(KernelN(p, c), c.block_n);
}

// Tile rows in the template's cluster units (cluster_m tiles stacked along M).
int64_t TileRowUnits(const v1::GemmProblem& p, const WgmmaTileConfig& c) {
  return CeilDiv(KernelM(p, c), int64_t{c.block_m} * c.cluster_m);
}

// Tiles in the template's cluster units.
int64_t TileUnits(const v1::GemmProblem& p, const WgmmaTileConfig& c) {
  return TileRowUnits(p, c) * CeilDiv(KernelN(p, c), c.block_n);
}

// Whether fp8's unsplit K, in the config's steps, stays within one
// accumulator's span without promotion.
bool FitsOneFp8Accumulator(const v1::GemmProblem& p, const WgmmaTileConfig& c) {
  const int64_t step = int64_t{BlockK(p)} * c.k_rows;
  return CeilDiv(p.k(), step) * step <= kMaxFp8KPerAccumulator;
}

// The most clusters a batch's persistent grid has: one CTA per SM at most,
// the SMs shared by the batches.
int64_t MaxClusters(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  return std::max<int64_t>(1, std::max(d.sm_count, 1) / (c.cluster_m * GemmBatch(p)));
}

// With a tail split, the tile units past the grid's whole waves: the
// template's `tail`. None for fewer tiles than the grid has clusters (one
// partial wave, where the grid is as many clusters as tiles; that is
// split-K's case).
int64_t TailTiles(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  if (c.tail_split <= 1) return 0;
  const int64_t tiles = TileUnits(p, c);
  return tiles >= MaxClusters(p, c, d) ? tiles % MaxClusters(p, c, d) : 0;
}

// Work units per batch: (tile, split) for split-K, whole tiles then the tail
// tiles' splits for a tail split.
int64_t WorkUnits(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  const int64_t tail = TailTiles(p, c, d);
  return TileUnits(p, c) * c.split_k + tail * (c.tail_split - 1);
}

// The split-K workspace: (batch, tile units, cluster_m, split_k, BM * BN) f32
// partials, then (batch, tile units, cluster_m) u32 counters; for a tail
// split, likewise for the tail's tile units and tail_split.
uint64_t SplitKWorkspaceBytes(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  if (c.split_k <= 1 && c.tail_split <= 1) return 0;
  const int64_t tiles = c.tail_split > 1 ? TailTiles(p, c, d) : TileUnits(p, c);
  const int splits = c.tail_split > 1 ? c.tail_split : c.split_k;
  const uint64_t slots = static_cast<uint64_t>(GemmBatch(p) * tiles * c.cluster_m);
  return slots * splits * c.block_m * c.block_n * sizeof(float) + slots * sizeof(uint32_t);
}

// Persistent CTAs: one per SM at most (shared by the batches), in clusters
// of cluster_m, each cluster taking cluster_m tiles stacked along M at a
// time. (With a tail split the grid's cluster count C and the template's
// tail agree: T >= C tiles make a grid of C clusters and leave T % C;
// fewer make a grid of T and leave none.)
int GridX(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  return static_cast<int>(c.cluster_m * std::min(WorkUnits(p, c, d), MaxClusters(p, c, d)));
}

// Adds `c` (unless promoted_only) to the grid and, unsplit, its promoted
// twin (fp8 only; CanImplementWgmma has the limits).
void AddWithPromotedTwin(WgmmaTileConfig c, bool promoted_only, std::vector<WgmmaTileConfig>* grid) {
  if (!promoted_only) grid->push_back(c);
  if (c.split_k == 1) {
    c.promote = true;
    grid->push_back(c);
  }
}

// The grid, in its fixed order: tiles of 64 to 256 rows and 64 to 256
// columns (wgmma's N), one or two cooperative consumers or a ping-pong pair,
// alone or in 2x1 clusters, 3 to 6 stages and the deepest ring the device's
// shared memory holds (up to 16; small tiles at small M stream their
// operands, and a deeper ring keeps more of them in flight: 5-13% at M = 128,
// bench/results/2026-11-30-gemm-deep-rings-3b7825f.md, "Small tiles at small M
// want deeper rings"); alone, split-K by 2 or 4 too; unsplit, with
// promotion too. The
// accumulator limit leaves ping-pong 128 x 128 and 64 x 256 tiles
// (CanImplementWgmma). 192 columns are for promoted tiles only: promotion
// limits a consumer to 96 accumulators, and 64 x 192 is the widest tile
// within that (cuBLASLt's fp8 pick at K = 14336 is 128 x 160).
std::vector<WgmmaTileConfig> Grid(int64_t smem_optin) {
  std::vector<WgmmaTileConfig> grid;
  for (int bm : {128, 256, 64}) {
    for (int bn : {256, 128, 64, 192}) {
      for (auto [consumers, pingpong] : {std::pair{2, false}, std::pair{2, true}, std::pair{1, false}}) {
        // The ring's shared memory depends on the tile and the consumers only.
        WgmmaTileConfig tile;
        tile.block_m = bm;
        tile.block_n = bn;
        tile.consumers = consumers;
        std::vector<int> rings(std::begin(kFixedStages), std::end(kFixedStages));
        if (const int deepest = DeepestRing(tile, smem_optin);
            deepest > *std::max_element(rings.begin(), rings.end())) {
          rings.push_back(deepest);
        }
        for (int cluster_m : {1, 2}) {
          for (int stages : rings) {
            for (int split_k : {1, 2, 4}) {
              if (cluster_m == 2 && split_k > 1) continue;
              WgmmaTileConfig c;
              c.block_m = bm;
              c.block_n = bn;
              c.consumers = consumers;
              c.pingpong = pingpong;
              c.cluster_m = cluster_m;
              c.stages = stages;
              c.split_k = split_k;
              AddWithPromotedTwin(c, /*promoted_only=*/bn == 192, &grid);
            }
          }
        }
      }
    }
  }
  return grid;
}

// The swapped skinny tiles (swap_ab), for problems of at most kMaxSwapRows
// rows: the weight's rows are the kernel's (64 or 128 per tile, one
// consumer), the problem's few rows wgmma's N (the narrowest of 8, 16 and 32
// that holds them), so a stage carries little zero fill and the ring streams
// B (cuBLASLt's picks at M = 16 on the H200 are such tiles, 64 x 8 and
// 64 x 16). Each tile with the deepest ring its shared memory holds and with
// 6 stages, 128 or 256 bytes of K per stage (half the stages), alone or
// split 2 or 4 ways: 24 configs. Each of those knobs decided the fastest
// config at some of the bench's M = 1 and 16 shapes in the H200's tunes;
// two consumers and 2x1 clusters sharing A were 1-5% slower everywhere
// (bench/results/2026-11-30-gemm-swapped-tiles-7a81ab9.md, "Swapped tiles").
// Why: bench/results/decisions/skinny-gemm.md
std::vector<WgmmaTileConfig> SwapGrid(const v1::GemmProblem& p, int64_t smem_optin) {
  std::vector<WgmmaTileConfig> grid;
  if (p.m() > kMaxSwapRows) return grid;
  for (int bm : {64, 128}) {
    WgmmaTileConfig c;
    c.block_m = bm;
    c.block_n = p.m() <= 8 ? 8 : p.m() <= 16 ? 16 : 32;
    c.consumers = 1;
    c.swap_ab = true;
    for (int stages : {DeepestRing(c, smem_optin), 6}) {
      for (int k_rows : {1, 2}) {
        for (int split_k : {1, 2, 4}) {
          c.k_rows = k_rows;
          c.stages = stages / k_rows;  // the same bytes of K in flight
          c.split_k = split_k;
          AddWithPromotedTwin(c, /*promoted_only=*/false, &grid);
        }
      }
    }
  }
  return grid;
}

}  // namespace

std::string ToString(const WgmmaTileConfig& c) {
  return absl::StrFormat("bm%d bn%d %s%s s%d g%d%s%s%s%s%s", c.block_m, c.block_n,
                         c.pingpong ? "pp" : absl::StrCat("c", c.consumers), c.cluster_m == 2 ? " x2" : "", c.stages,
                         c.group_m, c.k_rows > 1 ? absl::StrCat(" kr", c.k_rows) : "", c.promote ? " pr" : "",
                         c.split_k > 1 ? absl::StrCat(" k", c.split_k) : "",
                         c.tail_split > 1 ? absl::StrCat(" t", c.tail_split) : "", c.swap_ab ? " swap" : "");
}

int64_t WgmmaSharedMemoryBytes(const WgmmaTileConfig& c) {
  // The ring, its 1024-byte alignment slack, the mbarriers and 16 bytes of
  // split-K flags, and 16 staging rows of 64 outputs (128 bytes + 16 of
  // padding) per consumer warp.
  return int64_t{c.stages} * c.k_rows * (c.block_m + c.block_n) * kRowBytes + 1024 + 16 * (c.stages + 2) +
         int64_t{c.consumers} * 4 * 16 * 144;
}

absl::Status CanImplementWgmma(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("wgmma ", ToString(c), ": ", why));
  };
  if (d.cc_major != 9 || d.cc_minor != 0) {
    return fail(absl::StrCat("needs sm_90 (compiled for sm_90a), device is ", Arch(d)));
  }
  const bool narrow = c.block_n == 8 || c.block_n == 16 || c.block_n == 32;
  if (c.swap_ab) {
    if (!GemmBIsNK(p)) return fail("swapped tiles need B as [N, K] (it is the kernel's K-major A)");
    if (!narrow) return fail("swapped tiles are 8, 16 or 32 columns (the problem's rows) wide");
    if (c.cluster_m != 1 || c.pingpong) {
      return fail("swapped tiles run alone, with cooperative consumers (no cluster, no ping-pong)");
    }
  } else if (narrow) {
    return fail(absl::StrCat("block_n ", c.block_n, " is for swapped tiles only"));
  }
  if (!GemmBIsNK(p)) {
    // B as [K, N] is read N-major, which wgmma allows for 16-bit operands
    // only; its TMA boxes are 64 columns (128 bytes) wide.
    if (GemmIsFp8(p)) return fail("fp8 needs B as [N, K] (wgmma reads 8-bit operands K-major only)");
    if (p.n() * OperandBytes(p) % 16 != 0) {
      return fail(absl::StrCat("B as [K, N]: N = ", p.n(), " is not a multiple of ", 16 / OperandBytes(p),
                               " (16-byte TMA strides)"));
    }
    if (c.block_n / c.cluster_m % kNBlock != 0) {
      return fail(
          absl::StrCat("B as [K, N]: each CTA loads blocks of ", kNBlock, " columns, not ", c.block_n / c.cluster_m));
    }
  }
  if (p.k() * OperandBytes(p) % 16 != 0) {
    return fail(absl::StrCat("K = ", p.k(), " is not a multiple of ", 16 / OperandBytes(p), " (16-byte TMA strides)"));
  }
  if (GemmBatch(p) > kMaxBatch) return fail(absl::StrCat("batch over ", kMaxBatch));
  if ((c.block_m != 64 && c.block_m != 128 && c.block_m != 256) ||
      (!narrow && c.block_n != 64 && c.block_n != 128 && c.block_n != 192 && c.block_n != 256)) {
    return fail("block_m must be 64, 128 or 256, block_n 64, 128, 192 or 256 (8, 16 or 32 swapped)");
  }
  if (c.block_n == 192 && !c.promote) {
    return fail("block_n 192 is for promoted fp8 tiles only (64 x 192 per consumer; not measured elsewhere)");
  }
  if (c.consumers != 1 && c.consumers != 2) return fail("one or two consumer warpgroups");
  if (c.pingpong && c.consumers != 2) return fail("ping-pong takes two consumers");
  const int rows = c.rows_per_consumer();
  if (rows != 64 && rows != 128) return fail("64 or 128 rows per consumer warpgroup");
  if (Accumulators(c) > kMaxAccumulators) {
    return fail(absl::StrCat(Accumulators(c), " accumulators per thread, more than ", kMaxAccumulators));
  }
  if (c.stages < 2 || c.stages > kMaxStages || c.group_m < 1) {
    return fail(absl::StrCat("stages must be 2 to ", kMaxStages, ", group_m >= 1"));
  }
  if (c.cluster_m != 1 && c.cluster_m != 2) return fail("cluster_m must be 1 or 2");
  if (c.k_rows != 1 && c.k_rows != 2) return fail("k_rows (128-byte slices of K per stage) must be 1 or 2");
  if (c.split_k < 1 || c.split_k > kMaxSplitK || (c.split_k & (c.split_k - 1)) != 0) {
    return fail(absl::StrCat("split_k must be a power of two <= ", kMaxSplitK));
  }
  // One consumer (240 registers) at 128 accumulators has no room for the
  // split-K sum beside a GELU or SiLU epilogue: ptxas spilled 8-16 bytes.
  if (c.split_k > 1 && c.consumers == 1 && Accumulators(c) > kMaxOneConsumerSplitAccumulators) {
    return fail(absl::StrCat("split-K with one consumer takes at most ", kMaxOneConsumerSplitAccumulators,
                             " accumulators per thread, not ", Accumulators(c), " (ptxas spills)"));
  }
  const int64_t step = int64_t{BlockK(p)} * c.k_rows;  // K per stage
  const int64_t k_steps = CeilDiv(p.k(), step);
  if (c.tail_split < 1 || c.tail_split > kMaxSplitK) {
    return fail(absl::StrCat("tail_split must be 1 to ", kMaxSplitK));
  }
  if (c.tail_split > 1) {
    if (c.split_k > 1 || c.pingpong || c.swap_ab) {
      return fail("a tail split is for unsplit cooperative tiles (no split-K, ping-pong or swapped tiles)");
    }
    if (k_steps < c.tail_split) {
      return fail(absl::StrCat("tail_split = ", c.tail_split, " leaves a split without K: K has ", k_steps,
                               " steps of ", step));
    }
  }
  if (k_steps % c.split_k != 0) {
    return fail(absl::StrCat("split_k = ", c.split_k, " does not divide K's ", k_steps, " steps of ", step));
  }
  if (c.promote) {
    if (!GemmIsFp8(p)) return fail("promotion is for fp8's reduced-precision accumulation, not bf16");
    if (c.split_k > 1) return fail("promotion and split-K are alternatives (each bounds an accumulator's span)");
    if (Accumulators(c) > kMaxPromotedAccumulators) {
      return fail(absl::StrCat(Accumulators(c), " accumulators per thread, twice that with promotion; at most ",
                               kMaxPromotedAccumulators, " to promote"));
    }
  } else if (const int64_t span = k_steps / c.split_k * step; GemmIsFp8(p) && span > kMaxFp8KPerAccumulator) {
    return fail(absl::StrCat("fp8 accumulates ", span, " of K in one accumulator, over the ", kMaxFp8KPerAccumulator,
                             " its reduced-precision adds keep within tolerance (split K, or promote)"));
  }
  if (const int64_t optin = SmemOptin(d); WgmmaSharedMemoryBytes(c) > optin) {
    return fail(absl::StrCat(WgmmaSharedMemoryBytes(c), " bytes of shared memory, the device allows ", optin));
  }
  if (Tiles(p, c) * c.split_k > INT_MAX) return fail("more work units than a grid holds");
  return absl::OkStatus();
}

double WgmmaModelTimeUs(const v1::GemmProblem& p, const WgmmaTileConfig& c, const DeviceInfo& d) {
  const int sms = std::max(d.sm_count, 1);
  const int64_t tiles = Tiles(p, c) * GemmBatch(p);
  // Turns of each CTA: units of cluster_m tiles along M over the clusters (a
  // cluster's second tile row past M is idle time).
  const int64_t units = TileUnits(p, c) * c.split_k * GemmBatch(p);
  // In waves of whole units; a tail split's (shorter) units as fractions:
  // its tail tiles' splits take `tail_rounds` rounds of 1 / tail_split each.
  double waves = static_cast<double>(CeilDiv(units, std::max(1, sms / c.cluster_m)));
  const int64_t tail = TailTiles(p, c, d) * GemmBatch(p);
  const int64_t clusters = MaxClusters(p, c, d) * GemmBatch(p);
  const int64_t tail_rounds = CeilDiv(tail * c.tail_split, clusters);
  if (tail > 0) {
    waves = static_cast<double>((units - tail) / clusters) + static_cast<double>(tail_rounds) / c.tail_split;
  }
  // Operand bytes per MAC fall as the tile grows: 128 x 256 feeds the tensor
  // cores at full rate, a 128 x 64 tile reads 2.5x as many bytes per MAC.
  const double tile_efficiency = std::min(1.0, (c.block_m * c.block_n / double(c.block_m + c.block_n)) / 85.0);
  // One consumer leaves the tensor cores idle through its own epilogue and
  // waits; a ping-pong pair hides each other's epilogue. The ring keeps
  // (stages - 1) steps of 64 in flight.
  // (Ping-pong 128 x 128 measured 10-15% below cooperative 128 x 256 on
  // the H200 at large shapes: bench/results/2026-11-29-gemm-5237382.md, run 7.)
  const double consumer_efficiency = c.pingpong ? 0.95 : c.consumers == 2 ? 0.97 : 0.85;
  // A pair sharing B by multicast moves a quarter less through L2. Before
  // 44326c9 every 2x1-cluster config ran at 50-73% of the same config alone
  // (bench/results/2026-11-29-gemm-5237382.md, run 7): each
  // consumer arrival on a stage's barrier carried a GPU-wide fence
  // (`.release.cluster`), twice per step of K. Without it (44326c9) the
  // pairs ran at 0.96-1.02x their twins in the first round of tunes at bf16
  // 8192^3 and fp8 8192 x 4096 x 14336 (bench/results/2026-11-30-norms-gemm-4bddd4b.md,
  // "2x1 clusters now run as fast as their twins", 84ca4c2), and a cluster was
  // the best own kernel at bf16 and fp8 8192^3. No consistent gain to model:
  // a cluster ranks as its twin (no factor here), and measurement picks.
  // Why: bench/results/decisions/gemm-wgmma-clusters.md
  const double pipelining = std::min(1.0, (c.stages - 1) * c.k_rows * kRowBytes / 384.0);  // 3 rows of 128 bytes
  // Each promotion drains the consumer's wgmmas: charged as about one step
  // of K per span. Since 6a2c972 (the accumulator no longer zeroed, see the
  // template) a promoted 64 x 192 tile runs within a few percent of the same
  // tile unpromoted (bench/results/2026-11-30-gemm-fp8-promotion-6a2c972.md,
  // "Where the promoted fp8 kernels' time went"), so this overcharges; it is
  // kept because every unsplit fp8 config at such K promotes alike (the
  // charge moves them together) and it ranks two slices of K per stage,
  // half the steps per span, below one, as measured.
  const double promotion = c.promote ? PromoteSteps(p, c) / (PromoteSteps(p, c) + 1.0) : 1.0;
  const int64_t step = int64_t{BlockK(p)} * c.k_rows;
  const double k_padded = static_cast<double>(CeilDiv(p.k(), step) * step);
  const double unit_flops = 2.0 * c.block_m * c.block_n * k_padded / c.split_k;
  const double rate =
      (GemmIsFp8(p) ? 2 : 1) * kWgmmaTflopsPerSm * tile_efficiency * consumer_efficiency * pipelining * promotion;
  double compute_us = waves * unit_flops / (rate * 1e6);
  // One fp32 partial tile's trip through L2.
  const double partial_us = 4.0 * c.block_m * c.block_n / (kL2GBpsPerSm * 1e3);
  if (c.split_k > 1) {
    // Every unit writes its fp32 partial tile; the last split of a tile reads
    // the other split_k - 1 back before its epilogue.
    compute_us += (waves + (c.split_k - 1)) * partial_us;
  }
  if (tail > 0) {
    // Likewise for the tail's units: a CTA writes its share of them, the last
    // split of a tile reads the other tail_split - 1 back.
    compute_us += static_cast<double>(tail_rounds + (c.tail_split - 1)) * partial_us;
  }
  // A CTA streams its operands through the ring, each stage refilled about
  // kLoadLatencyUs after it was freed: at most (stages - 1) stages of bytes
  // per latency. This bounds small tiles at small M, where the tensor
  // cores wait on memory; a large tile's compute hides it.
  const double stage_bytes = static_cast<double>(c.k_rows) * (c.block_m + c.block_n) * kRowBytes;
  const double unit_bytes = (c.block_m + c.block_n) * k_padded / c.split_k * OperandBytes(p);
  const double stream_us = waves * unit_bytes / ((c.stages - 1) * stage_bytes / kLoadLatencyUs);
  const double d_bytes = GemmDType(p) == v1::FP32 ? 4 : 2;
  const double bytes = static_cast<double>(GemmBatch(p)) * (OperandBytes(p) * double(p.m() * p.k() + p.n() * p.k()) +
                                                            d_bytes * p.m() * p.n() * (GemmHasC(p) ? 2 : 1));
  // SMs pulling operands: one per work unit (tile, or slice of one).
  const double busy = std::min(1.0, static_cast<double>(tiles * c.split_k) / sms);
  const double memory_us = bytes / (kMemoryTBps * 1e6 * busy);
  return std::max({compute_us, memory_us, stream_us});
}

std::vector<WgmmaTileConfig> WgmmaSearchSpace(const v1::GemmProblem& p, const DeviceInfo& d,
                                              const GemmSpaceOptions& options) {
  // The knobs the model cannot rank, tried on the first `tried` configs: the
  // raster group (where there are more tile rows than the smallest group),
  // and two slices of K per stage with half the stages.
  auto with_knobs_to_measure = [&](std::vector<WgmmaTileConfig> configs, size_t tried) {
    const size_t n = std::min(configs.size(), tried);
    // Two configs may meet in one variant (4 and 5 stages both halve to 2).
    auto add = [&configs](const WgmmaTileConfig& c) {
      if (std::find(configs.begin(), configs.end(), c) == configs.end()) configs.push_back(c);
    };
    for (size_t i = 0; i < n; ++i) {
      if (configs[i].split_k > 1) continue;
      if (TileRowUnits(p, configs[i]) > kRasterGroups[0]) {
        for (int group_m : kRasterGroups) {
          WgmmaTileConfig c = configs[i];
          c.group_m = group_m;
          add(c);
        }
      }
      WgmmaTileConfig deep = configs[i];
      deep.k_rows = 2;
      deep.stages = configs[i].stages / 2;
      if (CanImplementWgmma(p, deep, d).ok()) add(deep);
    }
    return configs;
  };
  // The tail split, where the last wave of tiles leaves SMs idle: offered on
  // the first `tried` unsplit cooperative configs (in the order given) with
  // the split the model likes best, if it likes it enough. Its partials'
  // trip through L2 is the model's split-K assumption again, so the twins are
  // added beside their configs, not ranked against them.
  auto with_tail_splits = [&](std::vector<WgmmaTileConfig> configs, size_t tried) {
    const size_t n = configs.size();
    size_t offered = 0;
    for (size_t i = 0; i < n && offered < tried; ++i) {
      const WgmmaTileConfig base = configs[i];
      if (base.split_k > 1 || base.pingpong || base.swap_ab) continue;
      ++offered;
      const double base_us = WgmmaModelTimeUs(p, base, d);
      std::optional<std::pair<double, WgmmaTileConfig>> best;
      for (int split = 2; split <= kMaxTailSplit; ++split) {
        WgmmaTileConfig c = base;
        c.tail_split = split;
        if (!CanImplementWgmma(p, c, d).ok() || TailTiles(p, c, d) == 0) continue;
        const double us = WgmmaModelTimeUs(p, c, d);
        if (!best || us < best->first) best.emplace(us, c);
      }
      if (best && best->first <= (1 - kMinTailSplitGain) * base_us &&
          std::find(configs.begin(), configs.end(), best->second) == configs.end()) {
        configs.push_back(best->second);
      }
    }
    return configs;
  };
  std::vector<std::pair<double, WgmmaTileConfig>> whole, split, swapped;
  const int64_t smem_optin = SmemOptin(d);
  std::vector<WgmmaTileConfig> grid = Grid(smem_optin);
  for (const WgmmaTileConfig& c : SwapGrid(p, smem_optin)) grid.push_back(c);
  for (const WgmmaTileConfig& c : grid) {
    if (!CanImplementWgmma(p, c, d).ok()) continue;
    // Promotion only where one accumulator would otherwise span too much of K.
    if (c.promote && FitsOneFp8Accumulator(p, c)) continue;
    // Split-K only pays where the tiles alone leave SMs idle.
    if (options.pruned && c.split_k > 1 && TileUnits(p, c) * GemmBatch(p) >= std::max(d.sm_count, 1)) continue;
    auto& list = c.swap_ab ? swapped : c.split_k > 1 ? split : whole;
    list.emplace_back(options.pruned ? WgmmaModelTimeUs(p, c, d) : 0.0, c);
  }
  if (!options.pruned) {
    whole.insert(whole.end(), split.begin(), split.end());
    whole.insert(whole.end(), swapped.begin(), swapped.end());
    std::vector<WgmmaTileConfig> all = PruneByModel(std::move(whole), options);
    const size_t every = all.size();
    return with_tail_splits(with_knobs_to_measure(std::move(all), every), SIZE_MAX);
  }
  std::vector<WgmmaTileConfig> space = with_tail_splits(
      with_knobs_to_measure(PruneByModel(std::move(whole), options), kUnrankedKnobsTried), kTailSplitTried);
  // The model's split-K term (the partials' trip through L2) is an
  // assumption not yet checked on a GPU, so split-K may not crowd out the
  // unsplit configs: those are pruned as before, and the best split-K
  // configs (half as many) come after them. The swapped tiles come last,
  // pruned among themselves to half as many again as the unsplit (all 24 by
  // default): at the few rows they serve every config is bound by memory,
  // where the model ranks little beyond idle SMs, and they are quick to
  // time.
  GemmSpaceOptions half = options;
  half.max_candidates = std::max(1, options.max_candidates / 2);
  for (const WgmmaTileConfig& c : PruneByModel(std::move(split), half)) space.push_back(c);
  GemmSpaceOptions wide = options;
  wide.max_candidates = options.max_candidates * 3 / 2;
  for (const WgmmaTileConfig& c : PruneByModel(std::move(swapped), wide)) space.push_back(c);
  return space;
}

absl::StatusOr<LaunchRecipe> WgmmaLaunchRecipe(const v1::GemmProblem& p, const WgmmaTileConfig& c,
                                               const DeviceInfo& d) {
  if (absl::Status s = CanImplementWgmma(p, c, d); !s.ok()) return s;
  // wgmma and setmaxnreg exist only in the arch-specific sm_90a target.
  absl::StatusOr<LaunchRecipe> recipe = GemmTemplateRecipe(kTemplateId, "sm_90a");
  if (!recipe.ok()) return recipe.status();
  KernelLaunch k;
  const absl::Status named = KernelInstance("gemm_wgmma")
                                 .Type("TAB", GemmIsFp8(p) ? "ktune::e4m3" : "ktune::bf16")
                                 .Type("TD", GemmDType(p) == v1::FP32 ? "float" : "ktune::bf16")
                                 .Int("EPI", GemmEpilogueCode(p))
                                 .Bool("HAS_C", GemmHasC(p))
                                 .Int("BM", c.block_m)
                                 .Int("BN", c.block_n)
                                 .Int("CONSUMERS", c.consumers)
                                 .Bool("PINGPONG", c.pingpong)
                                 .Int("CLUSTER_M", c.cluster_m)
                                 .Int("STAGES", c.stages)
                                 .Int("GROUP_M", c.group_m)
                                 .Int("SPLIT_K", c.split_k)
                                 .Int("K_ROWS", c.k_rows)
                                 .Int("PROMOTE_STEPS", PromoteSteps(p, c))
                                 .Bool("B_KN", !GemmBIsNK(p))
                                 .Bool("SWAP_AB", c.swap_ab)
                                 .Int("TAIL_SPLIT", c.tail_split)
                                 .NameInto(&k);
  if (!named.ok()) return named;
  k.grid = {static_cast<uint32_t>(GridX(p, c, d)), 1, static_cast<uint32_t>(GemmBatch(p))};
  k.block = {static_cast<uint32_t>(c.threads()), 1, 1};
  k.dynamic_smem_bytes = static_cast<uint32_t>(WgmmaSharedMemoryBytes(c));
  // The kernel's parameters (gemm_wgmma.cuh): two TMA descriptors, then C,
  // D, bias, its M, N and K, alpha, beta, the workspace and the scales.
  // Under swap_ab the kernel's A is the problem's B and its B the problem's
  // A; its M and N are the problem's N and M.
  std::string kernel_a = absl::StrCat("tma_a:", BlockK(p), "x", c.block_m);
  std::string kernel_b = GemmBIsNK(p) ? absl::StrCat("tma_b:", BlockK(p), "x", c.block_n / c.cluster_m)
                                      : absl::StrCat("tma_b:", kNBlock, "x", BlockK(p));
  if (c.swap_ab) {
    kernel_a = absl::StrCat("tma_b:", BlockK(p), "x", c.block_m);
    kernel_b = absl::StrCat("tma_a:", BlockK(p), "x", c.block_n);
  }
  const char* kernel_m = c.swap_ab ? "N" : "M";
  const char* kernel_n = c.swap_ab ? "M" : "N";
  k.params = {std::move(kernel_a), std::move(kernel_b)};
  for (const char* param : {"c", "d", "bias", kernel_m, kernel_n, "K", "alpha", "beta", "ws", "a_scale", "b_scale"}) {
    k.params.emplace_back(param);
  }
  recipe->kernels.push_back(std::move(k));
  recipe->workspace_bytes = SplitKWorkspaceBytes(p, c, d);
  recipe->workspace_zeroed = recipe->workspace_bytes > 0;  // the arrival counters
  if (absl::Status s = WriteGemmInterface(p, &*recipe); !s.ok()) return s;
  return recipe;
}

absl::StatusOr<TmaParam> ParseTmaParam(const std::string& param) {
  if (param.rfind("tma_", 0) != 0) return absl::NotFoundError(absl::StrCat("'", param, "' is not a TMA parameter"));
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("TMA parameter '", param,
                     "': expected tma_a:INNERxOUTER or tma_b:INNERxOUTER, INNER 64 or 128 (one 128-byte row), "
                     "OUTER 1 to 256"));
  };
  if (param.size() < 7 || (param[4] != 'a' && param[4] != 'b') || param[5] != ':') return bad();
  std::vector<std::string> box = absl::StrSplit(param.substr(6), 'x');
  TmaParam t;
  t.operand = param[4];
  if (box.size() != 2 || !absl::SimpleAtoi(box[0], &t.box_inner) || !absl::SimpleAtoi(box[1], &t.box_outer)) {
    return bad();
  }
  if ((t.box_inner != 64 && t.box_inner != 128) || t.box_outer < 1 || t.box_outer > 256) return bad();
  return t;
}

absl::StatusOr<TmaTensor> GemmTmaTensor(const v1::GemmProblem& p, const std::string& param, DevicePtr a, DevicePtr b) {
  absl::StatusOr<TmaParam> t = ParseTmaParam(param);
  if (!t.ok()) return t.status();
  // The box's inner extent is one 128-byte row: of K, or of N for B as [K, N].
  const bool b_kn = t->operand == 'b' && !GemmBIsNK(p);
  if (t->box_inner * OperandBytes(p) != kRowBytes) {
    return absl::InvalidArgumentError(absl::StrCat("TMA parameter '", param, "': a box of ", t->box_inner,
                                                   " elements of ", b_kn ? "N" : "K",
                                                   " is not one 128-byte row of this problem's operands"));
  }
  TmaTensor tensor;
  tensor.element_bytes = static_cast<uint32_t>(OperandBytes(p));
  tensor.base = t->operand == 'a' ? a : b;
  tensor.inner = static_cast<uint64_t>(b_kn ? p.n() : p.k());
  tensor.rows = static_cast<uint64_t>(t->operand == 'a' ? p.m() : b_kn ? p.k() : p.n());
  tensor.batch = static_cast<uint64_t>(GemmBatch(p));
  tensor.row_pitch = tensor.inner;
  tensor.batch_pitch = tensor.rows * tensor.inner;
  tensor.box_inner = static_cast<uint32_t>(t->box_inner);
  tensor.box_rows = static_cast<uint32_t>(t->box_outer);
  return tensor;
}

}  // namespace ktune
