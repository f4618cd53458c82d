#include "tuner/norm/norm_space.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/compile/kernel_instance.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/norm/norm_interface.h"

namespace ktune {
namespace {

// ---- the register model --------------------------------------------------------
// The kernel keeps its row fragments packed in 32-bit registers. Its register
// need is estimated as a fixed overhead (pointers, indices, loop state,
// conversion temporaries) plus the packed words it holds across the reduction;
// the estimate sets the occupancy target CTAS_PER_SM, which the template
// passes to __launch_bounds__ so ptxas keeps to it, and which sizes pipelined
// grids to one wave. tests/tuner/nvrtc_compile_all_test.cc checks that no
// config of the space spills under this model.
constexpr int kRegisterOverhead = 40;
// At most this many packed words live per thread (x, the next row's x, w):
// beyond it the estimate above stops being reliable and occupancy collapses.
constexpr int kMaxLiveWords = 96;
// LayerNorm forward: at 96 words ptxas spilled a few bytes (4096 x 3000 bf16,
// 12 chunks, when bf16 x was still held unpacked).
constexpr int kMaxLiveWordsLayerNormForward = 88;
// The forward at PIPELINE 1 loads w (and b) as y is stored. ptxas hoists
// those loads for all chunks, so beyond this many chunks of LayerNorm (w and
// b) it spilled at the occupancy the model targets (compile-all test,
// 2026-11-29: 12 and 16 chunks); the H200 winners use at most 8.
constexpr int kMaxLateParamChunksLayerNorm = 8;
// Shared memory an SM gives its CTAs, and what each CTA reserves besides its
// own (sm_80+: 1 KiB per CTA); used with the device's opt-in limit per CTA.
constexpr int kSmemReservedPerCta = 1024;
// The kernels' static shared memory besides the partials: the cross-warp
// scratch of common/reduce.cuh, 2 * 32 floats at most.
constexpr int64_t kStaticScratchBound = 2 * 32 * 4;
constexpr int kMaxCtasPerSm = 32;    // sm_50 and later
constexpr int kSmSubPartitions = 4;  // register file split across 4 schedulers
constexpr int kMaxRegistersPerThread = 255;
constexpr int kMinThreadsPerRow = 4;
constexpr int64_t kMaxSplitSize = 4096;  // rows per backward CTA
// The most rows for which the pruned backward space offers one CTA over all
// of them (SplitSizes). On an H100 (bench/results/2026-12-07-norm-issue34-h100-a4086b4.md)
// the single CTA won at 1 and 4 rows x 4096 (2.9 and 4.0 us, one launch; 1.8 us
// at 1 row once dw was stored in vectors, bench/results/2026-12-08-norm-issue34-h100-44b385d.md)
// and a split grid with the reduce at 16 (4.3 us); at 64 x 4096 bf16 one SM moves
// 1.5 MiB and is not expected to win, but the tuner, not this bound, decides
// (the bound only keeps the space small).
constexpr int64_t kSingleCtaMaxRows = 64;
// The most rows for which the pruned backward space (on sm_90) also offers
// one cluster over all of them, up to 8 CTAs of a row or more each
// (SingleClusterConfig): a decode step's rows on 8 SMs in one launch. On an
// H100 (bench/results/2026-12-08-norm-issue34-h100-44b385d.md) it won at 4
// rows (RMSNorm 3.45 us at 4 x 4096, where one CTA had taken 3.96) and at
// LayerNorm 16 x 4096; at 16-256 rows otherwise a split grid with the reduce
// won. Past 256 rows (32 per CTA) it is not offered; below, the tuner decides
// (up to 8 candidates more per tune).
constexpr int64_t kSingleClusterMaxRows = 256;
constexpr int kMaxCluster = 8;  // portable cluster size (norm/*_bwd.cuh take 2, 4 or 8)
constexpr int kWarpSizeT = 32;

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t NextPowerOfTwo(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsNormDType(DType d) { return d == DType::kBF16 || d == DType::kFP16 || d == DType::kFP32; }

// The fp8 e4m3 output of the RMSNorm forward (its conversion needs sm_89).
bool IsFp8Output(const NormProblem& p) { return p.output_dtype == DType::kFP8E4M3; }

// The widest vector (power of two, at most 16 bytes of input) dividing N.
int MaxVec(const NormProblem& p) {
  int vec = 16 / DTypeBytes(p.input_dtype);
  while (vec > 1 && p.n % vec != 0) vec /= 2;
  return vec;
}

// 32-bit registers one vector of `dtype` occupies while held. bf16 and fp32
// stay packed when the kernel converts each element at most twice (through
// different instructions: see common/types.cuh, ptxas merges identical ones).
// fp16 has one conversion instruction only, ptxas merges its uses and so holds
// each element as a float: one register per element. LayerNorm forward
// converts x three times (mean, variance, output) through three different
// sequences (get, get_alt2, get_alt), so its bf16 x stays packed too.
int WordsPerVector(DType dtype, int vec, bool unpacked) {
  if (dtype == DType::kFP16 || (unpacked && dtype == DType::kBF16)) return vec;
  return std::max(1, vec * DTypeBytes(dtype) / 4);
}

bool IsForward(const NormProblem& p) { return p.pass == NormPass::kForward; }
bool IsLayerNorm(const NormProblem& p) { return p.op == NormOp::kLayerNorm; }

// fp32 partial sums the backward keeps per column: dw and (LayerNorm) db.
int GradientParts(const NormProblem& p) {
  if (IsForward(p)) return 0;
  return (p.has_weight ? 1 : 0) + (IsLayerNorm(p) && p.has_bias ? 1 : 0);
}

// Forward, persistent, one row block per CTA: whether the config tiles the
// problem exactly (M % XBLOCK == 0, N == R_BLOCK), so the kernel is compiled
// without bounds checks (the template's FULL_TILES). Those checks are
// branches that ptxas does not hoist loads above; without them it issues x
// and w (and b) first. Measured on the H200 at fixed configs, 32768 x 1024
// (bench/results/2026-11-30-norms-gemm-6cf1718.md, "Norm forward: FULL_TILES", 1843eff):
// RMSNorm +1-3%, LayerNorm -1.5 to +1%. Derived, not a knob, and only where
// measured: rows of at most 2 KB (longer ones already reach 96-98% of the
// ceiling, and hoisting makes w and b live across the reductions, which
// LiveWordsWith counts: at 8 KB rows it cost occupancy and spilled in the
// compile-all test), one row block per CTA (not the pipelined or looped
// variants).
// Why: bench/results/decisions/layernorm-fwd-32768x1024.md
bool FullTiles(const NormProblem& p, const NormConfig& c) {
  constexpr int64_t kMaxRowBytes = 2048;
  return IsForward(p) && c.persistent && c.pipeline_depth == 1 && p.m % c.x_block == 0 && p.n == c.r_block &&
         int64_t{p.n} * DTypeBytes(p.input_dtype) <= kMaxRowBytes;
}

// Packed words live across the reduction (persistent) or per pass (looped);
// `smem_partials`: the backward's fp32 partials are in shared memory, only one
// vector of each in registers at a time.
int LiveWordsWith(const NormProblem& p, const NormConfig& c, bool smem_partials) {
  const bool ln_fwd = IsLayerNorm(p) && IsForward(p);
  const int x_words = c.chunks() * WordsPerVector(p.input_dtype, c.vec, false);
  const int w_words = c.chunks() * WordsPerVector(p.weight_dtype, c.vec, false);
  const int params = (p.has_weight ? w_words : 0) + (ln_fwd && p.has_bias ? w_words : 0);
  if (p.residual) {
    // Forward: the residual's chunks are loaded beside x's (and the next row
    // block's beside its x when pipelined) and added: at 1 word per x word
    // ptxas spilled 4-12 bytes (compile-all test, 65536 x 2048 bf16, 8
    // chunks), so persistent kernels count 2. Backward: dresidual's vectors,
    // loaded as dx is stored, which ptxas hoists like w's (4 bytes spilled
    // at 1000 x 3000, 3 chunks, pipelined, without them).
    NormProblem plain = p;
    plain.residual = false;
    const int extra = IsForward(p) && c.persistent ? 2 * x_words : x_words;
    return LiveWordsWith(plain, c, smem_partials) + extra;
  }
  if (IsForward(p)) {
    if (c.persistent && c.pipeline_depth == 2) return 2 * x_words + params;  // w, b kept
    if (c.persistent) {
      // One vector of w (and b) at a time, loaded as y is stored. fp32 x
      // (no packed conversions to share) needed a word more per chunk: at 8
      // chunks ptxas spilled under the bare estimate (compile-all test).
      const int w_vec = WordsPerVector(p.weight_dtype, c.vec, false);
      const int fp32_extra = p.input_dtype == DType::kFP32 ? c.chunks() : 0;
      if (FullTiles(p, c)) return x_words + fp32_extra + params;  // w, b hoisted above the sums
      return x_words + fp32_extra + (p.has_weight ? w_vec : 0) + (ln_fwd && p.has_bias ? w_vec : 0);
    }
    return x_words + params;  // pass 2 holds x, w and b chunks at once
  }
  // Backward: x and dy (twice when pipelined), w, and the fp32 column partials.
  const int partials = GradientParts(p) * (smem_partials ? 1 : c.chunks()) * c.vec;
  if (c.persistent) return c.pipeline_depth * 2 * x_words + params + partials;
  return 2 * x_words + params + 2 * c.vec;
}

// CTAs per SM that `live_words` of registers and `smem` bytes of shared memory
// per CTA allow (0: not even one). Registers are allocated per warp in units
// of 8 per thread, and a warp's registers come from one of the 4
// sub-partitions, each holding a quarter of the file.
int CtasPerSmFor(int live_words, int64_t smem, const NormConfig& c, const DeviceInfo& d) {
  const int regs = ((kRegisterOverhead + live_words + 7) / 8) * 8;
  if (regs > kMaxRegistersPerThread + 1) return 0;
  // A DeviceInfo decoded from an older peer may lack the limits: use sm_80+'s.
  const int regs_per_sm = d.regs_per_sm > 0 ? d.regs_per_sm : 65536;
  const int threads_per_sm = d.max_threads_per_sm > 0 ? d.max_threads_per_sm : 2048;
  const int warps_per_sub = regs_per_sm / kSmSubPartitions / (regs * kWarpSizeT);
  const int by_regs = kSmSubPartitions * warps_per_sub / c.num_warps;
  const int by_threads = threads_per_sm / c.threads();
  int by_smem = kMaxCtasPerSm;
  if (smem > 0) {
    const int64_t optin = d.max_smem_per_block_optin > 0 ? d.max_smem_per_block_optin : 48 << 10;
    const int64_t total = smem + kStaticScratchBound;  // with the reduction scratch
    by_smem = total > optin ? 0 : static_cast<int>((optin + kSmemReservedPerCta) / (total + kSmemReservedPerCta));
  }
  return std::min({kMaxCtasPerSm, by_threads, by_regs, by_smem});
}

// Backward, persistent, one row per CTA (no cross-group sum), with partials:
// the fp32 partials move to shared memory when registers cannot hold them next
// to x, dy and w (long rows: LayerNorm N >= 8192 at 512 threads). Derived
// from the config, not a knob: where registers fit they are never slower.
bool SmemPartials(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  if (IsForward(p) || !c.persistent || c.x_block != 1 || GradientParts(p) == 0) return false;
  return LiveWordsWith(p, c, false) > kMaxLiveWords || CtasPerSmFor(LiveWordsWith(p, c, false), 0, c, d) < 1;
}

// Dynamic shared memory of the fused backward: (PARTS, CHUNKS, VEC, THREADS)
// f32, the partials themselves (SmemPartials) or, in a cluster, where they
// are staged for the cluster's sum.
int64_t PartialsSmemBytes(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  if (!SmemPartials(p, c, d) && c.cluster <= 1) return 0;
  return int64_t{GradientParts(p)} * c.chunks() * c.vec * c.threads() * int64_t{sizeof(float)};
}

int LiveWords(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  return LiveWordsWith(p, c, SmemPartials(p, c, d));
}

int CtasPerSm(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  return CtasPerSmFor(LiveWords(p, c, d), PartialsSmemBytes(p, c, d), c, d);
}

int64_t RowBlocks(const NormProblem& p, const NormConfig& c) { return CeilDiv(p.m, c.x_block); }

// LayerNorm backward, persistent, unpipelined, on sm_90: whether each CTA
// prefetches its next row block into L2 with the bulk-copy engine (the
// template's PREFETCH_L2). Derived, not a knob, from fixed-config runs on the
// H200 (bench/results/2026-11-29-norm-fwd-l2-evict-last.md): LayerNorm +8-20%
// (8192 x 16384 at 1 CTA per SM: 3.34 ->
// 3.69 TB/s; 32768 x 1024 at 10: +8%); RMSNorm, with half the work per row,
// -2 to +1%, so not there. The pipelined variant, where registers allow it,
// is unchanged and remains a candidate. The bulk prefetch moves 16-byte
// units, so rows must be too.
bool PrefetchNextRowsToL2(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  if (!IsLayerNorm(p) || IsForward(p) || !c.persistent || c.pipeline_depth != 1 || d.cc_major < 9) {
    return false;
  }
  return int64_t{p.n} * DTypeBytes(p.input_dtype) % 16 == 0 && c.split_size > c.x_block;
}

// Forward, persistent: whether x is loaded with an L2 evict_last policy
// (LoadHint::kKeepL2, the template's X_KEEP_L2). Derived, not a knob, from the
// same fixed-config runs on the H200
// (bench/results/2026-11-29-norm-fwd-l2-evict-last.md): +3-6% at rows of 8 KB and
// more, +3% for one-wave pipelined grids, 1-2.5% slower for 2 KB rows launched
// a CTA per row block. 4 KB rows were not among them; with the policy the
// bench's 65536 x 2048 forwards ran 4.22 (RMSNorm) and 4.21 TB/s (LayerNorm)
// at 10e9d3c, against 4.16 and 4.04 at 4611260
// (bench/results/2026-11-29-norm-family-10e9d3c.md,
// bench/results/2026-11-29-norm-family-4611260.md). (cache_hint needs sm_80, as every norm
// kernel does.)
// Why: bench/results/decisions/norm-memory-hints.md
bool KeepXInL2(const NormProblem& p, const NormConfig& c) {
  if (!IsForward(p) || !c.persistent) return false;
  constexpr int64_t kMinRowBytes = 4096;
  return c.pipeline_depth == 2 || int64_t{p.n} * DTypeBytes(p.input_dtype) >= kMinRowBytes;
}

// Backward: rows of the fp32 workspace (the reduce kernel's P), one per CTA
// of the fused kernel, or per cluster of them.
int64_t PartialRows(const NormProblem& p, const NormConfig& c) {
  return CeilDiv(CeilDiv(p.m, c.split_size), std::max(c.cluster, 1));
}

// Backward: a persistent grid of one CTA over every row (SPLIT_SIZE >= M), or
// of one cluster whose CTAs cover every row (CLUSTER * SPLIT_SIZE >= M), with
// partials to sum holds the whole sums, so it writes dw and db itself: the
// *_bwd_single_cta and *_bwd_single_cluster kernels, no workspace and no
// reduce kernel (norm/norm_bwd.cuh, DIRECT_GRADS).
bool WritesGradientsItself(const NormProblem& p, const NormConfig& c) {
  return !IsForward(p) && GradientParts(p) > 0 && c.persistent && c.split_size >= 1 &&
         CeilDiv(p.m, c.split_size) <= std::max(c.cluster, 1);
}

int64_t GridSize(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  // Backward: one CTA per SPLIT_SIZE rows, padded to whole clusters.
  if (!IsForward(p)) return PartialRows(p, c) * std::max(c.cluster, 1);
  const int64_t row_blocks = RowBlocks(p, c);
  if (c.pipeline_depth == 1 || d.sm_count <= 0) return row_blocks;
  return std::min<int64_t>(row_blocks, int64_t{d.sm_count} * CtasPerSm(p, c, d));
}

uint64_t WorkspaceBytes(const NormProblem& p, const NormConfig& c) {
  if (IsForward(p) || GradientParts(p) == 0 || WritesGradientsItself(p, c)) return 0;
  return static_cast<uint64_t>(GradientParts(p)) * PartialRows(p, c) * p.n * sizeof(float);
}

NormConfig MakeConfig(int num_warps, int threads_per_row, int vec, int chunks, bool persistent, int pipeline,
                      int split = 0) {
  NormConfig c;
  c.num_warps = num_warps;
  c.x_block = num_warps * kWarpSizeT / threads_per_row;
  c.vec = vec;
  c.r_block = threads_per_row * vec * chunks;
  c.persistent = persistent;
  c.pipeline_depth = pipeline;
  c.split_size = split;
  return c;
}

// ---- the reduce kernel of the backward -------------------------------------------
// norm_bwd_reduce's geometry follows from (P, N): 32 consecutive columns per
// warp row (128-byte coalesced loads), and enough thread rows that each sums
// about 8 partials, all 8 loads in flight; reading P * N * 4 bytes takes a few
// microseconds at most for the spaces' splits, so it is not searched.
struct ReduceGeometry {
  int threads_x = 32;
  int threads_y = 1;
};

ReduceGeometry ReduceGeometryFor(int64_t partial_rows) {
  ReduceGeometry g;
  g.threads_y = static_cast<int>(std::clamp<int64_t>(NextPowerOfTwo(CeilDiv(partial_rows, 8)), 1, 32));
  return g;
}

// SPLIT_SIZE values for a backward geometry: powers of two (multiples of
// XBLOCK). Pruned: the split giving about one full wave of CTAs (the largest
// with P >= SMs * CTAs per SM, so each CTA amortizes its partials over the
// most rows while every SM is busy), its half (two waves, more latency hiding)
// and its double (fewer partials), dropping those whose workspace traffic
// (written and read back) exceeds a quarter of the op's own bytes while a
// cheaper one remains. Only the half and the one-wave split are kept when
// both pass (the double rarely won and doubled the space), except where the
// double still fills a wave (below).
std::vector<int> SplitSizes(const NormProblem& p, const NormConfig& c, const DeviceInfo& d, bool pruned) {
  std::vector<int> all;
  const int64_t top = std::min<int64_t>(NextPowerOfTwo(p.m), kMaxSplitSize);
  for (int64_t s = c.x_block; s <= std::max<int64_t>(top, c.x_block); s *= 2) {
    all.push_back(static_cast<int>(s));
  }
  if (!pruned) return all;
  const int64_t wave = int64_t{std::max(d.sm_count, 1)} * std::max(1, CtasPerSm(p, c, d));
  int one_wave = all.front();
  for (int s : all) {
    if (CeilDiv(p.m, s) >= wave) one_wave = s;
  }
  std::vector<int> out;
  const int64_t budget = MinimumBytes(p) / 4;
  for (int s : {one_wave / 2, one_wave, one_wave * 2}) {
    if (s < c.x_block || s > all.back()) continue;
    NormConfig t = c;
    t.split_size = s;
    if (2 * static_cast<int64_t>(WorkspaceBytes(p, t)) > budget && s != all.back()) {
      // Keep it only if no larger split is left to try.
      if (s < one_wave * 2 && one_wave * 2 <= all.back()) continue;
    }
    out.push_back(s);
  }
  if (out.empty()) out.push_back(one_wave);
  if (out.size() > 2) out.resize(2);
  // With P in [wave, 2 * wave) the "one-wave" split launches up to two waves
  // of CTAs, and its double nearly one: that double joins the candidates when
  // its grid fills at least 90% of a wave (H200, fixed configs,
  // bench/results/2026-11-29-norm-fwd-l2-evict-last.md: LayerNorm
  // 8192 x 16384, one CTA per SM, split 32's 256 CTAs ran 3.48 TB/s and split
  // 64's 128 ran 3.69; RMSNorm 16384 x 8192, 512 CTAs for 264 slots 3.84, 256
  // of them 3.90). First in the list: the pipelined variant stays at the
  // one-wave split, the last.
  const int twice = one_wave * 2;
  if (twice <= all.back() && CeilDiv(p.m, twice) * 10 >= wave * 9 &&
      std::find(out.begin(), out.end(), twice) == out.end()) {
    out.insert(out.begin(), twice);
  }
  // A few rows (a decode step's backward): also one CTA over all of them,
  // which writes the gradients itself (WritesGradientsItself), first, so the
  // one-wave split stays last (the heuristic's pick; add_backward pipelines
  // both). Beyond kSingleCtaMaxRows rows one SM's bandwidth is the bound.
  if (all.back() >= p.m && p.m <= kSingleCtaMaxRows && std::find(out.begin(), out.end(), all.back()) == out.end()) {
    out.insert(out.begin(), all.back());
  }
  return out;
}

// A few rows on sm_90 (2..kSingleClusterMaxRows): `c`, one row per CTA, as
// one cluster over every row (WritesGradientsItself), as many CTAs as rows up
// to kMaxCluster, SPLIT_SIZE the fewest rows per CTA that cover M. Nothing
// for other problems, devices or configs.
std::optional<NormConfig> SingleClusterConfig(const NormProblem& p, NormConfig c, const DeviceInfo& d) {
  if (IsForward(p) || GradientParts(p) == 0 || !c.persistent || c.x_block != 1 || d.cc_major < 9 || p.m < 2 ||
      p.m > kSingleClusterMaxRows) {
    return std::nullopt;
  }
  int cluster = 1;
  while (cluster * 2 <= std::min<int64_t>(p.m, kMaxCluster)) cluster *= 2;
  c.cluster = cluster;
  c.split_size = static_cast<int>(NextPowerOfTwo(CeilDiv(p.m, cluster)));
  return c;
}

}  // namespace

absl::Status CanImplement(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(ToString(c), ": ", why));
  };
  if (!IsNormDType(p.input_dtype) || !(IsNormDType(p.output_dtype) || IsFp8Output(p)) || !IsNormDType(p.weight_dtype)) {
    return fail("dtypes must be bf16, fp16 or fp32 (fp8e4m3 output: RMSNorm forward)");
  }
  if (IsFp8Output(p) && (IsLayerNorm(p) || !IsForward(p))) return fail("fp8e4m3 output is the RMSNorm forward's");
  if (IsFp8Output(p) && (d.cc_major * 10 + d.cc_minor) < 89) {
    return fail(absl::StrCat("fp8e4m3 output needs sm_89 or newer, device is ", Arch(d)));
  }
  if (p.residual && IsLayerNorm(p)) return fail("the fused residual add is RMSNorm's");
  if (p.weight_offset && !p.has_weight) return fail("the weight offset needs a weight");
  if (p.weight_dtype != p.input_dtype && p.weight_dtype != DType::kFP32) {
    return fail("the weight dtype must be the input's or fp32");
  }
  if (p.has_bias && !IsLayerNorm(p)) return fail("RMSNorm has no bias");
  if (p.m < 1 || p.n < 1 || p.n > kMaxNormN || p.m > kMaxNormM) {
    return fail("M and N must be in range (ValidateNormProblem)");
  }
  if (d.cc_major < 8) return fail(absl::StrCat("needs sm_80 or newer, device is ", Arch(d)));
  if (!IsPowerOfTwo(c.num_warps) || c.num_warps > 32) {
    return fail("num_warps must be a power of two in [1, 32]");
  }
  if (c.threads() > 1024) return fail("more than 1024 threads per CTA");
  if (!IsPowerOfTwo(c.x_block) || c.x_block > c.threads() / kMinThreadsPerRow) {
    return fail(absl::StrCat("x_block must be a power of two leaving >= ", kMinThreadsPerRow, " threads per row"));
  }
  if (!IsPowerOfTwo(c.vec) || c.vec * DTypeBytes(p.input_dtype) > 16) {
    return fail("vec must be a power of two of at most 16 bytes of input");
  }
  if (p.n % c.vec != 0) return fail(absl::StrCat("N = ", p.n, " is not a multiple of vec"));
  const int per_pass = c.threads_per_row() * c.vec;
  if (c.r_block <= 0 || c.r_block % per_pass != 0) {
    return fail("r_block must be threads_per_row * vec * chunks");
  }
  if (c.persistent && c.r_block < p.n) return fail("persistent needs r_block >= N");
  if (c.pipeline_depth != 1 && c.pipeline_depth != 2) return fail("pipeline_depth is 1 or 2");
  if (!c.persistent && c.pipeline_depth != 1) return fail("the looped variant is not pipelined");
  if (c.reduce_rows != 0 &&
      (IsForward(p) || GradientParts(p) == 0 || !IsPowerOfTwo(c.reduce_rows) || c.reduce_rows > 32)) {
    return fail("reduce_rows is 0, or a power of two <= 32 for a backward with a weight or bias");
  }
  if (c.reduce_rows != 0 && WritesGradientsItself(p, c)) {
    return fail(
        "reduce_rows is 0 for one CTA or cluster over every row: it writes the gradients, no reduce kernel runs");
  }
  if (IsForward(p)) {
    if (c.split_size != 0) return fail("split_size is for the backward pass");
    if (c.cluster != 1) return fail("cluster is for the backward pass");
  } else {
    if (c.split_size < 1 || c.split_size > kMaxSplitSize || !IsPowerOfTwo(c.split_size)) {
      return fail(absl::StrCat("split_size must be a power of two in [1, ", kMaxSplitSize, "]"));
    }
    if (c.split_size % c.x_block != 0) return fail("split_size must be a multiple of x_block");
    if (!c.persistent && c.x_block != 1) return fail("the looped backward is one row at a time");
    if (c.cluster != 1) {
      if (c.cluster < 1 || c.cluster > kMaxCluster || !IsPowerOfTwo(c.cluster)) {
        return fail("cluster must be 1, 2, 4 or 8");
      }
      if (d.cc_major < 9) return fail(absl::StrCat("clusters need sm_90 or newer, device is ", Arch(d)));
      if (GradientParts(p) == 0) return fail("a cluster sums partials: this backward has no weight or bias");
      if (!c.persistent || c.x_block != 1) return fail("clusters are for persistent kernels of one row per CTA");
    }
    // The cross-row-group sum of the partials goes through static shared memory.
    if (c.persistent && c.x_block > 1 && static_cast<int64_t>(c.threads()) * c.vec * 4 > 48 * 1024) {
      return fail("the partials' shared-memory sum needs more than 48 KiB");
    }
  }
  if (IsLayerNorm(p) && IsForward(p) && c.persistent && c.pipeline_depth == 1 && (p.has_weight || p.has_bias) &&
      c.chunks() > kMaxLateParamChunksLayerNorm) {
    return fail(
        absl::StrCat("more than ", kMaxLateParamChunksLayerNorm, " chunks with w and b loaded late (ptxas spills)"));
  }
  const int max_live = IsLayerNorm(p) && IsForward(p) ? kMaxLiveWordsLayerNormForward : kMaxLiveWords;
  if (LiveWords(p, c, d) > max_live) {
    return fail(absl::StrCat(LiveWords(p, c, d), " live registers of data per thread, more than ", max_live));
  }
  if (d.max_threads_per_sm > 0 && c.threads() > d.max_threads_per_sm) {
    return fail("more threads than an SM holds");
  }
  if (const int64_t smem = PartialsSmemBytes(p, c, d) + kStaticScratchBound;
      smem > (d.max_smem_per_block_optin > 0 ? d.max_smem_per_block_optin : 48 << 10)) {
    return fail(absl::StrCat("the partials take ", smem, " bytes of shared memory, more than a CTA gets"));
  }
  if (CtasPerSm(p, c, d) < 1) return fail("estimated registers do not fit one CTA on an SM");
  return absl::OkStatus();
}

