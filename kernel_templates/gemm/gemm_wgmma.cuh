// GEMM on Hopper's tensor cores (sm_90a): TMA, mbarriers, wgmma and warp
// specialisation, one template for every tuned variant:
//
//   D[b] = epilogue(alpha * A[b] x B[b]^T + beta * C[b])
//
// A is [M, K] and B is [N, K] (nn.Linear's weight), both row-major TAB (K
// contiguous: the "K-major" operands wgmma reads from shared memory without a
// transpose), bf16 or fp8 e4m3; accumulation fp32; C and D are TD (bf16 or
// float; bf16 for e4m3). fp8's per-tensor scales multiply the product as
// alpha does. Batches are contiguous, one per gridDim.z.
// With B_KN (bf16 only), B is given as [K, N] row-major instead (N
// contiguous, as in x @ W or attention's P @ V): its stage holds BN / 64
// column blocks of 64 N x kBK K, each one TMA box with rows of 64 N (128
// bytes) along K, and wgmma reads it "N-major" (its transpose flag, which
// exists for 16-bit operands only).
// Every row of every stage is 128 bytes of K (64 bf16 or 128 e4m3: kBK), and
// every wgmma takes 32 bytes of it (k16 or k32), so both types share the ring,
// the swizzle and the descriptors; only the element count per byte differs.
// A stage holds K_ROWS such 128-byte slices of K (the tile's K is K_ROWS *
// kBK): one BM x kBK box of A and one BN x kBK box of B per slice, each
// swizzled on its own, loaded by its own TMA copy onto the stage's barrier.
//
// A CTA is 1 + CONSUMERS warpgroups and persistent: it walks the output tiles
// blockIdx.x, blockIdx.x + gridDim.x, ... in grouped raster order (GROUP_M
// tile rows at a time, so the CTAs running together share B tiles in L2).
//  - The producer warpgroup gives most of its registers back (setmaxnreg) and
//    one of its threads issues the TMA copies: for each K_ROWS * kBK-wide step
//    of K, K_ROWS BM x kBK boxes of A and as many BN x kBK boxes of B into one
//    stage of a ring of STAGES, completed on the stage's "full" mbarrier by
//    transaction bytes.
//    It runs ahead across tiles, so the next tile's loads overlap this tile's
//    epilogue.
//  - Cooperative (PINGPONG false): each consumer warpgroup owns BM /
//    CONSUMERS rows of every tile. Ping-pong (PINGPONG, two consumers): each
//    consumer owns whole tiles, the two taking turns, so one's epilogue runs
//    while the other multiplies; a consumer starts a tile's main loop only
//    once the other has finished the previous tile's (an ordering mbarrier),
//    which also keeps every stage barrier within one phase of its waiters.
//    Either way a consumer multiplies with wgmma m64nBNk16 (k32) straight from
//    shared memory (TMA writes the 128-byte-swizzled layout the wgmma
//    descriptors name). One group of wgmmas stays in flight: a stage is
//    handed back (its "empty" mbarrier) once the next stage's wgmmas are
//    issued and the previous have retired. The epilogue (gemm/epilogue.cuh)
//    goes through a few staging rows per warp in shared memory, so D is
//    written in whole 128-byte lines (bf16 D with N % 8 == 0; otherwise
//    straight from the accumulators).
// With SPLIT_K > 1 the work units are (tile, slice of K): unit u takes split
// u / tiles (slice-major, so the CTAs running together share a K slice of A
// and B in L2) and tile u % tiles, k_tiles / SPLIT_K steps of K_ROWS * kBK. Each unit
// writes its fp32 accumulators to the workspace in fragment order (every
// split of a tile has the same thread-to-fragment map, so no layout change),
// then counts itself in on the tile's counter; the split that arrives last
// sums every split's partial in split order (its own read back like the
// others', so D is the same whichever split arrives last), resets the counter
// to zero and runs the epilogue. No CTA waits on another, so any grid size is
// safe.
// With TAIL_SPLIT > 1 (SPLIT_K 1, cooperative, unswapped), only the tiles past
// the grid's whole waves are split: with T tile units and C clusters, the
// first T - T % C units are whole tiles, then each of the T % C tiles left
// over is TAIL_SPLIT units (split-major, splits of floor(k * (s + 1) / S) -
// floor(k * s / S) steps), summed as split-K's. The last wave then keeps every
// SM busy for (T % C) * S / C of a tile's steps per SM instead of leaving
// C - T % C of them idle for a whole tile (wave quantisation: 2048 x 4096 x
// 14336 in 128 x 192 tiles is 2.67 waves, run as 3 unsplit).
// With CLUSTER_M = 2, CTAs pair up in a cluster on tiles of the same column
// stacked along M: each fetches half of the shared B tile and multicasts it
// into both CTAs' stage, so B crosses from L2 once per pair; a stage is then
// released to both producers (remote mbarrier arrivals).
// TMA zero-fills outside A and B, so any M, N and K tail is exact.
// With SWAP_AB the kernel computes D^T = B x A^T for problems of a few rows
// (M <= 32, decode steps): tma_a describes the problem's B ([N, K]) and
// tma_b its A, the kernel's M and N are the problem's N and M, and the
// epilogue writes each value to D^T (bias along the kernel's rows, C read
// transposed alike). The weight then fills wgmma's 64 rows and the few rows
// of activations its N of 8, 16 or 32, instead of 64 rows of A mostly zero
// fill: a stage is (64 + 16) rows, not (64 + 64), and the ring streams B.
// With PROMOTE_STEPS > 0 (fp8), the wgmma accumulator spans at most that many
// steps of K: every PROMOTE_STEPS steps the consumer waits for its wgmmas,
// adds the accumulator into a second fp32 one and starts it again (the next
// span's first wgmma overwrites it)
// (CUTLASS's "promotion", as in DeepSeek-V3's fp8 GEMM). Hopper's fp8 wgmma
// adds at reduced precision, so without this one accumulator (one split) may
// span only so much of K; with it, any K at fp32 precision, for twice the
// accumulator registers and a drained tensor pipe once per promotion.
// (Promoting a span while the next span's wgmmas, into a third set of
// registers, are in flight would avoid the drain, but ptxas then serializes
// every wgmma of the kernel: C7514, an accumulator read while any wgmma is
// in flight. bench/results/2026-11-30-norms-gemm-95556ee.md.)
// Why: bench/results/decisions/fp8-promotion.md
//
// Kernel arguments, in order (the recipe's `params`):
//   tma_a:KBxBM   TmaDescriptor (by value)  A as a 3D tensor (K, M, batch) of
//                 TAB, box (KB = kBK, BM, 1), 128-byte swizzle, zero fill
//   tma_b:KBxR    TmaDescriptor  B as (K, N, batch), box (kBK, R = BN / CLUSTER_M, 1),
//                 likewise; with B_KN, B as (N, K, batch), box (64, kBK, 1)
//                 (64 columns by kBK rows of K: `tma_b:64xKB`)
//   c, d, bias, M, N, K, alpha, beta   as kernel_templates/gemm/gemm_mma.cuh
//   ws            unsigned char*  SPLIT_K > 1: the workspace (null otherwise):
//                 (batch, tiles, CLUSTER_M, SPLIT_K, BM * BN) f32 partials,
//                 then (batch, tiles, CLUSTER_M) u32 counters, tiles counted
//                 in cluster units; zeroed before the first launch (every
//                 launch leaves the counters zero again). TAIL_SPLIT > 1:
//                 likewise with the T % C tail tiles and TAIL_SPLIT (null
//                 where there is no tail)
//   a_scale, b_scale  const float*  e4m3: the per-tensor scales (null: 1)
// REQUIRES: K * sizeof(TAB) % 16 == 0 (TMA strides are multiples of 16
// bytes); with B_KN, N * sizeof(TAB) % 16 == 0 too and (BN / CLUSTER_M) % 64
// == 0; ceil(K / (K_ROWS * kBK)) a multiple of SPLIT_K, and at least
// TAIL_SPLIT; c 8-byte and
// d 16-byte aligned; dynamic shared memory of STAGES * K_ROWS * (BM + BN) * 128 + 1024
// + 16 * (STAGES + 2) + CONSUMERS * 4 * 16 * 144 bytes (the ring, its
// alignment, the barriers and split flags, the epilogue's staging rows); a
// grid of
// (CLUSTER_M * min(tile units, SMs / (CLUSTER_M * batch)), 1, batch), a tile
// unit being CLUSTER_M tiles along M.
#pragma once

