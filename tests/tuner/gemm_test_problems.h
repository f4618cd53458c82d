// GEMM problems for the tests (tuner and GPU): bf16 or fp8 A and B, A
// row-major, validated (a test that builds an invalid problem fails at once,
// naming the line).
#pragma once

#include <catch2/catch.hpp>

#include "ktune/v1/ktune.pb.h"
#include "tests/tuner/gemm_problem_builder.h"
#include "tuner/core/gemm_problem.h"

namespace ktune {

inline v1::GemmProblem TestGemm(int64_t m, int64_t n, int64_t k, v1::Layout b_layout = v1::COL_MAJOR,
                                v1::Epilogue epilogue = v1::EPILOGUE_NONE, v1::DType c = v1::DTYPE_UNSPECIFIED,
                                v1::DType d = v1::BF16, int64_t batch = 1) {
  const v1::GemmProblem p = MakeGemm({m, n, k, v1::BF16, d, b_layout, epilogue, c, batch});
  REQUIRE(ValidateGemmProblem(p).ok());
  return p;
}

// nn.Linear's GEMM: B given as [N, K].
inline v1::GemmProblem LinearGemm(int64_t m, int64_t n, int64_t k, v1::Epilogue epilogue = v1::EPILOGUE_NONE,
                                  v1::DType c = v1::DTYPE_UNSPECIFIED, v1::DType d = v1::BF16, int64_t batch = 1) {
  return TestGemm(m, n, k, v1::COL_MAJOR, epilogue, c, d, batch);
}

// FP8 e4m3 A and B with per-tensor scales, B given as [N, K] (the TN layout
// cuBLASLt's fp8 GEMMs take), bf16 D.
inline v1::GemmProblem Fp8Gemm(int64_t m, int64_t n, int64_t k, v1::Epilogue epilogue = v1::EPILOGUE_NONE) {
  v1::GemmProblem p = LinearGemm(m, n, k, epilogue);
  p.set_a_dtype(v1::FP8_E4M3);
  p.set_b_dtype(v1::FP8_E4M3);
  REQUIRE(ValidateGemmProblem(p).ok());
  return p;
}

}  // namespace ktune
