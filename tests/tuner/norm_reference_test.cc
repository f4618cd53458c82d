// The float64 RMSNorm reference against values computed by hand, and the
// per-dtype tolerances the verifier applies.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tuner/norm_runner.h"

namespace ktune {
namespace {

TEST_CASE("RmsNormForwardReference matches hand-computed values", "[tuner][reference]") {
  // Row 0: x = (3, 4): mean of squares 12.5.  Row 1: x = (1, -1): mean 1.
  const std::vector<double> x = {3, 4, 1, -1};
  std::vector<double> y, rstd;

  SECTION("without weight, eps 0") {
    RmsNormForwardReference(x, nullptr, 2, 2, 0.0, &y, &rstd);
    REQUIRE(rstd.size() == 2);
    REQUIRE(y.size() == 4);
    CHECK(rstd[0] == Approx(1 / std::sqrt(12.5)).epsilon(1e-15));
    CHECK(rstd[1] == Approx(1.0).epsilon(1e-15));
    CHECK(y[0] == Approx(3 / std::sqrt(12.5)).epsilon(1e-15));  // 0.848528...
    CHECK(y[1] == Approx(4 / std::sqrt(12.5)).epsilon(1e-15));  // 1.131370...
    CHECK(y[2] == Approx(1.0));
    CHECK(y[3] == Approx(-1.0));
  }
  SECTION("with weight and eps") {
    const std::vector<double> w = {2.0, 0.5};
    RmsNormForwardReference(x, &w, 2, 2, 0.5, &y, &rstd);
    CHECK(rstd[0] == Approx(1 / std::sqrt(13.0)).epsilon(1e-15));
    CHECK(rstd[1] == Approx(1 / std::sqrt(1.5)).epsilon(1e-15));
    CHECK(y[0] == Approx(6 / std::sqrt(13.0)).epsilon(1e-15));
    CHECK(y[1] == Approx(2 / std::sqrt(13.0)).epsilon(1e-15));
    CHECK(y[2] == Approx(2 / std::sqrt(1.5)).epsilon(1e-15));
    CHECK(y[3] == Approx(-0.5 / std::sqrt(1.5)).epsilon(1e-15));
  }
  SECTION("one element per row normalizes to its sign") {
    const std::vector<double> one = {-0.25, 8};
    RmsNormForwardReference(one, nullptr, 2, 1, 0.0, &y, &rstd);
    CHECK(y[0] == Approx(-1.0));
    CHECK(y[1] == Approx(1.0));
    CHECK(rstd[0] == Approx(4.0));
    CHECK(rstd[1] == Approx(0.125));
  }
}

TEST_CASE("Tolerances follow each dtype's precision", "[tuner][reference]") {
  const Tolerance bf16 = ToleranceFor(DType::kBF16);
  const Tolerance fp16 = ToleranceFor(DType::kFP16);
  const Tolerance fp32 = ToleranceFor(DType::kFP32);
  // Rounding to the dtype (half an ulp) must pass with room for fp32 arithmetic.
  CHECK(bf16.rtol >= std::ldexp(1.0, -8));  // 0.5 ulp of 8 significant bits is 2^-9
  CHECK(fp16.rtol >= std::ldexp(1.0, -10));
  CHECK(fp32.rtol >= std::ldexp(1.0, -23));
  // ...yet tight enough to catch a 1% error (a skipped weight of 0.99).
  CHECK(bf16.rtol < 0.01);
  CHECK(fp16.rtol < 0.01);
  CHECK(fp32.rtol < 0.01);
  CHECK(fp32.rtol < fp16.rtol);
  CHECK(fp16.rtol < bf16.rtol);
  CHECK(fp32.atol < fp16.atol);
  CHECK(fp16.atol < bf16.atol);
}

}  // namespace
}  // namespace ktune
