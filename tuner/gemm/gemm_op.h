// The GEMM family as an Op (tuner/op.h): one entry op ("gemm") served by four
// sources, the mma.sync, wgmma and skinny templates and cuBLASLt. Its untuned
// answer is the family that won the H200's bench for the problem; its nearest
// answer re-writes another M's own-template config; its tune is TuneGemm,
// mapped to an entry's fields.
// Thread-safe: no state (the software fingerprint is computed once per process).
#pragma once

#include <memory>

#include "tuner/op.h"

namespace ktune {

std::unique_ptr<Op> MakeGemmOp();

}  // namespace ktune
