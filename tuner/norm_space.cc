#include "tuner/norm_space.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/kernel_source.h"

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
constexpr int kMaxCtasPerSm = 32;   // sm_50 and later
constexpr int kSmSubPartitions = 4;  // register file split across 4 schedulers
constexpr int kMaxRegistersPerThread = 255;
constexpr int kMinThreadsPerRow = 4;
constexpr int kWarpSizeT = 32;

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t NextPowerOfTwo(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsNormDType(DType d) { return d == DType::kBF16 || d == DType::kFP16 || d == DType::kFP32; }

std::string TemplateTypeName(DType d) {
  switch (d) {
    case DType::kBF16:
      return "ktune::bf16";
    case DType::kFP16:
      return "ktune::fp16";
    case DType::kFP32:
      return "float";
    case DType::kFP8E4M3:
      break;
  }
  return "<unsupported>";
}

// The widest vector (power of two, at most 16 bytes of input) dividing N.
int MaxVec(const NormProblem& p) {
  int vec = 16 / DTypeBytes(p.input_dtype);
  while (vec > 1 && p.n % vec != 0) vec /= 2;
  return vec;
}

// 32-bit registers one vector of the input occupies while held. bf16 and fp32
// stay packed (the kernel converts bf16 again at each use, through different
// instructions so ptxas cannot merge the two). fp16 has one conversion
// instruction only, ptxas merges its two uses and so holds each element as a
// float: one register per element.
int WordsPerVector(const NormProblem& p, int vec) {
  if (p.input_dtype == DType::kFP16) return vec;
  return std::max(1, vec * DTypeBytes(p.input_dtype) / 4);
}

// Packed words live across the reduction (persistent) or per pass (looped).
int LiveWords(const NormProblem& p, const NormConfig& c) {
  const int x_words = c.chunks() * WordsPerVector(p, c.vec);
  if (c.persistent) return c.pipeline_depth * x_words + (p.has_weight ? x_words : 0);
  return 2 * x_words;  // pass 2 holds x and w chunks at once
}

int EstimatedRegisters(const NormProblem& p, const NormConfig& c) {
  return kRegisterOverhead + LiveWords(p, c);
}

// CTAs per SM that the estimate allows (0: not even one). Registers are
// allocated per warp in units of 8 per thread, and a warp's registers come
// from one of the 4 sub-partitions, each holding a quarter of the file.
int CtasPerSm(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  const int regs = ((EstimatedRegisters(p, c) + 7) / 8) * 8;
  if (regs > kMaxRegistersPerThread + 1) return 0;
  // A DeviceInfo decoded from an older peer may lack the limits: use sm_80+'s.
  const int regs_per_sm = d.regs_per_sm > 0 ? d.regs_per_sm : 65536;
  const int threads_per_sm = d.max_threads_per_sm > 0 ? d.max_threads_per_sm : 2048;
  const int warps_per_sub = regs_per_sm / kSmSubPartitions / (regs * kWarpSizeT);
  const int by_regs = kSmSubPartitions * warps_per_sub / c.num_warps;
  const int by_threads = threads_per_sm / c.threads();
  return std::min({kMaxCtasPerSm, by_threads, by_regs});
}

int64_t RowBlocks(const NormProblem& p, const NormConfig& c) { return CeilDiv(p.m, c.x_block); }

int64_t GridSize(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  const int64_t row_blocks = RowBlocks(p, c);
  if (c.pipeline_depth == 1 || d.sm_count <= 0) return row_blocks;
  return std::min<int64_t>(row_blocks, int64_t{d.sm_count} * CtasPerSm(p, c, d));
}

bool IsRmsNormForward(const NormProblem& p) {
  return p.op == NormOp::kRMSNorm && p.pass == NormPass::kForward;
}

absl::Status CheckServed(const NormProblem& p) {
  if (!IsRmsNormForward(p)) {
    return absl::UnimplementedError(
        absl::StrCat("no kernel template implements ", OpName(p), " yet (rmsnorm.fwd only)"));
  }
  return absl::OkStatus();
}

NormConfig MakeConfig(int num_warps, int threads_per_row, int vec, int chunks, bool persistent,
                      int pipeline) {
  NormConfig c;
  c.num_warps = num_warps;
  c.x_block = num_warps * kWarpSizeT / threads_per_row;
  c.vec = vec;
  c.r_block = threads_per_row * vec * chunks;
  c.persistent = persistent;
  c.pipeline_depth = pipeline;
  c.split_size = 0;
  return c;
}

}  // namespace

