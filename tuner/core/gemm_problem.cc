#include "tuner/core/gemm_problem.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("problem.gemm.", field, ": ", why));
}

std::string Name(v1::DType dtype) {
  absl::StatusOr<DType> d = DTypeFromProto(dtype);
  return d.ok() ? DTypeName(*d) : "none";
}

const char* LayoutName(v1::Layout layout) { return layout == v1::COL_MAJOR ? "col" : "row"; }

}  // namespace

absl::Status ValidateGemmShape(const v1::GemmProblem& p) {
  for (auto [field, value] : {std::pair{"m", p.m()}, std::pair{"n", p.n()}, std::pair{"k", p.k()}}) {
    if (value < 1 || value > kMaxGemmDim) {
      return Bad(field, absl::StrCat("must be in [1, ", kMaxGemmDim, "], got ", value));
    }
  }
  const int64_t batch = p.batch() == 0 ? 1 : p.batch();
  if (batch < 1 || batch > kMaxGemmBatch) {
    return Bad("batch", absl::StrCat("must be in [1, ", kMaxGemmBatch, "] (0 means 1), got ", p.batch()));
  }
  for (auto [field, rows, cols] : {std::tuple{"m * k (A)", p.m(), p.k()}, std::tuple{"n * k (B)", p.n(), p.k()},
                                   std::tuple{"m * n (D)", p.m(), p.n()}}) {
    if (rows * cols > kMaxGemmElements / batch) {
      return Bad(field, absl::StrCat("times batch exceeds ", kMaxGemmElements, " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateGemmProblem(const v1::GemmProblem& p) {
  if (absl::Status s = ValidateGemmShape(p); !s.ok()) return s;
  const bool bf16 = p.a_dtype() == v1::BF16 && p.b_dtype() == v1::BF16;
  const bool fp8 = p.a_dtype() == v1::FP8_E4M3 && p.b_dtype() == v1::FP8_E4M3;
  if (!bf16 && !fp8) {
    return Bad("a_dtype", absl::StrCat("A and B must both be bf16 or both fp8e4m3, got ", Name(p.a_dtype()), " and ",
                                       Name(p.b_dtype())));
  }
  const v1::DType d = p.d_dtype() == v1::DTYPE_UNSPECIFIED ? v1::BF16 : p.d_dtype();
  if (d != v1::BF16 && !(bf16 && d == v1::FP32)) {
    return Bad("d_dtype", absl::StrCat("must be bf16 (or fp32 for bf16 inputs), got ", Name(p.d_dtype())));
  }
  if (p.c_dtype() != v1::DTYPE_UNSPECIFIED && p.c_dtype() != d) {
    return Bad("c_dtype", absl::StrCat("must be unset (no C) or D's dtype ", Name(d), ", got ", Name(p.c_dtype())));
  }
  if (p.a_layout() != v1::LAYOUT_UNSPECIFIED && p.a_layout() != v1::ROW_MAJOR) {
    return Bad("a_layout", "A is [M, K] row-major");
  }
  if (p.b_layout() != v1::LAYOUT_UNSPECIFIED && p.b_layout() != v1::ROW_MAJOR && p.b_layout() != v1::COL_MAJOR) {
    return Bad("b_layout", absl::StrCat("unknown layout ", p.b_layout()));
  }
  // Every fp8 kernel ktune has (cuBLASLt's, the wgmma and skinny templates')
  // reads B K-major: a [K, N] fp8 problem would only fail later, candidate
  // by candidate.
  if (fp8 && p.b_layout() != v1::COL_MAJOR) {
    return Bad("b_layout", "fp8 e4m3 GEMMs take B as [N, K] (COL_MAJOR, cuBLASLt's TN layout); got [K, N]");
  }
  if (!v1::Epilogue_IsValid(p.epilogue())) {
    return Bad("epilogue", absl::StrCat("unknown epilogue ", p.epilogue()));
  }
  if (p.epilogue() == v1::EPILOGUE_RESIDUAL_ADD && p.c_dtype() == v1::DTYPE_UNSPECIFIED) {
    return Bad("c_dtype", "a residual-add epilogue needs C (the residual)");
  }
  return absl::OkStatus();
}

std::string GemmCanonicalKey(const v1::GemmProblem& p) {
  const v1::DType d = p.d_dtype() == v1::DTYPE_UNSPECIFIED ? v1::BF16 : p.d_dtype();
  return absl::StrFormat("gemm m=%d n=%d k=%d batch=%d a=%s b=%s c=%s d=%s a_layout=row b_layout=%s epilogue=%s", p.m(),
                         p.n(), p.k(), p.batch() == 0 ? 1 : p.batch(), Name(p.a_dtype()), Name(p.b_dtype()),
                         Name(p.c_dtype()), Name(d),
                         LayoutName(p.b_layout() == v1::COL_MAJOR ? v1::COL_MAJOR : v1::ROW_MAJOR),
                         absl::AsciiStrToLower(v1::Epilogue_Name(p.epilogue()).substr(9)));
}

double GemmFlops(const v1::GemmProblem& p) {
  return 2.0 * static_cast<double>(p.m()) * static_cast<double>(p.n()) * static_cast<double>(p.k()) *
         static_cast<double>(p.batch() == 0 ? 1 : p.batch());
}

}  // namespace ktune
