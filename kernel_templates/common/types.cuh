// Element types and conversions for kernels compiled by NVRTC with no headers
// at all (not even cuda_bf16.h / cuda_fp16.h): the 16-bit types are plain bit
// containers and every conversion is one PTX instruction, so the kernels do
// not depend on which CUDA headers a machine has.
//
// Values travel through registers packed in 32-bit words (two 16-bit elements
// per word, element 0 in the low half), which is how they are loaded and stored.
#pragma once

namespace ktune {

struct bf16 {
  unsigned short bits;
};
struct fp16 {
  unsigned short bits;
};
// fp8 e4m3 (OCP "E4M3FN"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities, 0x7f / 0xff are NaN. Storage only (GEMM operands, the fp8
// output of RMSNorm). Its conversions need sm_89 or newer.
struct e4m3 {
  unsigned char bits;
};

// Whether T is e4m3 (no <type_traits> under NVRTC without host headers).
template <typename T>
struct IsE4m3 {
  static constexpr bool value = false;
};
template <>
struct IsE4m3<e4m3> {
  static constexpr bool value = true;
};

static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");
static_assert(sizeof(fp16) == 2, "fp16 must be 2 bytes");

// ---- scalar conversions -----------------------------------------------------

__device__ __forceinline__ float bf16_bits_to_float(unsigned int bits16) {
  return __uint_as_float(bits16 << 16);  // bf16 is the high half of an f32
}

// The two bf16 halves of a packed word as floats. Volatile so the compiler
// converts again at each use instead of keeping a float copy of every element
// alive: the kernels hold rows in registers, packed, and one ALU op per use is
// cheaper than halving the CTAs that fit on an SM.
__device__ __forceinline__ float bf16_lo_to_float(unsigned int word) {
  float r;
  asm volatile("shl.b32 %0, %1, 16;" : "=f"(r) : "r"(word));
  return r;
}

__device__ __forceinline__ float bf16_hi_to_float(unsigned int word) {
  float r;
  asm volatile("and.b32 %0, %1, 0xffff0000;" : "=f"(r) : "r"(word));
  return r;
}

// The same conversions through another instruction (a byte permute). The
// kernels convert each held element twice (sum of squares, then output); if
// both used one instruction, ptxas would merge them and keep a float copy of
// the whole row alive after all.
__device__ __forceinline__ float bf16_lo_to_float_alt(unsigned int word) {
  float r;
  asm volatile("prmt.b32 %0, %1, 0, 0x1044;" : "=f"(r) : "r"(word));
  return r;
}

__device__ __forceinline__ float bf16_hi_to_float_alt(unsigned int word) {
  float r;
  asm volatile("prmt.b32 %0, %1, 0, 0x3244;" : "=f"(r) : "r"(word));
  return r;
}

// A third pair (a byte permute with the operands swapped), for kernels that
// convert each held element three times (LayerNorm forward: mean, variance,
// output): with only two distinct sequences ptxas merges two of the uses and
// keeps a float copy of the row alive across a reduction's barrier.
__device__ __forceinline__ float bf16_lo_to_float_alt2(unsigned int word) {
  float r;
  asm volatile("prmt.b32 %0, 0, %1, 0x5410;" : "=f"(r) : "r"(word));
  return r;
}

__device__ __forceinline__ float bf16_hi_to_float_alt2(unsigned int word) {
  float r;
  asm volatile("prmt.b32 %0, 0, %1, 0x7610;" : "=f"(r) : "r"(word));
  return r;
}

// One element of any of the three types as a float (exact), for code that
// reads elements one at a time (epilogues, checks) rather than packed.
__device__ __forceinline__ float to_float(bf16 v) { return bf16_bits_to_float(v.bits); }
__device__ __forceinline__ float to_float(fp16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}
__device__ __forceinline__ float to_float(float v) { return v; }

// e4m3 widens exactly to fp16, then to f32.
__device__ __forceinline__ float to_float(e4m3 v) {
  unsigned int halves;
  const unsigned short pair = v.bits;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(pair));
  float f;
  asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }" : "=f"(f) : "r"(halves));
  return f;
}

// Two floats to two e4m3 bytes (lo in bits 0..7), rounded to nearest even and
// saturated to +-448 (satfinite: finite values past the largest clamp to it,
// NaN stays NaN), as a quantized activation is.
__device__ __forceinline__ unsigned short pack_e4m3x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned short float_to_bf16_bits(float v) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return r;
}

// The two fp16 halves of a packed word as floats; the half is extracted inside
// the asm so no unpacked 16-bit copies stay alive (see bf16_lo_to_float).
__device__ __forceinline__ float fp16_lo_to_float(unsigned int word) {
  float r;
  asm volatile("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }"
               : "=f"(r)
               : "r"(word));
  return r;
}

__device__ __forceinline__ float fp16_hi_to_float(unsigned int word) {
  float r;
  asm volatile("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, hi; }"
               : "=f"(r)
               : "r"(word));
  return r;
}

__device__ __forceinline__ float fp16_lo_to_float_alt(unsigned int word) {
  float r;
  asm volatile("{ .reg .b16 h; cvt.u16.u32 h, %1; cvt.f32.f16 %0, h; }" : "=f"(r) : "r"(word));
  return r;
}

__device__ __forceinline__ float fp16_hi_to_float_alt(unsigned int word) {
  float r;
  asm volatile("{ .reg .b32 t; .reg .b16 h; shr.b32 t, %1, 16; cvt.u16.u32 h, t; "
               "cvt.f32.f16 %0, h; }"
               : "=f"(r)
               : "r"(word));
  return r;
}

