#include "tuner/core/describe.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

std::string DescribeGemmConfig(const v1::GemmConfig& config) {
  if (config.has_cublaslt()) {
    return absl::StrFormat("cublaslt algorithm (cuBLASLt %d, workspace %d bytes)", config.cublaslt().version(),
                           config.cublaslt().workspace_bytes());
  }
  if (config.has_skinny()) {
    return absl::StrFormat("skinny warps=%d unroll=%d%s", config.skinny().warps(), config.skinny().unroll(),
                           config.skinny().pipelined() ? " pipelined" : "");
  }
  if (config.has_wgmma()) {
    const v1::WgmmaTile& t = config.wgmma();
    return absl::StrFormat("wgmma %dx%d consumers=%d%s cluster=%dx1 stages=%d group=%d%s%s%s%s%s", t.block_m(),
                           t.block_n(), t.consumers(), t.pingpong() ? " pingpong" : "", t.cluster_m(), t.stages(),
                           t.group_m(), t.k_rows() > 1 ? absl::StrCat(" k_rows=", t.k_rows()) : "",
                           t.promote() ? " promote" : "", t.split_k() > 1 ? absl::StrCat(" split_k=", t.split_k()) : "",
                           t.tail_split() > 1 ? absl::StrCat(" tail_split=", t.tail_split()) : "",
                           t.swap_ab() ? " swap_ab" : "");
  }
  const v1::MmaSyncTile& t = config.mma_sync();
  return absl::StrFormat("mma_sync %dx%dx%d warps=%dx%d stages=%d group=%d%s", t.block_m(), t.block_n(), t.block_k(),
                         t.warps_m(), t.warps_n(), t.stages(), t.group_m(),
                         t.split_k() > 1 ? absl::StrCat(" split_k=", t.split_k()) : "");
}

std::string DescribeNormConfig(const v1::NormConfig& c) {
  std::string text = absl::StrFormat("xb=%d rb=%d warps=%d vec=%d depth=%d %s", c.x_block(), c.r_block(), c.num_warps(),
                                     c.vec(), c.pipeline_depth(), c.persistent() ? "persistent" : "looped");
  if (c.split_size() > 0) absl::StrAppend(&text, " split=", c.split_size());
  if (c.cluster() > 1) absl::StrAppend(&text, " cluster=", c.cluster());
  return text;
}

}  // namespace

std::string_view ProblemKindName(const v1::Problem& problem) {
  switch (problem.kind_case()) {
    case v1::Problem::kNorm:
      return "norm";
    case v1::Problem::kGemm:
      return "gemm";
    default:
      return "?";
  }
}

std::string DescribeProblem(const v1::Problem& problem) {
  switch (problem.kind_case()) {
    case v1::Problem::kGemm: {
      const v1::GemmProblem& g = problem.gemm();
      // B's layout tells a linear's forward (B = W^T, [N, K]) from its dgrad ([K, N]).
      return absl::StrFormat("gemm %dx%dx%d %s B[%s]", g.m(), g.n(), g.k(),
                             g.a_dtype() == v1::FP8_E4M3 ? "fp8" : "bf16",
                             g.b_layout() == v1::COL_MAJOR ? "N,K" : "K,N");
    }
    case v1::Problem::kNorm: {
      absl::StatusOr<NormProblem> p = NormProblemFromProto(problem.norm());
      if (!p.ok()) return "?";
      return absl::StrFormat("%s %dx%d %s%s%s%s", OpName(*p), p->m, p->n, DTypeName(p->input_dtype),
                             p->weight_dtype != p->input_dtype ? " w:fp32" : "", p->has_weight ? "" : " no-weight",
                             p->has_bias ? " bias" : "");
    }
    default:
      return "?";
  }
}

std::string DescribeConfig(const v1::Config& config) {
  switch (config.kind_case()) {
    case v1::Config::kGemm:
      return DescribeGemmConfig(config.gemm());
    case v1::Config::kNorm:
      return DescribeNormConfig(config.norm());
    default:
      return "-";
  }
}

absl::Status CheckProblemShape(const v1::Problem& problem) {
  if (problem.kind_case() == v1::Problem::kGemm) return ValidateGemmShape(problem.gemm());
  absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
  return norm.ok() ? ValidateNormProblem(*norm) : norm.status();
}

}  // namespace ktune
