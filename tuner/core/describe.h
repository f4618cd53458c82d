// Text and checks over the wire types for the CLI and other clients: each
// asks the problem's ProblemKind (tuner/core/problem_kind.h), so a client can
// show and check problems of every kind without NVRTC, the Op registry, or a
// branch on the kind. Thread-safe: pure functions.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// One short line: "rmsnorm.fwd 4096x4096 bf16", "gemm 1x4096x4096 bf16 B[N,K]";
// "?" for a problem that does not decode.
std::string DescribeProblem(const v1::Problem& problem);

// One short line of a config's knobs: "xb=1 rb=4096 warps=4 ...",
// "wgmma 128x256 consumers=2 ...", "cublaslt algorithm (...)"; "-" for none.
std::string DescribeConfig(const v1::Config& config);

// What a client can check of a problem before asking a daemon
// (ProblemKind::CheckShape: a norm problem's ValidateNormProblem, a GEMM's
// ValidateGemmShape); MissingProblemError for a problem of no kind. The
// daemon checks the rest.
absl::Status CheckProblemShape(const v1::Problem& problem);

}  // namespace ktune
