// Text and checks over the wire types for the CLI and other clients: plain
// functions over the protos, needing neither NVRTC nor the Op registry, so a
// client can show and check problems of every kind without branching on it.
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// "norm", "gemm", or "?" for a problem of no kind.
std::string_view ProblemKindName(const v1::Problem& problem);

// One short line: "rmsnorm.fwd 4096x4096 bf16", "gemm 1x4096x4096 bf16 B[N,K]";
// "?" for a problem that does not decode.
std::string DescribeProblem(const v1::Problem& problem);

// One short line of a config's knobs: "xb=1 rb=4096 warps=4 ...",
// "wgmma 128x256 consumers=2 ...", "cublaslt algorithm (...)"; "-" for none.
std::string DescribeConfig(const v1::Config& config);

// What a client can check of a problem before asking a daemon: its kind's
// sizes and dtypes (a norm problem's ValidateNormProblem, a GEMM's
// ValidateGemmShape). The daemon checks the rest.
absl::Status CheckProblemShape(const v1::Problem& problem);

}  // namespace ktune
