#include "tuner/core/gemm_kind.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/core/gemm_problem.h"

namespace ktune {
namespace {

std::string DescribeWgmma(const v1::WgmmaTile& t) {
  return absl::StrFormat("wgmma %dx%d consumers=%d%s cluster=%dx1 stages=%d group=%d%s%s%s%s%s", t.block_m(),
                         t.block_n(), t.consumers(), t.pingpong() ? " pingpong" : "", t.cluster_m(), t.stages(),
                         t.group_m(), t.k_rows() > 1 ? absl::StrCat(" k_rows=", t.k_rows()) : "",
                         t.promote() ? " promote" : "", t.split_k() > 1 ? absl::StrCat(" split_k=", t.split_k()) : "",
                         t.tail_split() > 1 ? absl::StrCat(" tail_split=", t.tail_split()) : "",
                         t.swap_ab() ? " swap_ab" : "");
}

std::string DescribeMmaSync(const v1::MmaSyncTile& t) {
  return absl::StrFormat("mma_sync %dx%dx%d warps=%dx%d stages=%d group=%d%s", t.block_m(), t.block_n(), t.block_k(),
                         t.warps_m(), t.warps_n(), t.stages(), t.group_m(),
                         t.split_k() > 1 ? absl::StrCat(" split_k=", t.split_k()) : "");
}

class GemmKind final : public ProblemKind {
 public:
  absl::string_view name() const override { return "gemm"; }
  v1::Problem::KindCase problem_case() const override { return v1::Problem::kGemm; }
  v1::Config::KindCase config_case() const override { return v1::Config::kGemm; }

  absl::StatusOr<ProblemKeyParts> Key(const v1::Problem& problem) const override {
    // A GEMM key is only defined for a valid problem (GemmCanonicalKey).
    if (absl::Status s = ValidateGemmProblem(problem.gemm()); !s.ok()) return s;
    return ProblemKeyParts{"gemm", GemmCanonicalKey(problem.gemm())};
  }

  std::string Describe(const v1::Problem& problem) const override {
    const v1::GemmProblem& g = problem.gemm();
    // B's layout tells a linear's forward (B = W^T, [N, K]) from its dgrad ([K, N]).
    return absl::StrFormat("gemm %dx%dx%d %s B[%s]", g.m(), g.n(), g.k(), g.a_dtype() == v1::FP8_E4M3 ? "fp8" : "bf16",
                           g.b_layout() == v1::COL_MAJOR ? "N,K" : "K,N");
  }

  std::string DescribeConfig(const v1::Config& config) const override {
    const v1::GemmConfig& c = config.gemm();
    if (c.has_cublaslt()) {
      return absl::StrFormat("cublaslt algorithm (cuBLASLt %d, workspace %d bytes)", c.cublaslt().version(),
                             c.cublaslt().workspace_bytes());
    }
    if (c.has_skinny()) {
      return absl::StrFormat("skinny warps=%d unroll=%d%s", c.skinny().warps(), c.skinny().unroll(),
                             c.skinny().pipelined() ? " pipelined" : "");
    }
    if (c.has_wgmma()) return DescribeWgmma(c.wgmma());
    return DescribeMmaSync(c.mma_sync());
  }

  absl::Status CheckShape(const v1::Problem& problem) const override { return ValidateGemmShape(problem.gemm()); }
};

}  // namespace

const ProblemKind& GemmProblemKind() {
  static const GemmKind kind;
  return kind;
}

}  // namespace ktune
