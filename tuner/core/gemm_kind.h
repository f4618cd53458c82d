// The GEMM problems' ProblemKind (tuner/core/problem_kind.h), keyed by
// GemmCanonicalKey.
#pragma once

#include "tuner/core/problem_kind.h"

namespace ktune {

const ProblemKind& GemmProblemKind();

}  // namespace ktune
