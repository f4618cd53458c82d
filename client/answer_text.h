// How the ktune CLI prints problems, configs and answers: one line each, the
// same in `get --brief`, `ls`, `tune --candidates` and `prewarm --answers`.
#pragma once

#include <string>

#include "ktune/v1/ktune.pb.h"
#include "tuner/core/describe.h"  // DescribeProblem, DescribeConfig: the problem and config columns

namespace ktune {

// The header of AnswerRow's table, and one row of it: problem, source,
// config, and for a TUNED answer its median time (us) and throughput (TB/s
// for norms, TFLOP/s for GEMMs).
std::string AnswerHeader();
std::string AnswerRow(const v1::Problem& problem, const v1::GetConfigResponse& answer);

}  // namespace ktune
