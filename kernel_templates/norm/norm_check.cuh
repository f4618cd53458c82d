// The device half of verifying a norm candidate: compares every element of
// its (M, N) output (y, or dx) with the float64 reference, so a tune does not
// copy the whole output back and walk it on the host for every candidate
// (at 65536 x 2048 that walk was ~0.25 s a candidate, most of a cold tune).
//
// The reference is the host's (tuner/norm/norm_runner.cc): the float64 per-row
// terms (mean, rstd, and for the backward mean_j(g * xhat) and mean_j(g)) are
// computed there and passed in `rows`; this kernel evaluates the same
// per-element expression and tolerance in float64, in the same order. Built
// with --fmad=false so no product is fused into an add the host does not
// fuse: the errors match the host check's bit for bit, which NormRunner
// checks on its first Verify.
//
//   (w is 1 + w with WEIGHT_OFFSET)
//   forward:  want = (x - mean) * rstd * w + b
//             allowed = atol + rtol * (|want| + (LAYERNORM ? |w| : 0))
//             (fp8 output: want = clamp(want / out_scale, +-448) first; x is
//             the residual-added h when the forward has a residual)
//   backward: xhat = (x - mean) * rstd, g = dy * w,
//             want = rstd * (g - c2 - xhat * c1)
//             allowed = atol * rstd + rtol * (|want| + rstd * |g|)
//             (RESIDUAL: want += dres first, then allowed += rtol * |dres|)
//   error = |got - want| / allowed; the element fails unless error <= 1
//   (so NaN, what a never-written element holds after the poisoning, fails).
//
// Kernel arguments: x, dy (null forward), dres (null unless RESIDUAL), w, b
// (null when absent), out, rows (float64 [4][M]: mean, rstd, c1, c2; mean 0
// for RMSNorm, c1/c2 unused forward), M, N, atol, rtol, out_scale (fp8
// output), verdict. verdict[0] must start at 0 and ends as
// the largest error's bits (NaN as +inf); verdict[1] must start at ~0 and
// ends as the smallest flat index i * N + j of a failing element (~0: none).
// Any grid of 256-thread blocks (a grid-stride loop covers M * N).
#pragma once

#include "common/types.cuh"

namespace ktune {

namespace norm_check_detail {

template <typename T>
__device__ __forceinline__ double value(T v) {
  return to_float(v);  // exact: every element type widens to float, then double
}

constexpr double kE4m3Max = 448.0;  // the largest finite e4m3

// Non-negative doubles order as their bit patterns do as unsigned integers,
// so the largest error is an integer atomicMax. NaN reads as +inf.
__device__ __forceinline__ unsigned long long error_bits(double err) {
  return err == err ? static_cast<unsigned long long>(__double_as_longlong(err))
                    : 0x7ff0000000000000ull;
}

}  // namespace norm_check_detail

template <typename TIn, typename TW, typename TOut, bool BACKWARD, bool LAYERNORM, bool HAS_W,
          bool HAS_B, bool WEIGHT_OFFSET, bool RESIDUAL>
__global__ void __launch_bounds__(256)
    norm_check(const TIn* __restrict__ x, const TIn* __restrict__ dy, const TIn* __restrict__ dres,
               const TW* __restrict__ w, const TW* __restrict__ b, const TOut* __restrict__ out,
               const double* __restrict__ rows, int M, int N, double atol, double rtol, double out_scale,
               unsigned long long* __restrict__ verdict) {
  using norm_check_detail::error_bits;
  using norm_check_detail::value;
  const long long total = static_cast<long long>(M) * N;
  unsigned long long worst = 0;         // the largest error's bits
  unsigned long long first_bad = ~0ull;  // the smallest failing flat index
  for (long long k = blockIdx.x * 256ll + threadIdx.x; k < total; k += gridDim.x * 256ll) {
    const int i = static_cast<int>(k / N);
    const int j = static_cast<int>(k - static_cast<long long>(i) * N);
    const double mean = rows[i], rstd = rows[M + i];
    const double wj = HAS_W ? (WEIGHT_OFFSET ? 1.0 + value(w[j]) : value(w[j])) : 1.0;
    double want, allowed;
    if (BACKWARD) {
      const double xhat = (value(x[k]) - mean) * rstd;
      const double g = value(dy[k]) * wj;
      want = rstd * (g - rows[3 * M + i] - xhat * rows[2 * M + i]);
      double dres_abs = 0.0;
      if (RESIDUAL) {
        const double d = value(dres[k]);
        want += d;
        dres_abs = fabs(d);
      }
      // |want| includes dres, as in the host check (NormRunner's ExpectedAt).
      allowed = atol * rstd + rtol * (fabs(want) + rstd * fabs(g)) + rtol * dres_abs;
    } else {
      want = (value(x[k]) - mean) * rstd * wj + (HAS_B ? value(b[j]) : 0.0);
      if (IsE4m3<TOut>::value) {
        want = fmin(fmax(want / out_scale, -norm_check_detail::kE4m3Max), norm_check_detail::kE4m3Max);
      }
      allowed = atol + rtol * (fabs(want) + (LAYERNORM ? fabs(wj) : 0.0));
    }
    const double err = fabs(value(out[k]) - want) / allowed;
    const unsigned long long bits = error_bits(err);
    if (bits > worst) worst = bits;
    if (!(err <= 1.0) && static_cast<unsigned long long>(k) < first_bad) first_bad = k;
  }
  // One atomic pair per block: reduce over the warp, then over the block's warps.
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned long long other_worst = __shfl_xor_sync(0xffffffffu, worst, offset);
    const unsigned long long other_bad = __shfl_xor_sync(0xffffffffu, first_bad, offset);
    if (other_worst > worst) worst = other_worst;
    if (other_bad < first_bad) first_bad = other_bad;
  }
  __shared__ unsigned long long block_worst[8], block_first_bad[8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    block_worst[warp] = worst;
    block_first_bad[warp] = first_bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < 8; ++k) {
      if (block_worst[k] > worst) worst = block_worst[k];
      if (block_first_bad[k] < first_bad) first_bad = block_first_bad[k];
    }
    atomicMax(&verdict[0], worst);
    if (first_bad != ~0ull) atomicMin(&verdict[1], first_bad);
  }
}

}  // namespace ktune