std::vector<NormConfig> NormSearchSpace(const NormProblem& p, const DeviceInfo& d) {
  return NormSearchSpace(p, d, SpaceOptions());
}

std::vector<NormConfig> NormSearchSpace(const NormProblem& p, const DeviceInfo& d, const SpaceOptions& options) {
  std::vector<NormConfig> space;
  if (!ValidateNormProblem(p).ok()) return space;
  const bool pruned = options.pruned;
  const bool forward = IsForward(p);
  auto add = [&](const NormConfig& c) {
    if (!CanImplement(p, c, d).ok()) return;
    if (std::find(space.begin(), space.end(), c) != space.end()) return;
    space.push_back(c);
  };
  // Backward: each geometry with its SPLIT_SIZEs; pipelining only where a CTA
  // walks at least two row blocks. Unpruned, each persistent one-row-per-CTA
  // config also in clusters of 2, 4 and 8 (sm_90), where its CTAs make at
  // least two of them. Pruned, none (but a decode step's single cluster,
  // add_backward): on the H200
  // (bench/results/2026-11-30-wgmma-kn-norm-clusters-c3fea25.md, "Norm backward in
  // thread-block clusters", 025dee3) a
  // cluster of 4 ran at 0.60-0.97x its twin at 38 of 44 configs of five
  // backward shapes, and at best 1.03x, never the winner. The losses grow
  // with the split, probably because a one-wave persistent grid in
  // clusters leaves SMs idle where a GPC's free slots do not make a whole
  // cluster, so part of it runs as a second wave (not measured:
  // cudaOccupancyMaxActiveClusters was not queried). The workspace bytes a
  // cluster saves are 1-2% of the op's.
  // Why: bench/results/decisions/norm-bwd-clusters.md
  const std::vector<int> clusters = pruned ? std::vector<int>{} : std::vector<int>{2, 4, 8};
  auto add_with_clusters = [&](NormConfig c) {
    add(c);
    for (int cluster : clusters) {
      c.cluster = cluster;
      if (CeilDiv(p.m, c.split_size) >= 2 * cluster) add(c);  // CanImplement has the rest
    }
  };
  auto add_backward = [&](NormConfig c, bool pipelined) {
    const std::vector<int> splits = SplitSizes(p, c, d, pruned);
    for (int split : splits) {
      c.split_size = split;
      c.pipeline_depth = 1;
      add_with_clusters(c);
      // Pipelined at the one-wave split (the last) and a single CTA's: the
      // candidates where a CTA walks the most row blocks.
      if (pipelined && (split == splits.back() || split >= p.m || !pruned) && split >= 2 * c.x_block &&
          p.m > c.x_block) {
        c.pipeline_depth = 2;
        add_with_clusters(c);
      }
    }
    // A decode step's few rows: also one cluster over all of them, pruned or
    // not (a cluster normally sums the partials of a larger grid, which the
    // pruned space leaves out; here it saves the reduce's launch).
    if (std::optional<NormConfig> one = SingleClusterConfig(p, c, d)) {
      one->pipeline_depth = 1;
      add(*one);
      one->pipeline_depth = 2;
      if (pipelined && one->split_size >= 2) add(*one);
    }
  };
  const int vec = MaxVec(p);
  const int64_t vectors = p.n / vec;             // vectors per row
  const int64_t max_rows = NextPowerOfTwo(p.m);  // more rows per CTA than M idles threads
  // Backward CTAs hold fp32 partials for their columns besides the row: the
  // grid is pruned to 2..32 warps and at most 8 vectors per thread.
  // Pruned, both passes: at most 16 warps (1024-thread CTAs never won on the
  // H200 bench shapes, and dropping them keeps a shape's fwd + bwd tune under
  // 15 s and the compile-all test near 90 s).
  const std::vector<int> warp_counts =
      !pruned ? std::vector<int>{1, 2, 4, 8, 16, 32}
              : (forward ? std::vector<int>{1, 2, 4, 8, 16} : std::vector<int>{2, 4, 8, 16});
  // Forward, pruned: at most 16 vectors per thread (the H200 winners of the
  // bench shapes hold 1 to 8; more only lowers occupancy) - this and the
  // row-block cap below keep a shape's fwd + bwd tune under 15 s.
  const int64_t max_chunks = forward ? (pruned ? 16 : 64) : (pruned ? 8 : 16);
  // Backward, pruned: at most 4 rows per CTA at a time (the winners use 1 to
  // 4; more rows multiply the shared-memory sum of the partials at the end).
  const int64_t max_backward_rows = pruned ? 4 : 1024;

  // Persistent: the row in registers. (warps, threads per row) fixes CHUNKS as
  // the fewest passes covering the row; rows using under half of their last
  // pass's lanes are pruned (idle threads), as are CTAs wider than M needs.
  // Pipelining only differs from depth 1 when a one-wave grid must loop.
  bool row_fits_registers = false;  // some persistent config is implementable at all
  for (int warps : warp_counts) {
    const int threads = warps * kWarpSizeT;
    for (int tpr = threads; tpr >= kMinThreadsPerRow; tpr /= 2) {
      const int64_t chunks = CeilDiv(vectors, tpr);
      if (chunks > max_chunks) continue;
      NormConfig c = MakeConfig(warps, tpr, vec, static_cast<int>(chunks), true, 1,
                                forward          ? 0
                                : tpr == threads ? 1
                                                 : threads / tpr);
      if (!CanImplement(p, c, d).ok()) continue;
      row_fits_registers = true;
      if (pruned && 2 * vectors < chunks * tpr) continue;  // under half the lanes busy
      if (pruned && threads / tpr > max_rows) continue;
      if (!forward && threads / tpr > max_backward_rows) continue;
      if (!forward) {
        add_backward(c, true);
        continue;
      }
      add(c);
      c.pipeline_depth = 2;
      if (!pruned || GridSize(p, c, d) < RowBlocks(p, c)) add(c);
    }
  }
  // Looped: for rows too long for registers, or long enough (>= 8192) that a
  // two-pass kernel with small register footprint may win (forward only: the
  // looped backward re-reads x and dy and accumulates its partials in memory,
  // so it only serves rows that do not fit). One row per CTA.
  const bool long_row = forward && p.n >= 8192;
  if (long_row || !row_fits_registers || !pruned) {
    for (int warps : {4, 8, 16, 32}) {
      const int threads = warps * kWarpSizeT;
      for (int chunks : {1, 2, 4}) {
        const int64_t r_block = int64_t{threads} * vec * chunks;
        if (pruned && r_block >= p.n && long_row) continue;  // one pass: persistent does that better
        NormConfig c = MakeConfig(warps, threads, vec, chunks, false, 1, forward ? 0 : 1);
        if (forward) {
          add(c);
        } else {
          add_backward(c, false);
        }
      }
    }
  }
  if (space.empty()) add(HeuristicNormConfig(p, d));
  return space;
}

