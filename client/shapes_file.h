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
//     - {op: gemm, m: 4096, n: 4096, k: 4096}
//
// The top level is either that mapping or just the list of problems.
// Entry fields (anything else is an error, so a typo never silently falls
// back to a default):
//   op            required: rmsnorm.fwd, rmsnorm.bwd, layernorm.fwd, layernorm.bwd, gemm
//   m             required: rows (norms) / M (gemm); a positive integer or a
//                 list of them, one problem each (token counts)
//   n             required: normalized width (norms) / N (gemm)
//   k             gemm only, required there
//   dtype         bf16 (default), fp16, fp32 or fp8e4m3 (ParseDType); for
//                 gemm, A's and B's
//   out_dtype     y / dx (norms), D (gemm); default: dtype
//   weight_dtype  norms: dtype or fp32; default: dtype
//   weight        norms: has a weight (gamma); default true
//   bias          LayerNorm: has a bias (beta); default false. A `bias` under
//                 defaults applies to layernorm entries only.
//   eps           norms: default 1e-6 (kDefaultNormEps)
//   residual      RMSNorm: fused with the residual add (ktune.proto's
//                 NormProblem.residual); default false. A `residual` under
//                 defaults applies to rmsnorm entries only.
//   weight_offset norms: multiply by (1 + w), as Gemma does; default false
//   scale         fp8e4m3 output (RMSNorm forward): the scale candidates are
//                 verified with (out_scale; not part of the key); default 1.
//                 A `scale` under defaults applies to fp8-output entries only.
// A gemm entry is D = A x B^T with A row-major and B column-major ([N, K],
// as nn.Linear's weight), batch 1 and no C; an entry of its own may not set
// weight_dtype, weight, bias, eps, residual, weight_offset or scale, and
// those defaults do not apply to it. `defaults` may set every field but op,
// m, n and k.
// Duplicate problems are dropped (first one kept, by ProblemKey). A file may
// list at most kMaxShapesProblems problems, counting every m value (and every
// use of an alias) before duplicates are dropped; a longer one is refused.
//
// Errors name the file, the line, the entry and the field, e.g.
//   shapes.yaml:7: problems[2].n: must be in [1, 262144], got 300000
// and a file with any bad entry yields no problems at all. A norm entry is
// checked here as ktuned checks it (ValidateNormProblem); a gemm entry only
// for positive m, n and k: its sizes, dtypes and layouts are checked later
// (ValidatePrewarmProblems, then the daemon).
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
absl::StatusOr<std::vector<PrewarmProblem>> ParseShapes(absl::string_view text, const std::string& source);

// Reads `path` (ReadInputFile, kShapesFile) and parses it; when it cannot be
// read, ReadInputFile's error (tuner/core/input_file.h: NOT_FOUND,
// PERMISSION_DENIED, INVALID_ARGUMENT for what is not a regular file or is
// over 16 MiB).
absl::StatusOr<std::vector<PrewarmProblem>> LoadShapesFile(const std::string& path);

}  // namespace ktune
