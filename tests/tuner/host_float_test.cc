// Host encodings of bf16 and fp8 e4m3 (tuner/gpu/host_float.h): the inputs every
// GEMM and norm check starts from.
#include "tuner/gpu/host_float.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace ktune {
namespace {

TEST_CASE("every finite e4m3 code decodes and encodes back to itself", "[tuner][host_float]") {
  for (int code = 0; code < 256; ++code) {
    INFO(code);
    const float f = E4m3ToFloat(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      CHECK(std::isnan(f));
      continue;
    }
    CHECK(FloatToE4m3(f) == code);
  }
  CHECK(E4m3ToFloat(0x7e) == 448.0f);                // the largest finite
  CHECK(E4m3ToFloat(0x01) == std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK(E4m3ToFloat(0x08) == std::ldexp(1.0f, -6));  // the smallest normal
}

TEST_CASE("e4m3 rounds to nearest even and saturates", "[tuner][host_float]") {
  CHECK(FloatToE4m3(1.0625f) == FloatToE4m3(1.0f));   // halfway between 1 and 1.125: to even (1)
  CHECK(FloatToE4m3(1.1875f) == FloatToE4m3(1.25f));  // halfway between 1.125 and 1.25: to even (1.25)
  CHECK(FloatToE4m3(1e6f) == 0x7e);                   // saturates, no infinity
  CHECK(FloatToE4m3(-1e6f) == 0xfe);
  CHECK(FloatToE4m3(std::ldexp(1.0f, -12)) == 0x00);  // below half the smallest subnormal
  CHECK(FloatToE4m3(std::nanf("")) == 0x7f);
}

TEST_CASE("bf16 rounds to nearest even and keeps NaN", "[tuner][host_float]") {
  CHECK(FloatToBf16(1.0f) == 0x3f80);
  CHECK(Bf16ToFloat(FloatToBf16(3.140625f)) == 3.140625f);    // exactly representable
  CHECK(FloatToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // halfway: to even
  CHECK(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
}

}  // namespace
}  // namespace ktune