NormConfig HeuristicNormConfig(const NormProblem& p, const DeviceInfo& d) {
  const int vec = MaxVec(p);
  const int64_t vectors = CeilDiv(p.n, vec);
  const int64_t max_rows = NextPowerOfTwo(std::max<int64_t>(p.m, 1));
  const bool forward = IsForward(p);
  // With a split, the one-wave SPLIT_SIZE of SplitSizes.
  auto with_split = [&](NormConfig c) {
    if (forward) return c;
    c.split_size = c.x_block;
    const std::vector<int> splits = SplitSizes(p, c, d, /*pruned=*/true);
    c.split_size = splits.back();
    if (!CanImplement(p, c, d).ok()) c.split_size = splits.front();
    return c;
  };
  // Persistent, 256-thread CTAs, and as many 16-byte vectors per thread as the
  // registers allow up to 8 (4 for the backward, which also holds dy and the
  // partials): the loads in flight per SM are what a streaming kernel lives on
  // (on an H200 the tuned forward winners of the bench shapes hold 4 to 8
  // vectors per thread and are within 2% of this choice).
  for (int per_thread : {8, 4, 2, 1}) {
    if (!forward && per_thread > 4) continue;
    int tpr =
        static_cast<int>(std::clamp<int64_t>(NextPowerOfTwo(CeilDiv(vectors, per_thread)), kMinThreadsPerRow, 1024));
    int warps = std::max(tpr, 256) / kWarpSizeT;
    // Fewer rows than a CTA would hold: narrower CTAs, then wider row groups.
    while (warps > 1 && warps * kWarpSizeT > tpr && warps * kWarpSizeT / tpr > max_rows) warps /= 2;
    while (warps * kWarpSizeT / tpr > max_rows) tpr *= 2;
    const int chunks = static_cast<int>(CeilDiv(vectors, tpr));
    const NormConfig c = with_split(MakeConfig(warps, tpr, vec, chunks, true, 1));
    if (CanImplement(p, c, d).ok()) return c;
  }
  // Rows too long for registers: two passes, 512 threads, 2 vectors each.
  NormConfig c = with_split(MakeConfig(16, 512, vec, 2, false, 1));
  if (CanImplement(p, c, d).ok()) return c;
  return with_split(MakeConfig(4, 128, 1, 1, false, 1));  // implementable for every N
}

