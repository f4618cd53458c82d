// How the ktune CLI prints problems, configs and answers: one line each, the
// same in `get --brief`, `ls`, `tune --candidates` and `prewarm --answers`.
#pragma once

#include <string>

#include "ktune/v1/ktune.pb.h"

namespace ktune {

// "rmsnorm.fwd 8192x4096 bf16", "gemm 128x4096x4096 bf16 B[N,K]"; "?" for a problem
// that does not decode.
std::string ProblemText(const v1::Problem& problem);

// The config's tuning parameters on one line ("xb=1 rb=4096 warps=8 ...",
// "wgmma 128x256 consumers=2 ...", "cublaslt algorithm (...)"); "-" for none.
std::string ConfigText(const v1::Config& config);

// The header of AnswerRow's table, and one row of it: problem, source,
// config, and for a TUNED answer its median time (us) and throughput (TB/s
// for norms, TFLOP/s for GEMMs).
std::string AnswerHeader();
std::string AnswerRow(const v1::Problem& problem, const v1::GetConfigResponse& answer);

}  // namespace ktune
