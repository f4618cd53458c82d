// Global-memory loads and stores of packed vectors (common/types.cuh) with
// explicit cache hints, as inline PTX so the width (2, 4, 8 or 16 bytes per
// access, 32 as two 16-byte accesses) and the cache policy are exactly what the
// kernel asks for.
//
//   kReuse  : read-only (non-coherent) path, default caching: weights, and
//             data read again soon
//   kOnce   : data read once (x, dy): a plain coherent load, default caching
//   kKeepL2 : data read once, with an L2 evict_last cache policy
//             (createpolicy + .L2::cache_hint): the forward norms' x
// Stores are plain (write-back) as well.
//
// Why no streaming hints: on the H200 at fixed configs
// (bench/results/2026-11-29-norm-memory-hints.md)
// evict-first loads (ld.global.cs) made the norm kernels 2-4% slower forward
// and 6-9% slower backward than plain loads, at the same configs; st.global.cs
// made no difference beyond noise, and plain stores were as fast or faster.
//
// Why kKeepL2 for x read once: in later fixed-config runs
// (bench/results/2026-11-29-norm-fwd-l2-evict-last.md),
// marking the forward's x loads evict_last moved the persistent forward
// kernels with rows of 8 KB and more from 3.96-4.10 to 4.10-4.24 TB/s (+3-6%,
// the speed of torch.compile's Triton kernels, which load x with the same
// policy). On 2 KB rows it was 1-2.5% slower except in one-wave pipelined
// grids (+3%), and on the backward's x and dy 12% slower, so
// tuner/norm/norm_space.cc decides where it is used. The L1::evict_last qualifier
// alone changed nothing.
// Why: bench/results/decisions/norm-memory-hints.md
//
// REQUIRES: every address is aligned to the access width.
#pragma once

#include "common/types.cuh"

namespace ktune {

enum class LoadHint { kReuse, kOnce, kKeepL2 };

template <int BYTES, LoadHint HINT>
struct GlobalAccess;

// One byte (a single fp8 output element): plain accesses, no hints.
template <LoadHint HINT>
struct GlobalAccess<1, HINT> {
  __device__ __forceinline__ static void load(const void* p, unsigned int* w) {
    unsigned short h;
    asm volatile("ld.global.u8 %0, [%1];" : "=h"(h) : "l"(p));
    w[0] = h;
  }
  __device__ __forceinline__ static void store(void* p, const unsigned int* w) {
    const unsigned short h = static_cast<unsigned short>(w[0] & 0xffu);
    asm volatile("st.global.u8 [%0], %1;" ::"l"(p), "h"(h) : "memory");
  }
};

template <LoadHint HINT>
struct GlobalAccess<2, HINT> {
  __device__ __forceinline__ static void load(const void* p, unsigned int* w) {
    unsigned short h;
    if (HINT == LoadHint::kOnce) {
      asm volatile("ld.global.u16 %0, [%1];" : "=h"(h) : "l"(p));
    } else if (HINT == LoadHint::kKeepL2) {
      asm volatile("{\n.reg .b64 policy;\ncreatepolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
                   "ld.global.L2::cache_hint.u16 %0, [%1], policy;\n}" : "=h"(h) : "l"(p));
    } else {
      asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(p));
    }
    w[0] = h;
  }
  __device__ __forceinline__ static void store(void* p, const unsigned int* w) {
    const unsigned short h = static_cast<unsigned short>(w[0]);
    asm volatile("st.global.u16 [%0], %1;" ::"l"(p), "h"(h) : "memory");
  }
};