std::vector<int> ReduceRowsCandidates(const NormProblem& p, const NormConfig& c) {
  if (IsForward(p) || GradientParts(p) == 0 || c.split_size < 1 || WritesGradientsItself(p, c)) return {};
  const int derived = ReduceGeometryFor(PartialRows(p, c)).threads_y;
  std::vector<int> out;
  for (int rows : {derived / 2, derived * 2}) {
    if (rows >= 1 && rows <= 32) out.push_back(rows);
  }
  return out;
}

std::string TemplateTypeName(DType d) {
  switch (d) {
    case DType::kBF16:
      return "ktune::bf16";
    case DType::kFP16:
      return "ktune::fp16";
    case DType::kFP32:
      return "float";
    case DType::kFP8E4M3:
      return "ktune::e4m3";  // an output only (RMSNorm forward)
  }
  return "<unsupported>";
}

std::string NormTemplateId(const NormProblem& p) {
  return absl::StrCat("norm/", p.op == NormOp::kRMSNorm ? "rmsnorm" : "layernorm",
                      p.pass == NormPass::kForward ? "_fwd" : "_bwd");
}

absl::StatusOr<LaunchRecipe> NormLaunchRecipe(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  if (absl::Status s = ValidateNormProblem(p); !s.ok()) return s;
  if (absl::Status s = CanImplement(p, c, d); !s.ok()) return s;
  LaunchRecipe recipe;
  recipe.template_id = NormTemplateId(p);
  absl::StatusOr<const KernelSource*> source = FindKernelSource(recipe.template_id);
  if (!source.ok()) return source.status();
  recipe.template_hash = (*source)->hash;
  recipe.arch = Arch(d);
  recipe.nvrtc_options = {absl::StrCat("--gpu-architecture=", recipe.arch), "-std=c++17"};

  const std::string in = TemplateTypeName(p.input_dtype);
  const std::string out = TemplateTypeName(p.output_dtype);
  const std::string wt = TemplateTypeName(p.weight_dtype);
  const bool ln = IsLayerNorm(p);
  // Every norm kernel waits for the kernel before it (griddepcontrol, sm_90+;
  // common/dependent_launch.cuh), so its launch may overlap that one's tail.
  const bool programmatic_dependent = d.cc_major >= 9;
  KernelLaunch k;
  k.grid = {static_cast<uint32_t>(GridSize(p, c, d)), 1, 1};
  k.block = {static_cast<uint32_t>(c.threads()), 1, 1};
  k.dynamic_smem_bytes = 0;
  k.programmatic_dependent = programmatic_dependent;
  // The arguments every norm kernel template takes by these names.
  auto common = [&](KernelInstance& t) -> KernelInstance& {
    return t.Type("TIn", in)
        .Type("TOut", out)
        .Type("TW", wt)
        .Bool("HAS_WEIGHT", p.has_weight)
        .Int("NUM_WARPS", c.num_warps)
        .Int("VEC", c.vec)
        .Int("CHUNKS", c.chunks())
        .Int("PIPELINE", c.pipeline_depth)
        .Int("CTAS_PER_SM", CtasPerSm(p, c, d));
  };
  // The variants' switches (ktune.proto's NormProblem): RMSNorm takes both,
  // LayerNorm only the weight offset.
  auto variants = [&](KernelInstance& t) -> KernelInstance& {
    if (!ln) t.Bool("RESIDUAL", p.residual);
    return t.Bool("WEIGHT_OFFSET", p.weight_offset);
  };
  if (IsForward(p)) {
    KernelInstance t(ln ? "layernorm_fwd" : "rmsnorm_fwd");
    variants(common(t))
        .Int("XBLOCK", c.x_block)
        .Bool("PERSISTENT", c.persistent)
        .Bool("X_KEEP_L2", KeepXInL2(p, c))
        .Bool("FULL_TILES", FullTiles(p, c));
    if (ln) t.Bool("HAS_BIAS", p.has_bias);
    if (absl::Status s = t.NameInto(&k); !s.ok()) return s;
    // Pointers x, (residual,) w, (b,) y (16-byte aligned), (mean,) rstd
    // (float*, may be null), (scale,); int M, N; float eps.
    k.params = ln ? std::vector<std::string>{"x", "w", "b", "y", "mean", "rstd", "M", "N", "eps"}
                  : std::vector<std::string>{"x", "residual", "w", "y", "rstd", "scale", "M", "N", "eps"};
    recipe.kernels.push_back(std::move(k));
    recipe.workspace_bytes = 0;
    if (absl::Status s = WriteNormInterface(p, {c.vec, 0, 0}, &recipe); !s.ok()) return s;
    return recipe;
  }

  // Backward: the fused kernel, then the partials' reduction. One fused
  // kernel template per op, a cluster variant of each, and a single-CTA and a
  // single-cluster one that write the gradients themselves (no reduction).
  const bool direct = WritesGradientsItself(p, c);
  const char* form =
      c.cluster > 1 ? (direct ? "_bwd_single_cluster" : "_bwd_cluster") : (direct ? "_bwd_single_cta" : "_bwd");
  KernelInstance t(absl::StrCat(ln ? "layernorm" : "rmsnorm", form));
  variants(common(t)).Int("SPLIT_SIZE", c.split_size).Bool("SMEM_PARTIALS", SmemPartials(p, c, d));
  if (ln) t.Bool("HAS_BIAS", p.has_bias);
  if (c.cluster > 1) {
    t.Int("CLUSTER", c.cluster);
    if (ln) t.Bool("PREFETCH_L2", PrefetchNextRowsToL2(p, c, d));  // the RMSNorm cluster kernel takes none
  } else {
    t.Int("XBLOCK", c.x_block).Bool("PREFETCH_L2", PrefetchNextRowsToL2(p, c, d));
    if (!direct) t.Bool("PERSISTENT", c.persistent);  // the single-CTA kernel is persistent
  }
  if (absl::Status s = t.NameInto(&k); !s.ok()) return s;
  k.params = ln ? std::vector<std::string>{"x", "dy", "w", "mean", "rstd", "dx", "ws", "M", "N"}
                : std::vector<std::string>{"x", "dy", "dresidual", "w", "rstd", "dx", "ws", "M", "N"};
  if (direct) {  // it writes the gradients where the others write their partials
    auto ws = std::find(k.params.begin(), k.params.end(), "ws");
    *ws = "dw";
    if (ln) k.params.insert(ws + 1, "db");
  }
  k.dynamic_smem_bytes = static_cast<uint32_t>(PartialsSmemBytes(p, c, d));
  recipe.kernels.push_back(std::move(k));
  recipe.workspace_bytes = WorkspaceBytes(p, c);
  const int parts = GradientParts(p);
  if (parts > 0 && !direct) {
    ReduceGeometry g = ReduceGeometryFor(PartialRows(p, c));
    if (c.reduce_rows > 0) g.threads_y = c.reduce_rows;  // tuned
    KernelLaunch r;
    const absl::Status named = KernelInstance("norm_bwd_reduce")
                                   .Type("TW", wt)
                                   .Bool("HAS_WEIGHT", p.has_weight)
                                   .Bool("HAS_BIAS", ln && p.has_bias)
                                   .Int("THREADS_X", g.threads_x)
                                   .Int("THREADS_Y", g.threads_y)
                                   .NameInto(&r);
    if (!named.ok()) return named;
    r.grid = {static_cast<uint32_t>(CeilDiv(p.n, g.threads_x)), static_cast<uint32_t>(parts), 1};
    r.block = {static_cast<uint32_t>(g.threads_x), static_cast<uint32_t>(g.threads_y), 1};
    r.dynamic_smem_bytes = 0;
    r.params = {"ws", "dw", "db", "P", "N"};
    r.programmatic_dependent = programmatic_dependent;  // it waits for the partials
    recipe.kernels.push_back(std::move(r));
  }
  const NormInterfaceFacts facts{c.vec, PrefetchNextRowsToL2(p, c, d) ? 16u : 0u, PartialRows(p, c)};
  if (absl::Status s = WriteNormInterface(p, facts, &recipe); !s.ok()) return s;
  return recipe;
}

}  // namespace ktune