absl::Status CanImplement(const NormProblem& p, const NormConfig& c, const DeviceInfo& d) {
  if (absl::Status s = CheckServed(p); !s.ok()) return s;
  auto fail = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(ToString(c), ": ", why));
  };
  if (!IsNormDType(p.input_dtype) || !IsNormDType(p.output_dtype)) {
    return fail("dtypes must be bf16, fp16 or fp32");
  }
  if (p.has_bias) return fail("RMSNorm has no bias");
  if (p.m < 1 || p.n < 1 || p.n > kMaxNormN || p.m > kMaxNormM) {
    return fail("M and N must be in range (ValidateNormProblem)");
  }
  if (d.cc_major < 8) return fail(absl::StrCat("needs sm_80 or newer, device is ", Arch(d)));
  if (!IsPowerOfTwo(c.num_warps) || c.num_warps > 32) {
    return fail("num_warps must be a power of two in [1, 32]");
  }
  if (c.threads() > 1024) return fail("more than 1024 threads per CTA");
  if (!IsPowerOfTwo(c.x_block) || c.x_block > c.threads() / kMinThreadsPerRow) {
    return fail(absl::StrCat("x_block must be a power of two leaving >= ", kMinThreadsPerRow,
                             " threads per row"));
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
  if (c.split_size != 0) return fail("split_size is for the backward pass");
  if (LiveWords(p, c) > kMaxLiveWords) {
    return fail(absl::StrCat(LiveWords(p, c), " live registers of data per thread, more than ",
                             kMaxLiveWords));
  }
  if (d.max_threads_per_sm > 0 && c.threads() > d.max_threads_per_sm) {
    return fail("more threads than an SM holds");
  }
  if (CtasPerSm(p, c, d) < 1) return fail("estimated registers do not fit one CTA on an SM");
  return absl::OkStatus();
}