#include "common/cluster.cuh"
#include "common/types.cuh"
#include "gemm/epilogue.cuh"

namespace ktune {

// A CUtensorMap (the TMA descriptor), opaque: encoded on the host by
// cuTensorMapEncodeTiled and passed by value as a __grid_constant__.
struct alignas(64) TmaDescriptor {
  unsigned long long words[16];
};

namespace gemm_wgmma_detail {

constexpr int kRowBytes = 128;  // of K per stage and tile row: one 128-byte swizzle row
constexpr int kStepBytes = 32;  // of K per wgmma (k16 of bf16, k32 of e4m3)

__device__ __forceinline__ unsigned int smem_addr(const void* p) {
  return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival that also announces `bytes` of TMA transactions to come.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// A box of the 3D tensor at (c0, c1, c2) into shared memory; completes on bar.
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDescriptor* map, unsigned long long* bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// wgmma's shared-memory matrix descriptor for a tile stored as rows of 128
// bytes, 128-byte swizzled, 8-row groups 1024 bytes apart (the stride byte
// offset). K-major (rows along K): the leading byte offset is unused, 16 by
// convention. N-major (B_KN: rows of 64 N along K, in column blocks): in the
// PTX ISA's canonical layout, ((8, 8, n), (8, k)) elements with strides
// ((1, 8, LBO), (64, SBO)), the leading byte offset steps from one 64-column
// block to the next.
__device__ __forceinline__ unsigned long long smem_desc(const void* p, unsigned int leading_bytes = 16) {
  const unsigned long long addr = smem_addr(p);
  return ((addr & 0x3FFFF) >> 4) | (static_cast<unsigned long long>((leading_bytes & 0x3FFFF) >> 4) << 16) |
         (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// The instruction's operands (inline PTX cannot take an array, so each
// accumulator register is spelt out once, here): the placeholders and the
// output constraints of accumulators [0, 32), [32, 64), [64, 96) and
// [96, 128), then joined into the lists of N = 64, 128, 192 and 256.
#define KTUNE_WGMMA_REGS_0 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KTUNE_WGMMA_REGS_32 \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KTUNE_WGMMA_REGS_64 \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define KTUNE_WGMMA_REGS_96 \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define KTUNE_WGMMA_OUTS_0 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KTUNE_WGMMA_OUTS_32 \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KTUNE_WGMMA_OUTS_64 \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KTUNE_WGMMA_OUTS_96 \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// N = 8, 16 and 32 (the swapped skinny tiles, SWAP_AB) take the first 4, 8
// and 16 of them.
#define KTUNE_WGMMA_REGS_N8 "%0, %1, %2, %3"
#define KTUNE_WGMMA_REGS_N16 KTUNE_WGMMA_REGS_N8 ", %4, %5, %6, %7"
#define KTUNE_WGMMA_REGS_N32 KTUNE_WGMMA_REGS_N16 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define KTUNE_WGMMA_OUTS_N8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define KTUNE_WGMMA_OUTS_N16 KTUNE_WGMMA_OUTS_N8, "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define KTUNE_WGMMA_OUTS_N32 \
  KTUNE_WGMMA_OUTS_N16, "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
      "+f"(d[15])
#define KTUNE_WGMMA_REGS_N64 KTUNE_WGMMA_REGS_0
#define KTUNE_WGMMA_REGS_N128 KTUNE_WGMMA_REGS_0 ", " KTUNE_WGMMA_REGS_32
#define KTUNE_WGMMA_REGS_N192 KTUNE_WGMMA_REGS_N128 ", " KTUNE_WGMMA_REGS_64
#define KTUNE_WGMMA_REGS_N256 KTUNE_WGMMA_REGS_N192 ", " KTUNE_WGMMA_REGS_96
#define KTUNE_WGMMA_OUTS_N64 KTUNE_WGMMA_OUTS_0
#define KTUNE_WGMMA_OUTS_N128 KTUNE_WGMMA_OUTS_0, KTUNE_WGMMA_OUTS_32
#define KTUNE_WGMMA_OUTS_N192 KTUNE_WGMMA_OUTS_N128, KTUNE_WGMMA_OUTS_64
#define KTUNE_WGMMA_OUTS_N256 KTUNE_WGMMA_OUTS_N192, KTUNE_WGMMA_OUTS_96
// wgmma m64nN with N / 2 accumulators: REGS and OUTS list them, DESC_A,
// DESC_B and PRED are the placeholders that follow ("32", "33", "34" for
// N = 64); TYPES is the shape's K and the types, TAIL the transpose
// immediates (bf16 only: fp8 operands are K-major by definition and take none).
#define KTUNE_WGMMA_M64(N, REGS, OUTS, DESC_A, DESC_B, PRED, TYPES, TAIL)                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" PRED ", 0;\n"                               \
               "wgmma.mma_async.sync.aligned.m64n" #N TYPES " {" REGS "}, %" DESC_A ", %" DESC_B \
               ", p, 1, 1" TAIL ";\n}\n"                                                         \
               : OUTS                                                                            \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// d (64 x N, fp32, the m64nN accumulator fragment) += A (64 x KI) x B^T
// (KI x N), both from shared memory, KI = 32 bytes of TAB (16 bf16, 32 e4m3);
// B K-major, or N-major with B_N_MAJOR (bf16 only). With scale_d == 0 the
// wgmma's scale-d input is off: d = A x B^T, d's old values ignored.
// Thread t of the warpgroup holds, for each n8 column block j, d[4j],
// d[4j + 1] at row 16 * (t / 32) + (t % 32) / 4, columns 8j + 2 * (t % 4) +
// {0, 1}, and d[4j + 2], d[4j + 3] eight rows below.
template <typename TAB, int N, bool B_N_MAJOR = false>
__device__ __forceinline__ void wgmma_m64(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                                          int scale_d = 1) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 192 || N == 256,
                "wgmma N of 8, 16, 32, 64, 128, 192 or 256 here");
  static_assert(!B_N_MAJOR || sizeof(TAB) == 2, "wgmma transposes 16-bit operands only");
#define KTUNE_WGMMA_M64_N(TYPES, TAIL)                                                                 \
  if constexpr (N == 8) {                                                                            \
    KTUNE_WGMMA_M64(8, KTUNE_WGMMA_REGS_N8, KTUNE_WGMMA_OUTS_N8, "4", "5", "6", TYPES, TAIL);          \
  } else if constexpr (N == 16) {                                                                    \
    KTUNE_WGMMA_M64(16, KTUNE_WGMMA_REGS_N16, KTUNE_WGMMA_OUTS_N16, "8", "9", "10", TYPES, TAIL);      \
  } else if constexpr (N == 32) {                                                                    \
    KTUNE_WGMMA_M64(32, KTUNE_WGMMA_REGS_N32, KTUNE_WGMMA_OUTS_N32, "16", "17", "18", TYPES, TAIL);    \
  } else if constexpr (N == 64) {                                                                    \
    KTUNE_WGMMA_M64(64, KTUNE_WGMMA_REGS_N64, KTUNE_WGMMA_OUTS_N64, "32", "33", "34", TYPES, TAIL);    \
  } else if constexpr (N == 128) {                                                                   \
    KTUNE_WGMMA_M64(128, KTUNE_WGMMA_REGS_N128, KTUNE_WGMMA_OUTS_N128, "64", "65", "66", TYPES, TAIL); \
  } else if constexpr (N == 192) {                                                                   \
    KTUNE_WGMMA_M64(192, KTUNE_WGMMA_REGS_N192, KTUNE_WGMMA_OUTS_N192, "96", "97", "98", TYPES, TAIL); \
  } else {                                                                                           \
    KTUNE_WGMMA_M64(256, KTUNE_WGMMA_REGS_N256, KTUNE_WGMMA_OUTS_N256, "128", "129", "130", TYPES, TAIL); \
  }
  if constexpr (sizeof(TAB) == 2 && B_N_MAJOR) {
    KTUNE_WGMMA_M64_N("k16.f32.bf16.bf16", ", 0, 1")  // imm-trans-a 0, imm-trans-b 1
  } else if constexpr (sizeof(TAB) == 2) {
    KTUNE_WGMMA_M64_N("k16.f32.bf16.bf16", ", 0, 0")
  } else {
    KTUNE_WGMMA_M64_N("k32.f32.e4m3.e4m3", "")
  }
#undef KTUNE_WGMMA_M64_N
}
#undef KTUNE_WGMMA_M64
#undef KTUNE_WGMMA_REGS_0
#undef KTUNE_WGMMA_REGS_32
#undef KTUNE_WGMMA_REGS_64
#undef KTUNE_WGMMA_REGS_96
#undef KTUNE_WGMMA_OUTS_0
#undef KTUNE_WGMMA_OUTS_32
#undef KTUNE_WGMMA_OUTS_64
#undef KTUNE_WGMMA_OUTS_96
#undef KTUNE_WGMMA_REGS_N8
#undef KTUNE_WGMMA_REGS_N16
#undef KTUNE_WGMMA_REGS_N32
#undef KTUNE_WGMMA_OUTS_N8
#undef KTUNE_WGMMA_OUTS_N16
#undef KTUNE_WGMMA_OUTS_N32
#undef KTUNE_WGMMA_REGS_N64
#undef KTUNE_WGMMA_REGS_N128
#undef KTUNE_WGMMA_REGS_N192
#undef KTUNE_WGMMA_REGS_N256
#undef KTUNE_WGMMA_OUTS_N64
#undef KTUNE_WGMMA_OUTS_N128
#undef KTUNE_WGMMA_OUTS_N192
#undef KTUNE_WGMMA_OUTS_N256
// Orders plain reads and writes of the accumulators after a wgmma.wait_group
// (and before the next wgmma): the compiler sees the asynchronous wgmma's
// results as written when its asm statement issues, so without this it may
// move the promotion's adds above the wait.
template <int MSUB, int HALF_N>
__device__ __forceinline__ void fence_accumulators(float (&acc)[MSUB][HALF_N]) {
#pragma unroll
  for (int i = 0; i < MSUB; ++i) {
#pragma unroll
    for (int j = 0; j < HALF_N; ++j) asm volatile("" : "+f"(acc[i][j])::"memory");
  }
}

// An arrival on the mbarrier at the same offset in CTA `rank` of the cluster.
// The default semantics (release at CTA scope), as CUTLASS's cluster
// barriers arrive: `.release.cluster` compiles to MEMBAR.ALL.CTA,
// MEMBAR.ALL.GPU, ERRBAR and CGAERRBAR before every arrival (cuobjdump of
// the template before 44326c9), and the consumers arrive twice per step of K, a GPU-wide fence
// stalling their whole warpgroup each time. Nothing needs that order here:
// what an arrival releases is a stage the wgmmas have finished reading
// (wgmma.wait_group), and the producer's next write to it is a TMA.
// Why: bench/results/decisions/gemm-wgmma-clusters.md
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned int rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)),
      "r"(rank)
      : "memory");
}
// tma_load_3d into the same offset of every CTA in `mask`, completing on the
// mbarrier at bar's offset in each.
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const TmaDescriptor* map, unsigned long long* bar,
                                                      int c0, int c1, int c2, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(mask)
      : "memory");
}

