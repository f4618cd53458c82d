// bf16 on the host: the bit encodings the kernels read and write (the high
// half of an IEEE f32), for generating inputs and reading outputs back.
#pragma once

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

}  // namespace ktune
