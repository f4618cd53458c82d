// One way for tests, fuzz seeds and benchmarks to write a GEMM problem: the
// fields of a v1::GemmProblem with defaults, A row-major. No Catch here, so
// that tools without a test framework (tests/fuzz/make_seeds.cc) share it;
// tests/tuner/gemm_test_problems.h adds the validation a test wants.
#pragma once

#include <cstdint>

#include "ktune/v1/ktune.pb.h"

namespace ktune {

// Fields in the order an aggregate initializer gives them: {m, n, k, ab, ...}.
struct GemmShape {
  int64_t m = 1, n = 1, k = 1;
  v1::DType ab = v1::BF16;  // A and B alike
  v1::DType d = v1::BF16;
  v1::Layout b_layout = v1::COL_MAJOR;  // nn.Linear's B, [N, K]
  v1::Epilogue epilogue = v1::EPILOGUE_NONE;
  v1::DType c = v1::DTYPE_UNSPECIFIED;  // no C
  int64_t batch = 1;
};

inline v1::GemmProblem MakeGemm(const GemmShape& s) {
  v1::GemmProblem p;
  p.set_m(s.m);
  p.set_n(s.n);
  p.set_k(s.k);
  p.set_batch(s.batch);
  p.set_a_dtype(s.ab);
  p.set_b_dtype(s.ab);
  p.set_c_dtype(s.c);
  p.set_d_dtype(s.d);
  p.set_a_layout(v1::ROW_MAJOR);
  p.set_b_layout(s.b_layout);
  p.set_epilogue(s.epilogue);
  return p;
}

}  // namespace ktune