// Split-K, after a unit's main loop (see the header): `acc` is this thread's
// fragment of the partial sum over split `split` of CTA-level tile `slot` (of
// `slots` in the launch). The GROUPS * 128 threads of the consumer group that
// owns the tile write it to the workspace in fragment order, then count the
// split in. Returns true for the last split of the tile, with `acc` now the
// sum over every split: that group runs the epilogue.
// REQUIRES: every thread of the consumer group calls it (named barrier
// 1 + group, GROUPS * 128 threads).
template <int MSUB, int BN, int SPLIT_K, int GROUPS>
__device__ __forceinline__ bool reduce_split_k(float (&acc)[MSUB][BN / 2], unsigned char* ws,
                                               unsigned int* arrivals, int group, int thread_in_group,
                                               long long slot, long long slots, int split) {
  constexpr int kFragment = MSUB * BN / 2;        // floats per thread
  constexpr int kThreads = GROUPS * 128;          // threads sharing the tile
  constexpr int kTileFloats = kFragment * kThreads;
  static_assert(kFragment % 4 == 0, "fragments move as float4");
  float* partials = reinterpret_cast<float*>(ws);
  unsigned int* counters = reinterpret_cast<unsigned int*>(ws + slots * SPLIT_K * kTileFloats * sizeof(float));
  // (kFragment / 4, kThreads) float4: a warp's store is 512 contiguous bytes.
  auto at = [&](int s, int q) {
    return reinterpret_cast<float4*>(partials + (slot * SPLIT_K + s) * kTileFloats) + q * kThreads + thread_in_group;
  };
  auto sync_group = [&] {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(kThreads) : "memory");
  };
