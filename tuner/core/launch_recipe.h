// What a caller needs to launch a tuned kernel without ktune: which template
// and options produced the cubin, the entry points and their launch geometry,
// and the interface: every argument typed and valued, every tensor with its
// layout contract (ktune.proto's KernelArg, TensorSpec, CublasLtCall, held
// as the wire messages because a launcher reads them as they are).
//
// The interface is a build product like the cubin: each op's TemplateRecipe
// writes it for the problem and config; the cache and bundles store recipes
// without it (StoredRecipe, cache/recipe_check.h) and answers get it fresh.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ktune/v1/ktune.pb.h"

namespace ktune {

// The template id of a recipe that is a cuBLASLt call (tuner/gpu/cublaslt.h).
inline constexpr char kCublasLtTemplateId[] = "cublaslt";
// sizeof(cublasLtMatmulAlgo_t): a cuBLASLt algorithm as stored.
inline constexpr int kCublasLtAlgoBytes = 64;

struct KernelLaunch {
  std::string name_expression;  // "ktune::rmsnorm_fwd<ktune::bf16, ...>"
  std::string lowered_name;     // mangled name in the cubin ("" until compiled)
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t dynamic_smem_bytes = 0;
  std::vector<std::string> params;  // argument order, e.g. {"x", "w", "y", "rstd", "M", "N", "eps"}
  // The kernel waits for the kernel before it in the stream itself (the
  // recipe's previous kernel, or the caller's), so it may be launched as its
  // programmatic dependent (sm_90+; Device::Launch does).
  bool programmatic_dependent = false;
  std::vector<v1::KernelArg> args;  // one per entry of params, in its order
};

struct LaunchRecipe {
  std::string template_id;    // "norm/rmsnorm_fwd"
  std::string template_hash;  // sha256 hex
  std::vector<std::string> nvrtc_options;
  std::string arch;                   // "sm_90"
  std::vector<KernelLaunch> kernels;  // in launch order
  uint64_t workspace_bytes = 0;
  std::string cubin;  // filled once compiled
  // A cuBLASLt call instead of kernels (template_id kCublasLtTemplateId, no
  // kernels): the 64 bytes of its cublasLtMatmulAlgo_t; workspace_bytes of
  // workspace. Empty for kernel recipes.
  std::string cublaslt_algo;
  // The workspace must be zero before the first launch on it; the kernels
  // leave it zero (gemm_wgmma's split-K counters).
  bool workspace_zeroed = false;
  std::vector<v1::TensorSpec> tensors;  // what args and cublaslt_call name
  v1::CublasLtCall cublaslt_call;       // set for cuBLASLt recipes only

  bool is_cublaslt_call() const { return template_id == kCublasLtTemplateId; }
};

}  // namespace ktune
