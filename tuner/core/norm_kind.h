// The norm problems' ProblemKind (tuner/core/problem_kind.h): RMSNorm and
// LayerNorm, forward and backward, keyed by CanonicalKey.
#pragma once

#include "tuner/core/problem_kind.h"

namespace ktune {

const ProblemKind& NormProblemKind();

}  // namespace ktune