#pragma unroll
  for (int q = 0; q < kFragment / 4; ++q) {
    const int e = 4 * q;
    *at(split, q) = make_float4(acc[e / (BN / 2)][e % (BN / 2)], acc[e / (BN / 2)][e % (BN / 2) + 1],
                                acc[e / (BN / 2)][e % (BN / 2) + 2], acc[e / (BN / 2)][e % (BN / 2) + 3]);
  }
  __threadfence();  // the partial is visible before the split counts in
  sync_group();
  if (thread_in_group == 0) arrivals[group] = atomicAdd(&counters[slot], 1u);
  sync_group();
  const bool last = arrivals[group] == SPLIT_K - 1;
  if (!last) return false;
  __threadfence();  // see every other split's partial
  // The sum in split order, this group's own partial read back like the
  // others, so D does not depend on which split arrived last.
#pragma unroll
  for (int i = 0; i < MSUB; ++i) {
#pragma unroll
    for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.0f;
  }
  auto add = [&](int q, const float4& v) {
    const int e = 4 * q;
    acc[e / (BN / 2)][e % (BN / 2)] += v.x;
    acc[e / (BN / 2)][e % (BN / 2) + 1] += v.y;
    acc[e / (BN / 2)][e % (BN / 2) + 2] += v.z;
    acc[e / (BN / 2)][e % (BN / 2) + 3] += v.w;
  };
  if constexpr (kFragment * SPLIT_K <= 64) {
    // A small fragment (the swapped skinny tiles): every split's loads in
    // flight at once, then the same sum in split order, instead of one L2
    // round trip per split on the kernel's critical tail.
    float4 parts[SPLIT_K][kFragment / 4];
#pragma unroll
    for (int s = 0; s < SPLIT_K; ++s) {
#pragma unroll
      for (int q = 0; q < kFragment / 4; ++q) parts[s][q] = __ldcg(at(s, q));
    }
#pragma unroll
    for (int s = 0; s < SPLIT_K; ++s) {
#pragma unroll
      for (int q = 0; q < kFragment / 4; ++q) add(q, parts[s][q]);
    }
  } else {
#pragma unroll 1
    for (int s = 0; s < SPLIT_K; ++s) {
#pragma unroll
      for (int q = 0; q < kFragment / 4; ++q) add(q, __ldcg(at(s, q)));  // L2: written by other SMs (and this one)
    }
  }
  if (thread_in_group == 0) counters[slot] = 0u;  // ready for the next launch
  return true;
}

}  // namespace gemm_wgmma_detail

