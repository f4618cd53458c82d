// The op families of this build: the registry ktuned, the ktune CLI and the
// tests use. Adding a family is one line in builtin_ops.cc (see
// tuner/README.md, "Adding a third op"); everything else the family needs
// lives in its own folder under tuner/.
// Thread-safe: built once, on first use, and never changed.
#pragma once

#include "tuner/op.h"

namespace ktune {

// Norm and GEMM.
const OpRegistry& BuiltinOps();

}  // namespace ktune
