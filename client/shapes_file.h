// Shapes files: the list of problems `ktune prewarm` tunes, in YAML or JSON
// (JSON is read as the YAML it is). Example: deploy/shapes-example.yaml.
//
//   defaults:                 # optional; fills fields an entry leaves out
//     dtype: bf16
//     eps: 1.0e-5
//   problems:
//     - {op: rmsnorm.fwd, m: 8192, n: 4096}
//     - {op: rmsnorm.bwd, m: [1, 16, 128, 2048], n: 4096, weight_dtype: fp32}
//     - {op: layernorm.fwd, m: 4096, n: 1024, bias: true, eps: 1.0e-5}
//     - {op: gemm, m: 4096, n: 4096, k: 4096}   # listed; not served by ktuned yet
//
// The top level is either that mapping or just the list of problems.
// Entry fields (anything else is an error, so a typo never silently falls
// back to a default):
//   op            required: rmsnorm.fwd, rmsnorm.bwd, layernorm.fwd, layernorm.bwd, gemm
//   m             required: rows (norms) / M (gemm); an integer or a list of
//                 integers, one problem each (token counts)
//   n             required: normalized width (norms) / N (gemm)
//   k             gemm only, required there
//   dtype         bf16 (default), fp16, fp32 (gemm: also fp8e4m3)
//   out_dtype     y / dx (norms), D (gemm); default: dtype
//   weight_dtype  norms: dtype or fp32; default: dtype
//   weight        norms: has a weight (gamma); default true
//   bias          LayerNorm: has a bias (beta); default false. A `bias` under
//                 defaults applies to layernorm entries only.
//   eps           norms: default 1e-6
// `defaults` may set dtype, out_dtype, weight_dtype, weight, bias and eps.
// Duplicate problems are dropped (first one kept). A file may list at most
// kMaxShapesProblems problems, counting every m value (and every use of an
// alias) before duplicates are dropped; a longer one is refused.
//
// Errors name the file, the line, the entry and the field, e.g.
//   shapes.yaml:7: problems[2].n: must be in [1, 262144], got 0
// and a file with any bad entry yields no problems at all.
// Thread-safe: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/prewarm_list.h"

namespace ktune {

inline constexpr int64_t kMaxShapesProblems = 100000;

// `source` is the file name used in error messages.
absl::StatusOr<std::vector<PrewarmProblem>> ParseShapes(absl::string_view text,
                                                        const std::string& source);

// Reads `path` and parses it; INVALID_ARGUMENT when it cannot be read.
absl::StatusOr<std::vector<PrewarmProblem>> LoadShapesFile(const std::string& path);

}  // namespace ktune
