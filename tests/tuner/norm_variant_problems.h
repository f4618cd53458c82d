// The norm variants of one shape (ktune.proto's NormProblem), as the space
// tests sweep them: the fused residual add (RMSNorm, both passes), the
// weight offset (both ops, both passes; LayerNorm with a bias), the fp8
// output alone and with the residual add and the offset.
#pragma once

#include <cstdint>
#include <vector>

#include "tuner/core/problem.h"

namespace ktune {

inline std::vector<NormProblem> NormVariantsOf(int64_t m, int64_t n, DType d) {
  std::vector<NormProblem> out;
  NormProblem base;
  base.m = m;
  base.n = n;
  base.input_dtype = base.output_dtype = base.weight_dtype = d;
  for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) {
    NormProblem res = base;
    res.pass = pass;
    res.residual = true;
    out.push_back(res);
    for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
      NormProblem off = base;
      off.op = op;
      off.pass = pass;
      off.has_bias = op == NormOp::kLayerNorm;
      off.weight_offset = true;
      out.push_back(off);
    }
  }
  NormProblem fp8 = base;
  fp8.output_dtype = DType::kFP8E4M3;
  out.push_back(fp8);
  fp8.residual = true;
  fp8.weight_offset = true;
  out.push_back(fp8);
  return out;
}

}  // namespace ktune
