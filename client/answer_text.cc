#include "client/answer_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/problem.h"
#include "tuner/wire.h"

namespace ktune {

std::string ConfigText(const v1::Config& config) {
  if (config.has_gemm()) {
    if (config.gemm().has_cublaslt()) {
      return absl::StrFormat("cublaslt algorithm (cuBLASLt %d, workspace %d bytes)", config.gemm().cublaslt().version(),
                             config.gemm().cublaslt().workspace_bytes());
    }
    if (config.gemm().has_skinny()) {
      return absl::StrFormat("skinny warps=%d unroll=%d%s", config.gemm().skinny().warps(),
                             config.gemm().skinny().unroll(), config.gemm().skinny().pipelined() ? " pipelined" : "");
    }
    if (config.gemm().has_wgmma()) {
      const v1::WgmmaTile& t = config.gemm().wgmma();
      return absl::StrFormat(
          "wgmma %dx%d consumers=%d%s cluster=%dx1 stages=%d group=%d%s%s%s%s%s", t.block_m(), t.block_n(),
          t.consumers(), t.pingpong() ? " pingpong" : "", t.cluster_m(), t.stages(), t.group_m(),
          t.k_rows() > 1 ? absl::StrCat(" k_rows=", t.k_rows()) : "", t.promote() ? " promote" : "",
          t.split_k() > 1 ? absl::StrCat(" split_k=", t.split_k()) : "",
          t.tail_split() > 1 ? absl::StrCat(" tail_split=", t.tail_split()) : "", t.swap_ab() ? " swap_ab" : "");
    }
    const v1::MmaSyncTile& t = config.gemm().mma_sync();
    return absl::StrFormat("mma_sync %dx%dx%d warps=%dx%d stages=%d group=%d%s", t.block_m(), t.block_n(), t.block_k(),
                           t.warps_m(), t.warps_n(), t.stages(), t.group_m(),
                           t.split_k() > 1 ? absl::StrCat(" split_k=", t.split_k()) : "");
  }
  if (!config.has_norm()) return "-";
  const v1::NormConfig& c = config.norm();
  std::string text = absl::StrFormat("xb=%d rb=%d warps=%d vec=%d depth=%d %s", c.x_block(), c.r_block(), c.num_warps(),
                                     c.vec(), c.pipeline_depth(), c.persistent() ? "persistent" : "looped");
  if (c.split_size() > 0) absl::StrAppend(&text, " split=", c.split_size());
  if (c.cluster() > 1) absl::StrAppend(&text, " cluster=", c.cluster());
  return text;
}

std::string ProblemText(const v1::Problem& problem) {
  if (problem.has_gemm()) {
    const v1::GemmProblem& g = problem.gemm();
    // B's layout tells a linear's forward (B = W^T, [N, K]) from its dgrad ([K, N]).
    return absl::StrFormat("gemm %dx%dx%d %s B[%s]", g.m(), g.n(), g.k(), g.a_dtype() == v1::FP8_E4M3 ? "fp8" : "bf16",
                           g.b_layout() == v1::COL_MAJOR ? "N,K" : "K,N");
  }
  if (!problem.has_norm()) return "?";
  absl::StatusOr<NormProblem> p = NormProblemFromProto(problem.norm());
  if (!p.ok()) return "?";
  return absl::StrFormat("%s %dx%d %s%s%s%s", OpName(*p), p->m, p->n, DTypeName(p->input_dtype),
                         p->weight_dtype != p->input_dtype ? " w:fp32" : "", p->has_weight ? "" : " no-weight",
                         p->has_bias ? " bias" : "");
}

std::string AnswerHeader() {
  return absl::StrFormat("%-36s %-9s %-62s %9s %7s", "problem", "source", "config", "time_us", "TB/s|TF");
}

std::string AnswerRow(const v1::Problem& problem, const v1::GetConfigResponse& answer) {
  if (answer.source() == v1::TUNED) {
    return absl::StrFormat("%-36s %-9s %-62s %9.2f %7.3f", ProblemText(problem), "TUNED", ConfigText(answer.config()),
                           answer.measurement().time_us(), answer.measurement().throughput());
  }
  return absl::StrFormat("%-36s %-9s %-62s %9s %7s", ProblemText(problem), v1::Source_Name(answer.source()),
                         ConfigText(answer.config()), "-", "-");
}

}  // namespace ktune