template <LoadHint HINT>
struct GlobalAccess<4, HINT> {
  __device__ __forceinline__ static void load(const void* p, unsigned int* w) {
    if (HINT == LoadHint::kOnce) {
      asm volatile("ld.global.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    } else if (HINT == LoadHint::kKeepL2) {
      asm volatile("{\n.reg .b64 policy;\ncreatepolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
                   "ld.global.L2::cache_hint.u32 %0, [%1], policy;\n}" : "=r"(w[0]) : "l"(p));
    } else {
      asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    }
  }
  __device__ __forceinline__ static void store(void* p, const unsigned int* w) {
    asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
  }
};

template <LoadHint HINT>
struct GlobalAccess<8, HINT> {
  __device__ __forceinline__ static void load(const void* p, unsigned int* w) {
    if (HINT == LoadHint::kOnce) {
      asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else if (HINT == LoadHint::kKeepL2) {
      asm volatile("{\n.reg .b64 policy;\ncreatepolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
                   "ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], policy;\n}"
                   : "=r"(w[0]), "=r"(w[1])
                   : "l"(p));
    } else {
      asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    }
  }
  __device__ __forceinline__ static void store(void* p, const unsigned int* w) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(w[0]), "r"(w[1])
                 : "memory");
  }
};

template <LoadHint HINT>
struct GlobalAccess<16, HINT> {
  __device__ __forceinline__ static void load(const void* p, unsigned int* w) {
    if (HINT == LoadHint::kOnce) {
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "l"(p));
    } else if (HINT == LoadHint::kKeepL2) {
      asm volatile("{\n.reg .b64 policy;\ncreatepolicy.fractional.L2::evict_last.b64 policy, 1.0;\n"
                   "ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], policy;\n}"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "l"(p));
    } else {
      asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "l"(p));
    }
  }
  __device__ __forceinline__ static void store(void* p, const unsigned int* w) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w[0]), "r"(w[1]),
                 "r"(w[2]), "r"(w[3])
                 : "memory");
  }
};

// 32 bytes (8 fp32 weights beside 8 bf16 inputs) as two 16-byte accesses.
template <LoadHint HINT>
struct GlobalAccess<32, HINT> {
  __device__ __forceinline__ static void load(const void* p, unsigned int* w) {
    GlobalAccess<16, HINT>::load(p, w);
    GlobalAccess<16, HINT>::load(static_cast<const char*>(p) + 16, w + 4);
  }
  __device__ __forceinline__ static void store(void* p, const unsigned int* w) {
    GlobalAccess<16, HINT>::store(p, w);
    GlobalAccess<16, HINT>::store(static_cast<char*>(p) + 16, w + 4);
  }
};

// Asks the bulk-copy engine (sm_90) to bring `bytes` bytes at p into L2, with
// no registers and nothing to wait for: a CTA's next rows while it works on
// these. A no-op before sm_90 (the host only asks for it on sm_90 and later).
// REQUIRES: p and bytes multiples of 16.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, unsigned int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Loads VEC elements of T starting at p into `v`.
template <LoadHint HINT, typename T, int VEC>
__device__ __forceinline__ void load_packed(const T* p, Packed<T, VEC>& v) {
  GlobalAccess<Packed<T, VEC>::kBytes, HINT>::load(p, v.w);
}

// One pass of a thread over a row, as the norm kernels read rows: its CHUNKS
// vectors, chunk c covering columns base + (c * TPR + lane) * VEC .. + VEC,
// TPR threads sharing the row. Vectors outside the row (col >= n), or of a
// row that does not exist (!row_ok), are zero, which adds nothing to sums.
// COLS_IN_ROW (the caller knows every vector of the pass is inside the row,
// n % (TPR * VEC * CHUNKS) == 0) drops the column checks at compile time.
template <LoadHint HINT, int TPR, bool COLS_IN_ROW = false, typename T, int VEC, int CHUNKS>
__device__ __forceinline__ void load_row_chunks(const T* row_ptr, bool row_ok, int lane, int n, int base,
                                                Packed<T, VEC> (&dst)[CHUNKS]) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = base + (c * TPR + lane) * VEC;  // element column of the vector
    dst[c].clear();
    if (row_ok && (COLS_IN_ROW || col < n)) load_packed<HINT>(row_ptr + col, dst[c]);
  }
}

// Stores VEC elements of T from `v` to p.
template <typename T, int VEC>
__device__ __forceinline__ void store_packed(T* p, const Packed<T, VEC>& v) {
  GlobalAccess<Packed<T, VEC>::kBytes, LoadHint::kOnce>::store(p, v.w);
}

}  // namespace ktune