__device__ __forceinline__ unsigned short float_to_fp16_bits(float v) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return r;
}

// Two floats to one word of two 16-bit values: lo in bits 0..15, hi in 16..31.
__device__ __forceinline__ unsigned int pack_bf16x2(float lo, float hi) {
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned int pack_fp16x2(float lo, float hi) {
  unsigned int r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// ---- element traits -----------------------------------------------------------
// ElementTraits<T>::get(words, i) reads element i of a packed array of words,
// ElementTraits<T>::pack(values, words) writes COUNT elements. `i` is a
// compile-time constant after unrolling, so the arrays stay in registers.

template <typename T>
struct ElementTraits;

template <>
struct ElementTraits<float> {
  static constexpr int kBytes = 4;
  __device__ __forceinline__ static float get(const unsigned int* words, int i) {
    return __uint_as_float(words[i]);
  }
  __device__ __forceinline__ static float get_alt(const unsigned int* words, int i) {
    return __uint_as_float(words[i]);
  }
  __device__ __forceinline__ static float get_alt2(const unsigned int* words, int i) {
    return __uint_as_float(words[i]);
  }
  template <int COUNT>
  __device__ __forceinline__ static void pack(const float* values, unsigned int* words) {
#pragma unroll
    for (int i = 0; i < COUNT; ++i) words[i] = __float_as_uint(values[i]);
  }
};

template <>
struct ElementTraits<bf16> {
  static constexpr int kBytes = 2;
  __device__ __forceinline__ static float get(const unsigned int* words, int i) {
    return (i & 1) ? bf16_hi_to_float(words[i >> 1]) : bf16_lo_to_float(words[i >> 1]);
  }
  __device__ __forceinline__ static float get_alt(const unsigned int* words, int i) {
    return (i & 1) ? bf16_hi_to_float_alt(words[i >> 1]) : bf16_lo_to_float_alt(words[i >> 1]);
  }
  __device__ __forceinline__ static float get_alt2(const unsigned int* words, int i) {
    return (i & 1) ? bf16_hi_to_float_alt2(words[i >> 1]) : bf16_lo_to_float_alt2(words[i >> 1]);
  }
  template <int COUNT>
  __device__ __forceinline__ static void pack(const float* values, unsigned int* words) {
    if (COUNT == 1) {
      words[0] = float_to_bf16_bits(values[0]);
    } else {
#pragma unroll
      for (int i = 0; i < COUNT / 2; ++i) words[i] = pack_bf16x2(values[2 * i], values[2 * i + 1]);
    }
  }
};

template <>
struct ElementTraits<fp16> {
  static constexpr int kBytes = 2;
  __device__ __forceinline__ static float get(const unsigned int* words, int i) {
    return (i & 1) ? fp16_hi_to_float(words[i >> 1]) : fp16_lo_to_float(words[i >> 1]);
  }
  __device__ __forceinline__ static float get_alt(const unsigned int* words, int i) {
    return (i & 1) ? fp16_hi_to_float_alt(words[i >> 1]) : fp16_lo_to_float_alt(words[i >> 1]);
  }
  // fp16 has no third sequence that ptxas keeps apart: the register model
  // counts held fp16 elements unpacked anyway.
  __device__ __forceinline__ static float get_alt2(const unsigned int* words, int i) {
    return get_alt(words, i);
  }
  template <int COUNT>
  __device__ __forceinline__ static void pack(const float* values, unsigned int* words) {
    if (COUNT == 1) {
      words[0] = float_to_fp16_bits(values[0]);
    } else {
#pragma unroll
      for (int i = 0; i < COUNT / 2; ++i) words[i] = pack_fp16x2(values[2 * i], values[2 * i + 1]);
    }
  }
};

// e4m3 as an output only (norms write it, nothing here reads it packed):
// four elements per word, element 0 in the low byte.
template <>
struct ElementTraits<e4m3> {
  static constexpr int kBytes = 1;
  template <int COUNT>
  __device__ __forceinline__ static void pack(const float* values, unsigned int* words) {
    if (COUNT == 1) {
      words[0] = pack_e4m3x2(values[0], 0.0f) & 0xffu;
    } else if (COUNT == 2) {
      words[0] = pack_e4m3x2(values[0], values[1]);
    } else {
#pragma unroll
      for (int i = 0; i < COUNT / 4; ++i) {
        words[i] = static_cast<unsigned int>(pack_e4m3x2(values[4 * i], values[4 * i + 1])) |
                   (static_cast<unsigned int>(pack_e4m3x2(values[4 * i + 2], values[4 * i + 3])) << 16);
      }
    }
  }
};

// VEC consecutive elements of T packed in 32-bit words; a single 16-bit
// element occupies the low half of one word.
template <typename T, int VEC>
struct Packed {
  static constexpr int kBytes = VEC * ElementTraits<T>::kBytes;  // bytes in memory
  static constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;     // registers
  static_assert(VEC >= 1 && (VEC & (VEC - 1)) == 0, "VEC must be a power of two");
  unsigned int w[kWords];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0u;
  }
  __device__ __forceinline__ float get(int i) const { return ElementTraits<T>::get(w, i); }
  // Element i again, through different instructions (see bf16_lo_to_float_alt).
  __device__ __forceinline__ float get_alt(int i) const { return ElementTraits<T>::get_alt(w, i); }
  // And a third time (LayerNorm forward; see bf16_lo_to_float_alt2).
  __device__ __forceinline__ float get_alt2(int i) const { return ElementTraits<T>::get_alt2(w, i); }
  __device__ __forceinline__ void set(const float (&values)[VEC]) {
    ElementTraits<T>::template pack<VEC>(values, w);
  }
};

}  // namespace ktune
