// GEMM problems are validated at the edge even before they are served.
#include "tuner/core/gemm_problem.h"

#include <catch2/catch.hpp>

#include "tests/tuner/gemm_test_problems.h"

namespace ktune {
namespace {

TEST_CASE("GEMM problems in range validate, keys are stable", "[tuner][gemm]") {
  CHECK(ValidateGemmProblem(LinearGemm(1, 4096, 4096)).ok());
  v1::GemmProblem fp8 = LinearGemm(8192, 8192, 8192);
  fp8.set_a_dtype(v1::FP8_E4M3);
  fp8.set_b_dtype(v1::FP8_E4M3);
  CHECK(ValidateGemmProblem(fp8).ok());
  v1::GemmProblem residual = LinearGemm(128, 14336, 4096);
  residual.set_epilogue(v1::EPILOGUE_RESIDUAL_ADD);
  residual.set_c_dtype(v1::BF16);
  CHECK(ValidateGemmProblem(residual).ok());
  CHECK(GemmCanonicalKey(LinearGemm(16, 4096, 4096)) ==
        "gemm m=16 n=4096 k=4096 batch=1 a=bf16 b=bf16 c=none d=bf16 a_layout=row b_layout=col "
        "epilogue=none");
  CHECK(GemmCanonicalKey(residual).find("epilogue=residual_add") != std::string::npos);
  CHECK(GemmFlops(LinearGemm(2, 3, 4)) == 48.0);
}

TEST_CASE("bad GEMM problems name their field", "[tuner][gemm]") {
  struct Case {
    std::function<void(v1::GemmProblem&)> change;
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](v1::GemmProblem& p) { p.set_m(0); }, "problem.gemm.m"},
      {[](v1::GemmProblem& p) { p.set_k(kMaxGemmDim + 1); }, "problem.gemm.k"},
      {[](v1::GemmProblem& p) { p.set_batch(-1); }, "problem.gemm.batch"},
      {[](v1::GemmProblem& p) {
         p.set_m(1 << 20);
         p.set_n(1 << 20);
       },
       "m * n (D)"},
      {[](v1::GemmProblem& p) { p.set_b_dtype(v1::FP8_E4M3); }, "problem.gemm.a_dtype"},
      {[](v1::GemmProblem& p) {
         p.set_a_dtype(v1::FP16);
         p.set_b_dtype(v1::FP16);
       },
       "problem.gemm.a_dtype"},
      {[](v1::GemmProblem& p) { p.set_d_dtype(v1::FP16); }, "problem.gemm.d_dtype"},
      {[](v1::GemmProblem& p) { p.set_c_dtype(v1::FP32); }, "problem.gemm.c_dtype"},
      {[](v1::GemmProblem& p) { p.set_a_layout(v1::COL_MAJOR); }, "problem.gemm.a_layout"},
      {[](v1::GemmProblem& p) {
         p.set_a_dtype(v1::FP8_E4M3);
         p.set_b_dtype(v1::FP8_E4M3);
         p.set_b_layout(v1::ROW_MAJOR);
       },
       "problem.gemm.b_layout"},
      {[](v1::GemmProblem& p) { p.set_epilogue(static_cast<v1::Epilogue>(42)); }, "problem.gemm.epilogue"},
      {[](v1::GemmProblem& p) { p.set_epilogue(v1::EPILOGUE_RESIDUAL_ADD); }, "problem.gemm.c_dtype"},
  };
  for (const Case& c : cases) {
    v1::GemmProblem p = LinearGemm(128, 4096, 4096);
    c.change(p);
    absl::Status s = ValidateGemmProblem(p);
    INFO(c.field << " -> " << s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.field) != std::string::npos);
  }
}

}  // namespace
}  // namespace ktune