std::vector<NormConfig> NormSearchSpace(const NormProblem& p, const DeviceInfo& d) {
  std::vector<NormConfig> space;
  if (!IsRmsNormForward(p)) return space;
  auto add = [&](const NormConfig& c) {
    if (!CanImplement(p, c, d).ok()) return;
    if (std::find(space.begin(), space.end(), c) != space.end()) return;
    space.push_back(c);
  };
  const int vec = MaxVec(p);
  const int64_t vectors = p.n / vec;          // vectors per row
  const int64_t max_rows = NextPowerOfTwo(p.m);  // more rows per CTA than M idles threads

  // Persistent: the row in registers. (warps, threads per row) fixes CHUNKS as
  // the fewest passes covering the row; rows using under half of their last
  // pass's lanes are pruned (idle threads), as are CTAs wider than M needs.
  // Pipelining only differs from depth 1 when a one-wave grid must loop.
  bool row_fits_registers = false;  // some persistent config is implementable at all
  for (int warps : {1, 2, 4, 8, 16, 32}) {
    const int threads = warps * kWarpSizeT;
    for (int tpr = threads; tpr >= kMinThreadsPerRow; tpr /= 2) {
      const int64_t chunks = CeilDiv(vectors, tpr);
      if (chunks > 64) continue;
      NormConfig c = MakeConfig(warps, tpr, vec, static_cast<int>(chunks), true, 1);
      if (!CanImplement(p, c, d).ok()) continue;
      row_fits_registers = true;
      if (2 * vectors < chunks * tpr) continue;  // under half the lanes busy
      if (threads / tpr > max_rows) continue;
      add(c);
      c.pipeline_depth = 2;
      if (GridSize(p, c, d) < RowBlocks(p, c)) add(c);
    }
  }
  // Looped: for rows too long for registers, or long enough (>= 8192) that a
  // two-pass kernel with small register footprint may win. One row per CTA.
  const bool long_row = p.n >= 8192;
  if (long_row || !row_fits_registers) {
    for (int warps : {4, 8, 16, 32}) {
      const int threads = warps * kWarpSizeT;
      for (int chunks : {1, 2, 4}) {
        const int64_t r_block = int64_t{threads} * vec * chunks;
        if (r_block >= p.n && long_row) continue;  // one pass: persistent does that better
        add(MakeConfig(warps, threads, vec, chunks, false, 1));
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
  // Persistent, 256-thread CTAs, and as many 16-byte vectors per thread as the
  // registers allow up to 8: the loads in flight per SM are what a streaming
  // kernel lives on (on an H200 the tuned winners of the bench shapes hold 4 to
  // 8 vectors per thread and are within 2% of this choice).
  for (int per_thread : {8, 4, 2, 1}) {
    int tpr = static_cast<int>(std::clamp<int64_t>(NextPowerOfTwo(CeilDiv(vectors, per_thread)),
                                                   kMinThreadsPerRow, 1024));
    int warps = std::max(tpr, 256) / kWarpSizeT;
    // Fewer rows than a CTA would hold: narrower CTAs, then wider row groups.
    while (warps > 1 && warps * kWarpSizeT > tpr && warps * kWarpSizeT / tpr > max_rows) warps /= 2;
    while (warps * kWarpSizeT / tpr > max_rows) tpr *= 2;
    const int chunks = static_cast<int>(CeilDiv(vectors, tpr));
    const NormConfig c = MakeConfig(warps, tpr, vec, chunks, true, 1);
    if (CanImplement(p, c, d).ok()) return c;
  }
  // Rows too long for registers: two passes, 512 threads, 2 vectors each.
  NormConfig c = MakeConfig(16, 512, vec, 2, false, 1);
  if (CanImplement(p, c, d).ok()) return c;
  return MakeConfig(4, 128, 1, 1, false, 1);  // implementable for every N
}

std::string NormTemplateId(const NormProblem& p) {
  return absl::StrCat("norm/", p.op == NormOp::kRMSNorm ? "rmsnorm" : "layernorm",
                      p.pass == NormPass::kForward ? "_fwd" : "_bwd");
}

absl::StatusOr<LaunchRecipe> NormLaunchRecipe(const NormProblem& p, const NormConfig& c,
                                              const DeviceInfo& d) {
  if (absl::Status s = CheckServed(p); !s.ok()) return s;
  if (absl::Status s = CanImplement(p, c, d); !s.ok()) return s;
  LaunchRecipe recipe;
  recipe.template_id = NormTemplateId(p);
  absl::StatusOr<const KernelSource*> source = FindKernelSource(recipe.template_id);
  if (!source.ok()) return source.status();
  recipe.template_hash = (*source)->hash;
  recipe.arch = Arch(d);
  recipe.nvrtc_options = {absl::StrCat("--gpu-architecture=", recipe.arch), "-std=c++17"};

  KernelLaunch k;
  const std::string in = TemplateTypeName(p.input_dtype);
  k.name_expression = absl::StrFormat(
      "ktune::rmsnorm_fwd<%s, %s, %s, %d, %d, %d, %d, %s, %d, %d>", in,
      TemplateTypeName(p.output_dtype), p.has_weight ? "true" : "false", c.num_warps, c.x_block,
      c.vec, c.chunks(), c.persistent ? "true" : "false", c.pipeline_depth, CtasPerSm(p, c, d));
  k.grid = {static_cast<uint32_t>(GridSize(p, c, d)), 1, 1};
  k.block = {static_cast<uint32_t>(c.threads()), 1, 1};
  k.dynamic_smem_bytes = 0;
  // Pointers x, w, y (16-byte aligned), rstd (float*, may be null); int M, N; float eps.
  k.params = {"x", "w", "y", "rstd", "M", "N", "eps"};
  recipe.kernels.push_back(std::move(k));
  recipe.workspace_bytes = 0;
  return recipe;
}

}  // namespace ktune