template <typename TAB, typename TD, int EPI, bool HAS_C, int BM, int BN, int CONSUMERS, bool PINGPONG, int CLUSTER_M,
          int STAGES, int GROUP_M, int SPLIT_K, int K_ROWS, int PROMOTE_STEPS, bool B_KN, bool SWAP_AB, int TAIL_SPLIT>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1) __cluster_dims__(CLUSTER_M, 1, 1)
    gemm_wgmma(const __grid_constant__ TmaDescriptor tma_a, const __grid_constant__ TmaDescriptor tma_b,
               const TD* __restrict__ c, TD* __restrict__ d, const bf16* __restrict__ bias, int M, int N, int K,
               float alpha, float beta, unsigned char* __restrict__ ws, const float* __restrict__ a_scale,
               const float* __restrict__ b_scale) {
  using namespace gemm_wgmma_detail;
  constexpr int kBK = kRowBytes / static_cast<int>(sizeof(TAB));  // elements of K per 128-byte slice
  constexpr int kStepK = kStepBytes / static_cast<int>(sizeof(TAB));  // elements of K per wgmma
  constexpr int kRowsPerConsumer = PINGPONG ? BM : BM / CONSUMERS;
  constexpr int kMSub = kRowsPerConsumer / 64;  // m64 wgmmas per consumer per step of K
  constexpr int kSliceA = BM * kBK;             // elements of one 128-byte slice of K of A
  constexpr int kSliceB = BN * kBK;
  constexpr int kTileA = K_ROWS * kSliceA;      // elements of one A stage
  constexpr int kTileB = K_ROWS * kSliceB;
  constexpr int kBRowsLoaded = BN / CLUSTER_M;  // rows of each B tile this CTA's TMA fetches
  static_assert(CONSUMERS == 1 || CONSUMERS == 2, "one or two consumer warpgroups");
  static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong takes two consumers");
  static_assert(CLUSTER_M == 1 || CLUSTER_M == 2, "clusters of one or two CTAs along M");
  static_assert(kRowsPerConsumer % 64 == 0 && kMSub >= 1 && kMSub <= 2, "64 or 128 rows per consumer");
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256 || (SWAP_AB && (BN == 8 || BN == 16 || BN == 32)),
                "wgmma N of 64, 128, 192 or 256; 8, 16 or 32 for the swapped skinny tiles");
  static_assert(!SWAP_AB || (!B_KN && CLUSTER_M == 1 && !PINGPONG), "swapped: K-major operands, alone, cooperative");
  static_assert(BM <= 256 && BN <= 256, "a TMA box is at most 256 rows");
  static_assert(kMSub * BN / 2 <= 128, "at most 128 accumulator registers per thread");
  static_assert(STAGES >= 2, "at least double buffering");
  static_assert(SPLIT_K >= 1 && SPLIT_K <= 16, "SPLIT_K in [1, 16]");
  static_assert(TAIL_SPLIT >= 1 && TAIL_SPLIT <= 16, "TAIL_SPLIT in [1, 16]");
  static_assert(TAIL_SPLIT == 1 || (SPLIT_K == 1 && !PINGPONG && !SWAP_AB),
                "the tail split: unsplit, cooperative, unswapped tiles");
  static_assert(sizeof(TAB) == 2 || sizeof(TAB) == 1, "bf16 or e4m3 operands");
  static_assert(K_ROWS == 1 || K_ROWS == 2, "one or two 128-byte slices of K per stage");
  static_assert(PROMOTE_STEPS >= 0, "PROMOTE_STEPS: 0 (none) or steps of K per accumulator span");
  static_assert(PROMOTE_STEPS == 0 || kMSub * BN / 2 <= 96, "promotion doubles the accumulators: at most 96 to start");
  static_assert(!B_KN || sizeof(TAB) == 2, "B as [K, N] takes bf16 (wgmma transposes 16-bit operands only)");
  static_assert(!B_KN || kBRowsLoaded % 64 == 0, "B as [K, N]: each CTA loads whole blocks of 64 columns");
  constexpr int kNBlock = 64;                                         // B_KN: columns per block (128 bytes)
  constexpr unsigned int kNBlockBytes = kNBlock * kBK * sizeof(TAB);  // B_KN: one block of a slice
  constexpr bool kPromote = PROMOTE_STEPS > 0;

  // The ring, 1024-byte aligned as the 128-byte swizzle wants, then the barriers.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  TAB* smem_a = reinterpret_cast<TAB*>(smem);  // (STAGES, K_ROWS, BM, kBK)
  TAB* smem_b = smem_a + STAGES * kTileA;       // (STAGES, K_ROWS, BN, kBK); B_KN: (.., BN / 64, kBK, 64)
  unsigned long long* full = reinterpret_cast<unsigned long long*>(smem_b + STAGES * kTileB);
  unsigned long long* empty = full + STAGES;
  unsigned long long* mainloop_done = empty + STAGES;  // [2], ping-pong: per consumer
  // Per consumer warp, 16 rows of kStagingCols outputs for the epilogue; rows
  // padded by 16 bytes so the fragment writes of 8 rows hit 8 bank groups.
  constexpr int kStagingCols = BN < 64 ? BN : 64;
  constexpr int kStagingPitch = kStagingCols * 2 + 16;
  constexpr int kStagingBytesPerWarp = 16 * kStagingPitch;
  // SPLIT_K > 1: per consumer group, the tile's arrival count as its leader read it.
  unsigned int* split_arrivals = reinterpret_cast<unsigned int*>(mainloop_done + 2);  // [4], 16 bytes
  unsigned char* staging = reinterpret_cast<unsigned char*>(split_arrivals + 4);

  const int warpgroup = threadIdx.x / 128;
  const int thread = threadIdx.x % 128;
  // In a cluster, both CTAs take tiles of the same tile column, stacked along
  // M; each fetches half of the shared B tile and multicasts it to both, so a
  // stage may be refilled only when the consumers of both CTAs are done with it.
  const unsigned int rank = CLUSTER_M == 2 ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    // The descriptors' first use is the producer's first copy: fetch them now.
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&tma_a)) : "memory");
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&tma_b)) : "memory");
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], (PINGPONG ? 1 : CONSUMERS) * CLUSTER_M);
    }
    mbar_init(&mainloop_done[0], 1);
    mbar_init(&mainloop_done[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (CLUSTER_M == 2) {
    cluster_sync();  // the peer's barriers exist before anything arrives on them
  } else {
    __syncthreads();
  }

  // The tile grid in units of CLUSTER_M tile rows: a cluster takes one unit
  // at a time, its CTAs the rows within it.
  const int tiles_m = (M + BM * CLUSTER_M - 1) / (BM * CLUSTER_M);
  const int tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n;
  const int units_uniform = tiles * SPLIT_K;          // (split, tile), split-major
  const int k_steps = (K + K_ROWS * kBK - 1) / (K_ROWS * kBK) / SPLIT_K;  // steps of K_ROWS * kBK per unit
  const int batch = blockIdx.z;
  const int cluster = blockIdx.x / CLUSTER_M;
  const int clusters = gridDim.x / CLUSTER_M;
  // TAIL_SPLIT > 1: the tiles of the whole waves (`tiles_whole` of them, every
  // cluster busy) are units of all of K; the `tail` tiles left over are
  // TAIL_SPLIT units each, split-major, of about k_steps / TAIL_SPLIT steps,
  // so the last wave's work is shared by every cluster instead of leaving
  // clusters - tail of them idle. Their partials are summed like split-K's.
  const int tail = TAIL_SPLIT > 1 ? tiles % clusters : 0;
  const int tiles_whole = tiles - tail;
  const int units = TAIL_SPLIT > 1 ? tiles_whole + tail * TAIL_SPLIT : units_uniform;
  // A unit's tile, its first step of K and its count of steps, and for a
  // split unit its split (else -1).
  struct Work {
    int tile, k_first, k_count, split;
  };
  auto work_of = [&](int unit) {
    Work w;
    if (TAIL_SPLIT > 1) {
      if (unit < tiles_whole) {
        w = {unit, 0, k_steps, -1};
      } else {
        const int v = unit - tiles_whole;
        const int split = v / tail;
        // Splits of floor(k_steps * (s + 1) / TAIL_SPLIT) - floor(k_steps * s /
        // TAIL_SPLIT) steps: none empty while k_steps >= TAIL_SPLIT (the host checks).
        const int first = k_steps * split / TAIL_SPLIT;
        w = {tiles_whole + v % tail, first, k_steps * (split + 1) / TAIL_SPLIT - first, split};
      }
    } else {
      w = {unit % tiles, (unit / tiles) * k_steps, k_steps, SPLIT_K > 1 ? unit / tiles : -1};
    }
    return w;
  };
  // Grouped raster order: tile -> (tile_m, tile_n), tile_m this CTA's row of tiles.
  auto locate = [&](int tile, int& tile_m, int& tile_n) {
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (tile / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    tile_m = (first_m + (tile % per_group) % group_rows) * CLUSTER_M + static_cast<int>(rank);
    tile_n = (tile % per_group) / group_rows;
  };

  if (warpgroup == 0) {
    // Producer: 40 registers are plenty for one thread's address arithmetic.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (thread == 0) {
      int step = 0;  // k-steps issued, over all tiles: stage = step % STAGES
      for (int unit = cluster; unit < units; unit += clusters) {
        const Work w = work_of(unit);
        int tile_m, tile_n;
        locate(w.tile, tile_m, tile_n);
        for (int kt = w.k_first; kt < w.k_first + w.k_count; ++kt, ++step) {
          const int s = step % STAGES;
          // The first pass finds every stage empty (waiting on the phase
          // "before" phase 0 returns at once).
          mbar_wait(&empty[s], ((step / STAGES) & 1) ^ 1);
          // A (BM rows) and all of B (BN rows: this CTA's half and the peer's),
          // each slice of K its own box.
          mbar_arrive_expect_tx(&full[s], K_ROWS * (BM + BN) * kRowBytes);
          const int b_row = tile_n * BN + static_cast<int>(rank) * kBRowsLoaded;
#pragma unroll
          for (int r = 0; r < K_ROWS; ++r) {
            const int k0 = (kt * K_ROWS + r) * kBK;
            tma_load_3d(smem_a + s * kTileA + r * kSliceA, &tma_a, &full[s], k0, tile_m * BM, batch);
            TAB* b_part = smem_b + s * kTileB + r * kSliceB + rank * kBRowsLoaded * kBK;
            if constexpr (B_KN) {
              // Boxes of 64 columns x kBK rows of K, at (n, k, batch).
#pragma unroll
              for (int j = 0; j < kBRowsLoaded / kNBlock; ++j) {
                TAB* block = b_part + j * kNBlock * kBK;
                if constexpr (CLUSTER_M == 2) {
                  tma_load_3d_multicast(block, &tma_b, &full[s], b_row + j * kNBlock, k0, batch, 0x3);
                } else {
                  tma_load_3d(block, &tma_b, &full[s], b_row + j * kNBlock, k0, batch);
                }
              }
            } else if constexpr (CLUSTER_M == 2) {
              tma_load_3d_multicast(b_part, &tma_b, &full[s], k0, b_row, batch, 0x3);
            } else {
              tma_load_3d(b_part, &tma_b, &full[s], k0, b_row, batch);
            }
          }
        }
      }
    }
  } else {
    // Consumers: the registers the producer gave back.
    if constexpr (CONSUMERS == 2) {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    } else {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    }
    const int consumer = warpgroup - 1;
    // fp8's per-tensor scales multiply the product, as alpha does.
    if (a_scale != nullptr) alpha *= *a_scale;
    if (b_scale != nullptr) alpha *= *b_scale;
    // The consumer's first row in the tile: its share (cooperative), or all of it.
    const int row_offset = PINGPONG ? 0 : consumer * kRowsPerConsumer;
    const int warp = thread / 32;
    const int lane = thread % 32;
    const long long d_off = static_cast<long long>(batch) * M * N;
    // A stage is handed back to this CTA's producer and, in a cluster, the peer's.
    auto release = [&](int s) {
      if (thread != 0) return;
      if constexpr (CLUSTER_M == 2) {
        mbar_arrive_cluster(&empty[s], 0);
        mbar_arrive_cluster(&empty[s], 1);
      } else {
        mbar_arrive(&empty[s]);
      }
    };
    // kPromote, cooperative: the two consumers' spans are half a span apart,
    // so while one waits for its wgmmas to promote, the other's keep the
    // tensor pipe busy (spans in step drain it for both at once). The first
    // span is shorter; no span is longer than PROMOTE_STEPS.
    // (bench/results/2026-12-01-gemm-sustained-finals-0fa526c.md,
    // fp8, two runs each: the finalists' interleaved times 1-6% lower at
    // 8192 x 4096 x 14336 and 2048 x 4096 x 14336, about 1% sustained;
    // configs of 2-3 stages or 128 rows per consumer 3-15% slower.)
    const int span_offset = kPromote && !PINGPONG ? consumer * (PROMOTE_STEPS / 2) : 0;
    constexpr int kSpan = kPromote ? PROMOTE_STEPS : 1;
    // Ping-pong: this consumer's turns are every other tile of the CTA's.
    const int first_turn = PINGPONG ? consumer : 0;
    constexpr int kTurnStride = PINGPONG ? 2 : 1;
    int consumed = 0;  // cooperative: steps of the CTA's earlier units (the producer's count)
    for (int turn = first_turn; cluster + turn * clusters < units; turn += kTurnStride) {
      const int unit = cluster + turn * clusters;
      const Work w = work_of(unit);
      const int tile = w.tile;
      // The producer's count at this unit's first stage. Ping-pong's units
      // (never tail-split) are all k_steps long; a cooperative consumer takes
      // every unit of the CTA, each as long as it is.
      int step = PINGPONG ? turn * k_steps : consumed;
      consumed += w.k_count;
      int tile_m, tile_n;
      locate(tile, tile_m, tile_n);
      if (PINGPONG && turn > 0) {
        // The other consumer has finished the previous turn's main loop: its
        // mainloop_done completes once per turn, so that is phase (turn - 1) / 2.
        mbar_wait(&mainloop_done[1 - consumer], ((turn - 1) / 2) & 1);
      }
      float acc[kMSub][BN / 2];
      // kPromote: the sum of the accumulator's finished spans (unused otherwise).
      float promoted[kPromote ? kMSub : 1][kPromote ? BN / 2 : 1];
#pragma unroll
      for (int i = 0; i < kMSub; ++i) {
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.0f;
      }
      if constexpr (kPromote) {
#pragma unroll
        for (int i = 0; i < kMSub; ++i) {
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) promoted[i][j] = 0.0f;
        }
      }
      int previous = -1;  // the stage whose wgmmas may still be in flight
      for (int kt = 0; kt < w.k_count; ++kt, ++step) {
        const int s = step % STAGES;
        mbar_wait(&full[s], (step / STAGES) & 1);
        // kPromote: a span's first wgmma overwrites the accumulator (scale-d
        // off) instead of the promotion zeroing it; see the promotion below.
        // (The first span's starts on the zeroed accumulator either way.)
        const bool span_start = kPromote && (kt + span_offset) % kSpan == 0;
        wgmma_fence();
#pragma unroll
        for (int r = 0; r < K_ROWS; ++r) {
          const TAB* sa = smem_a + s * kTileA + r * kSliceA + row_offset * kBK;
          const TAB* sb = smem_b + s * kTileB + r * kSliceB;
#pragma unroll
          for (int kk = 0; kk < kBK / kStepK; ++kk) {
#pragma unroll
            for (int i = 0; i < kMSub; ++i) {
              // A wgmma's step of K is 32 bytes along A's (swizzled) 128-byte
              // rows; of an N-major B, kStepK of its 128-byte rows.
              wgmma_m64<TAB, BN, B_KN>(acc[i], smem_desc(sa + i * 64 * kBK + kk * kStepK),
                                       B_KN ? smem_desc(sb + kk * kStepK * kNBlock, kNBlockBytes)
                                            : smem_desc(sb + kk * kStepK),
                                       span_start && r == 0 && kk == 0 ? 0 : 1);
            }
          }
        }
        wgmma_commit();
        if constexpr (kPromote) {
          if ((kt + 1 + span_offset) % kSpan == 0 && kt + 1 < w.k_count) {
            // The span's wgmmas have written acc. It is not zeroed for the
            // next span, whose first wgmma ignores it (span_start). Zeroing
            // it here compiled to about 290 instructions in the window where
            // the tensor pipe stands drained, against 96 adds without
            // (cuobjdump, 64 x 192 per consumer), and cost 7% at fp8 8192 x
            // 4096 x 14336, up to 23% with spans of one step
            // (bench/results/2026-11-30-gemm-fp8-promotion-6a2c972.md).
            wgmma_wait<0>();
            fence_accumulators(acc);
#pragma unroll
            for (int i = 0; i < kMSub; ++i) {
#pragma unroll
              for (int j = 0; j < BN / 2; ++j) promoted[i][j] += acc[i][j];
            }
            fence_accumulators(acc);  // the next wgmma.fence and wgmmas come after
          }
        }
        wgmma_wait<1>();  // the previous stage's wgmmas have read their operands
        if (previous >= 0) release(previous);
        previous = s;
      }
      wgmma_wait<0>();
      if (previous >= 0) release(previous);
      if constexpr (kPromote) {
        fence_accumulators(acc);
#pragma unroll
        for (int i = 0; i < kMSub; ++i) {
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) acc[i][j] += promoted[i][j];
        }
      }
      if (PINGPONG && thread == 0) mbar_arrive(&mainloop_done[consumer]);
      if constexpr (SPLIT_K > 1) {
        if (!reduce_split_k<kMSub, BN, SPLIT_K, PINGPONG ? 1 : CONSUMERS>(
                acc, ws, split_arrivals, PINGPONG ? consumer : 0, PINGPONG ? thread : consumer * 128 + thread,
                (static_cast<long long>(batch) * tiles + tile) * CLUSTER_M + rank,
                static_cast<long long>(gridDim.z) * tiles * CLUSTER_M, w.split)) {
          continue;  // another split of this tile finishes it
        }
      } else if constexpr (TAIL_SPLIT > 1) {
        // The workspace holds the tail tiles' partials only: slot (batch,
        // tail tile, rank).
        if (w.split >= 0 &&
            !reduce_split_k<kMSub, BN, TAIL_SPLIT, CONSUMERS>(
                acc, ws, split_arrivals, 0, consumer * 128 + thread,
                (static_cast<long long>(batch) * tail + (tile - tiles_whole)) * CLUSTER_M + rank,
                static_cast<long long>(gridDim.z) * tail * CLUSTER_M, w.split)) {
          continue;
        }
      }

      const int warp_row0 = tile_m * BM + row_offset + warp * 16;  // this warp's first row, per m64
      if constexpr (SWAP_AB) {
        // The kernel's rows are D's columns and its columns D's rows: each
        // value goes alone to D^T. Lanes g = 0..7 of a store write 8
        // consecutive columns of one row of D, 16 bytes; D is M <= 32 rows
        // here, so its bytes are few.
#pragma unroll
        for (int i = 0; i < kMSub; ++i) {
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int row = warp_row0 + i * 64 + lane / 4 + 8 * h;  // D's column
                const int col = tile_n * BN + j * 8 + (lane % 4) * 2 + e;  // D's row
                gemm_epilogue::store_one<TD, bf16, EPI, HAS_C>(d + d_off, c + d_off, bias, col, row, N, M, alpha,
                                                               beta, acc[i][4 * j + 2 * h + e]);
              }
            }
          }
        }
        continue;
      }
      bool staged = false;  // bf16 D whose rows are whole 16-byte chunks
      if constexpr (sizeof(TD) == 2) {
        staged = N % 8 == 0;
        if (staged) {
          // Through this warp's staging rows: 16 x 64 values at a time, written
          // as fragments, read back as whole 128-byte row segments, so each
          // global store instruction writes four full lines instead of 32
          // scattered words.
          unsigned char* stage = staging + (consumer * 4 + warp) * kStagingBytesPerWarp;
#pragma unroll
          for (int i = 0; i < kMSub; ++i) {
#pragma unroll
            for (int cb = 0; cb < BN / kStagingCols; ++cb) {
#pragma unroll
              for (int jj = 0; jj < kStagingCols / 8; ++jj) {
                const int j = cb * (kStagingCols / 8) + jj;
                const int col = tile_n * BN + j * 8 + (lane % 4) * 2;
                float v[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                  const int row = warp_row0 + i * 64 + lane / 4 + 8 * h;
                  gemm_epilogue::finish_pair<TD, bf16, EPI, HAS_C>(c + d_off, bias, row, col, M, N, alpha, beta,
                                                                   acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1], v);
                  *reinterpret_cast<unsigned int*>(stage + (lane / 4 + 8 * h) * kStagingPitch + jj * 16 +
                                                   (lane % 4) * 4) = gemm_epilogue::pack_pair<TD>(v);
                }
              }
              __syncwarp();
#pragma unroll
              for (int rr = 0; rr < 4; ++rr) {
                const int r = rr * 4 + lane / 8;
                const int row = warp_row0 + i * 64 + r;
                const int col = tile_n * BN + cb * kStagingCols + (lane % 8) * 8;
                if (row < M && col < N) {
                  const uint4 chunk = *reinterpret_cast<const uint4*>(stage + r * kStagingPitch + (lane % 8) * 16);
                  *reinterpret_cast<uint4*>(d + d_off + static_cast<long long>(row) * N + col) = chunk;
                }
              }
              __syncwarp();
            }
          }
        }
      }
      if (!staged) {
#pragma unroll
        for (int i = 0; i < kMSub; ++i) {
          const int row = warp_row0 + i * 64 + lane / 4;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
            const int col = tile_n * BN + j * 8 + (lane % 4) * 2;
            gemm_epilogue::store_pair<TD, bf16, EPI, HAS_C>(d + d_off, c + d_off, bias, row, col, M, N, alpha,
                                                            beta, acc[i][4 * j], acc[i][4 * j + 1]);
            gemm_epilogue::store_pair<TD, bf16, EPI, HAS_C>(d + d_off, c + d_off, bias, row + 8, col, M, N, alpha,
                                                            beta, acc[i][4 * j + 2], acc[i][4 * j + 3]);
          }
        }
      }
    }
  }
  // In a cluster no CTA leaves while its peer may still multicast into its
  // shared memory or arrive on its barriers.
  if constexpr (CLUSTER_M == 2) cluster_sync();
}

}  // namespace ktune
