// The float64 RMSNorm reference against values computed by hand, and the
// per-dtype tolerances the verifier applies.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "tuner/norm/norm_runner.h"

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

TEST_CASE("the residual add is an f32 add rounded once to the input dtype", "[tuner][reference][variants]") {
  // Ties round to even: bf16 keeps 8 significant bits, fp16 11.
  CHECK(ResidualAddReference(DType::kBF16, 1.0, 0x1.0p-8) == 1.0);
  CHECK(ResidualAddReference(DType::kBF16, 1.0, 3 * 0x1.0p-8) == 1.0 + 0x1.0p-6);
  CHECK(ResidualAddReference(DType::kBF16, 1.5, -0.25) == 1.25);
  CHECK(ResidualAddReference(DType::kFP16, 1.0, 0x1.0p-11) == 1.0);
  CHECK(ResidualAddReference(DType::kFP16, 1.0, 3 * 0x1.0p-11) == 1.0 + 0x1.0p-9);
  CHECK(ResidualAddReference(DType::kFP32, 1.0, 0x1.0p-23) == 1.0 + 0x1.0p-23);
  CHECK(ResidualAddReference(DType::kFP32, 1.0, 0x1.0p-25) == 1.0);  // f32, not f64
  CHECK(ResidualAddReference(DType::kFP16, 60000.0, 10000.0) == std::numeric_limits<double>::infinity());
}

TEST_CASE("the fp8 output reference divides by the scale and saturates at 448", "[tuner][reference][variants]") {
  CHECK(Fp8OutputReference(1.0, 0.5) == 2.0);
  CHECK(Fp8OutputReference(-3.0, 2.0) == -1.5);
  CHECK(Fp8OutputReference(300.0, 0.5) == 448.0);
  CHECK(Fp8OutputReference(-1000.0, 1.0) == -448.0);
  CHECK(Fp8OutputReference(448.0, 1.0) == 448.0);
  // The tolerance: one ulp of e4m3's 4-bit significand, a subnormal step near 0.
  const Tolerance fp8 = ToleranceFor(DType::kFP8E4M3);
  CHECK(fp8.rtol == 0x1.0p-3);
  CHECK(fp8.atol == 0x1.0p-9);
}

// The fused residual add's backward, as norm/norm_bwd.cuh states it: with
// h = x + r and y = rmsnorm(h) * w, and a loss that also reads h through the
// residual stream (L = sum dy * y + sum dres * h), dL/dx = dL/dr =
// NormBackwardReference's dx at h, plus dres. The weight offset: the forward
// with (1 + w) is the plain one with w' = 1 + w, and dL/dw = dL/dw'.
TEST_CASE("the variants' backward: residual and weight offset gradients", "[tuner][reference][variants]") {
  const int64_t m = 3;
  const int64_t n = 5;
  const double eps = 1e-3;
  std::vector<double> x(m * n), r(m * n), dy(m * n), dres(m * n), w(n);
  for (int64_t k = 0; k < m * n; ++k) {
    x[k] = std::sin(1.7 * k + 0.3) * (1 + k % 3);
    r[k] = std::cos(0.4 * k) * 0.7;
    dy[k] = std::cos(0.9 * k + 1.1);
    dres[k] = std::sin(0.5 * k - 0.2);
  }
  for (int64_t j = 0; j < n; ++j) w[j] = 0.1 * j - 0.25;  // small: Gemma's weights sit near 0
  auto offset = [](std::vector<double> v) {
    for (double& e : v) e += 1.0;
    return v;
  };
  auto loss = [&](const std::vector<double>& xs, const std::vector<double>& rs, const std::vector<double>& ws) {
    std::vector<double> h(m * n), y, rstd;
    for (int64_t k = 0; k < m * n; ++k) h[k] = xs[k] + rs[k];
    const std::vector<double> w1 = offset(ws);
    RmsNormForwardReference(h, &w1, m, n, eps, &y, &rstd);
    double l = 0;
    for (int64_t k = 0; k < m * n; ++k) l += dy[k] * y[k] + dres[k] * h[k];
    return l;
  };
  std::vector<double> h(m * n), y, rstd, dx, dw, db;
  for (int64_t k = 0; k < m * n; ++k) h[k] = x[k] + r[k];
  const std::vector<double> w1 = offset(w);
  RmsNormForwardReference(h, &w1, m, n, eps, &y, &rstd);
  NormBackwardReference(false, h, dy, &w1, std::vector<double>(m, 0.0), rstd, m, n, &dx, &dw, &db);
  const double step = 1e-6;
  for (int64_t k = 0; k < m * n; ++k) {
    const double fused_dx = dx[k] + dres[k];
    std::vector<double> xp = x, xm = x, rp = r, rm = r;
    xp[k] += step;
    xm[k] -= step;
    rp[k] += step;
    rm[k] -= step;
    CHECK(fused_dx == Approx((loss(xp, r, w) - loss(xm, r, w)) / (2 * step)).epsilon(1e-6).margin(1e-8));
    CHECK(fused_dx == Approx((loss(x, rp, w) - loss(x, rm, w)) / (2 * step)).epsilon(1e-6).margin(1e-8));
  }
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double> wp = w, wm = w;
    wp[j] += step;
    wm[j] -= step;
    CHECK(dw[j] == Approx((loss(x, r, wp) - loss(x, r, wm)) / (2 * step)).epsilon(1e-6).margin(1e-8));
  }
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("LayerNormForwardReference matches hand-computed values", "[tuner][reference]") {
  // Row 0: x = (1, 3): mean 2, variance 1.  Row 1: x = (10, 10, ...) n = 2: variance 0.
  const std::vector<double> x = {1, 3, 10, 10};
  std::vector<double> y, mean, rstd;
  const std::vector<double> w = {2.0, 0.5};
  const std::vector<double> b = {0.25, -1.0};
  LayerNormForwardReference(x, &w, &b, 2, 2, 0.0, &y, &mean, &rstd);
  CHECK(mean[0] == Approx(2.0));
  CHECK(rstd[0] == Approx(1.0));
  CHECK(y[0] == Approx(-1.0 * 2.0 + 0.25));
  CHECK(y[1] == Approx(1.0 * 0.5 - 1.0));
  LayerNormForwardReference(x, nullptr, nullptr, 2, 2, 0.25, &y, &mean, &rstd);
  CHECK(mean[1] == Approx(10.0));
  CHECK(rstd[1] == Approx(2.0));  // 1 / sqrt(0 + 0.25)
  CHECK(y[2] == Approx(0.0).margin(1e-15));
  CHECK(rstd[0] == Approx(1 / std::sqrt(1.25)));
}

