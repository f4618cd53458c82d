// The norm family (RMSNorm, LayerNorm; forward and fused backward) as an Op
// (tuner/op.h): its problems' keys and software fingerprint, its configs'
// ranges, its recipes (NormLaunchRecipe), its untuned and nearest answers and
// its tune (TuneNorm) mapped to an entry's fields.
// Thread-safe: no state.
#pragma once

#include <memory>

#include "tuner/op.h"

namespace ktune {

std::unique_ptr<Op> MakeNormOp();

}  // namespace ktune
