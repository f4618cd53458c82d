// Low-precision floats on the host, as the kernels read and write them: bf16
// (the high half of an IEEE f32) and fp8 e4m3 (OCP E4M3FN: 1 sign, 4
// exponent bits with bias 7, 3 mantissa bits, no infinities, 0x7f/0xff NaN),
// for generating inputs and reading outputs back.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ktune {

// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, saturating to +-448 (the largest finite e4m3, as
// cvt.rn.satfinite does); NaN stays NaN.
inline uint8_t FloatToE4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 464.0f) return sign | 0x7e;  // halfway between 448 and the next step rounds up: saturate
  if (a < std::ldexp(1.0f, -6)) {       // subnormal: a multiple of 2^-9
    const int mant = static_cast<int>(std::nearbyint(a * 512.0f));  // ties to even
    return static_cast<uint8_t>(sign | mant);                       // mant == 8 is the smallest normal, 0x08
  }
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e - 1)
  int exp = e - 1 + 7;
  int mant = static_cast<int>(std::nearbyint((a / std::ldexp(1.0f, e - 1) - 1.0f) * 8.0f));
  if (mant == 8) {
    mant = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && mant > 6)) return sign | 0x7e;
  return static_cast<uint8_t>(sign | (exp << 3) | mant);
}

inline float E4m3ToFloat(uint8_t b) {
  const int exp = (b >> 3) & 15, mant = b & 7;
  if (exp == 15 && mant == 7) return std::nanf("");
  const float mag =
      exp == 0 ? std::ldexp(static_cast<float>(mant), -9) : std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  return (b & 0x80) ? -mag : mag;
}

}  // namespace ktune