// The backward formulas are the gradient of the forward: compares dx, dw, db
// with central finite differences of L = sum(dy * y(x, w, b)).
TEST_CASE("NormBackwardReference is the gradient of the forward", "[tuner][reference]") {
  const int64_t m = 3;
  const int64_t n = 5;
  const double eps = 1e-3;
  std::vector<double> x(m * n), dy(m * n), w(n), b(n);
  for (int64_t k = 0; k < m * n; ++k) {
    x[k] = std::sin(1.7 * k + 0.3) * (1 + k % 3) + 0.5 * (k / n);
    dy[k] = std::cos(0.9 * k + 1.1);
  }
  for (int64_t j = 0; j < n; ++j) {
    w[j] = 0.75 + 0.1 * j;
    b[j] = 0.2 * j - 0.3;
  }
  for (bool ln : {false, true}) {
    INFO((ln ? "layernorm" : "rmsnorm"));
    auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws, const std::vector<double>& bs) {
      std::vector<double> y, mean, rstd;
      if (ln) {
        LayerNormForwardReference(xs, &ws, &bs, m, n, eps, &y, &mean, &rstd);
      } else {
        RmsNormForwardReference(xs, &ws, m, n, eps, &y, &rstd);
      }
      double l = 0;
      for (int64_t k = 0; k < m * n; ++k) l += dy[k] * y[k];
      return l;
    };
    std::vector<double> y, mean(m, 0.0), rstd;
    if (ln) {
      LayerNormForwardReference(x, &w, &b, m, n, eps, &y, &mean, &rstd);
    } else {
      RmsNormForwardReference(x, &w, m, n, eps, &y, &rstd);
    }
    std::vector<double> dx, dw, db;
    NormBackwardReference(ln, x, dy, &w, mean, rstd, m, n, &dx, &dw, &db);
    const double h = 1e-6;
    for (int64_t k = 0; k < m * n; ++k) {
      std::vector<double> xp = x, xm = x;
      xp[k] += h;
      xm[k] -= h;
      CHECK(dx[k] == Approx((loss(xp, w, b) - loss(xm, w, b)) / (2 * h)).epsilon(1e-6).margin(1e-8));
    }
    for (int64_t j = 0; j < n; ++j) {
      std::vector<double> wp = w, wm = w, bp = b, bm = b;
      wp[j] += h;
      wm[j] -= h;
      bp[j] += h;
      bm[j] -= h;
      CHECK(dw[j] == Approx((loss(x, wp, b) - loss(x, wm, b)) / (2 * h)).epsilon(1e-6).margin(1e-8));
      if (ln) {
        CHECK(db[j] == Approx((loss(x, w, bp) - loss(x, w, bm)) / (2 * h)).epsilon(1e-6).margin(1e-8));
      }
    }
  }
}

}  // namespace
}  // namespace ktune
