// cuBLASLt as a source of GEMM candidates. The library is loaded at run time
// (dlopen of libcublasLt.so.13, like libcuda), so ktuned starts and serves
// NVRTC candidates on machines without it.
//
// A candidate is one of the algorithms cuBLASLt's heuristic returns for the
// problem (its first is what cuBLASLt would run by default), or a variant of
// one of the first few: the same kernel family and tile with one setting
// changed (stages, CTA swizzle, custom option or cluster shape), which the
// heuristic ranks by a model and does not return. The algorithm is
// an opaque 64-byte value: it is stored as bytes with the cuBLASLt version
// (part of the software fingerprint), and re-created from the store after
// cublasLtMatmulAlgoCheck accepts it for the problem on this GPU.
//
// The mapping: ktune's row-major D[M, N] = A[M, K] x B is cuBLASLt's
// column-major D^T[N, M] = op(B) x A^T, so B is cuBLASLt's first operand
// (transposed when ktune's B is [N, K]) and A its second. Served: bf16 A and B
// (fp32 compute, bf16 or fp32 D), and fp8 e4m3 A and B with B as [N, K]
// (cuBLASLt's FP8 needs that "TN" layout) and bf16 D; epilogues none and bias,
// and C (a residual add is C with beta = 1). GELU and SiLU are not offered:
// cuBLASLt's GELU is the tanh approximation, not the erf GELU the problem
// means, and it has no SiLU.
//
// Thread-compatible: one CublasLt per thread (the worker has one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

struct CublasLtAlgo {
  std::string data;              // the 64 bytes of cublasLtMatmulAlgo_t
  uint64_t workspace_bytes = 0;  // what the algorithm needs (heuristic's answer)
  float waves = 0;               // heuristic's device-utilisation estimate
};

// The algorithms of `first`, then those of `more` not already in it (same
// bytes), up to `max` in all: `first`'s order, and so cuBLASLt's default at
// its head, is kept.
std::vector<CublasLtAlgo> MergeCublasLtAlgos(std::vector<CublasLtAlgo> first, const std::vector<CublasLtAlgo>& more,
                                             size_t max);

// The settings of an algorithm that variants change (cuBLASLt's
// CUBLASLT_ALGO_CONFIG_* of the same names); its id and tile stay.
struct CublasLtConfig {
  uint32_t stages = 0;   // STAGES_ID (a cublasLtMatmulStages_t)
  uint32_t swizzle = 0;  // CTA_SWIZZLING: 0 or 1
  uint32_t custom = 0;   // CUSTOM_OPTION
  uint16_t cluster = 0;  // CLUSTER_SHAPE_ID (a cublasLtClusterShape_t)
  bool operator==(const CublasLtConfig& o) const {
    return stages == o.stages && swizzle == o.swizzle && custom == o.custom && cluster == o.cluster;
  }
};

// What an algorithm accepts (cublasLtMatmulAlgoCapGetAttribute), as far as
// variants need it.
struct CublasLtCaps {
  std::vector<uint32_t> stages;  // CAP_STAGES_IDS
  bool swizzle = false;          // CAP_CTA_SWIZZLING_SUPPORT
  uint32_t custom_max = 0;       // CAP_CUSTOM_OPTION_MAX
  bool clusters = false;         // thread block clusters (sm_90 and later)
};

// The configurations one setting away from `seed` that `caps` allows, most
// promising first: the cluster shapes 1x1, 2x1, 1x2, 2x2, 4x1 and 1x4 (on
// the H200 torch's fp8 answer is a 2x1 cluster), the other CTA swizzle, the
// other stage counts, then up to 4 other custom options. cuBLASLt may still
// reject one for a problem: Variants checks each.
std::vector<CublasLtConfig> NeighbourConfigs(const CublasLtConfig& seed, const CublasLtCaps& caps);

// Every setting of a cuBLASLt algorithm (its CUBLASLT_ALGO_CONFIG_*
// attributes), numbered as cuBLASLt's enums number them (cublasLt.h names
// the values: tile 21 is a CUBLASLT_MATMUL_TILE_*, and so on). Two algorithms
// with equal settings run the same kernel: this is how a bench tells that
// ktune's answer is the kernel a peer such as torch._scaled_mm runs.
struct CublasLtAlgoSettings {
  int32_t id = 0;          // CONFIG_ID: the algorithm
  uint32_t tile = 0;       // TILE_ID
  int32_t split_k = 0;     // SPLITK_NUM
  uint32_t reduction = 0;  // REDUCTION_SCHEME
  uint32_t swizzle = 0;    // CTA_SWIZZLING
  uint32_t custom = 0;     // CUSTOM_OPTION
  uint32_t stages = 0;     // STAGES_ID
  uint16_t inner = 0;      // INNER_SHAPE_ID
  uint16_t cluster = 0;    // CLUSTER_SHAPE_ID
  bool operator==(const CublasLtAlgoSettings& o) const {
    return id == o.id && tile == o.tile && split_k == o.split_k && reduction == o.reduction && swizzle == o.swizzle &&
           custom == o.custom && stages == o.stages && inner == o.inner && cluster == o.cluster;
  }
};

// "algo 66 tile 21 splitk 1 reduction 0 swizzle 0 custom 5 stages 30 inner 0 cluster 2".
std::string ToString(const CublasLtAlgoSettings& d);

// Device pointers (CUdeviceptr values) of one GEMM call. c, bias and the fp8
// scales (float, one each) may be 0 when the problem has none.
struct GemmOperands {
  uint64_t a = 0, b = 0, c = 0, d = 0, bias = 0, a_scale = 0, b_scale = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// A cuBLASLt algorithm as a recipe (template kCublasLtTemplateId, no kernels,
// the algorithm's bytes and workspace; the version in template_hash, so the
// kernel cache and quarantine keep versions apart), and back.
// The recipe's arch is left to the caller (the device's).
LaunchRecipe CublasLtRecipe(const CublasLtAlgo& algo, uint64_t version);
CublasLtAlgo CublasLtAlgoOf(const LaunchRecipe& recipe);

// The one cublasLtMatmul call that serves `problem` (the mapping above), in
// cuBLASLt's column-major terms, its operands named as the GEMM runner's
// arguments ("a", "b", "c", "d", "bias", "a_scale", "b_scale"): cuBLASLt's A
// is "b" (and its scale "b_scale"), its B is "a"; no C without one (D then
// doubles as C, beta 0); alpha 1, beta 1 with C. What Describe and Run make
// of a problem, and what a recipe's cublaslt_call tells a launcher.
// REQUIRES: CublasLtCanServe(problem) is OK.
v1::CublasLtCall CublasLtCallFor(const v1::GemmProblem& problem);

// The installed library's cublasLtGetVersion() (no GPU needed), 0 if there is
// none: part of the software fingerprint of GEMM entries. Read once per process.
uint64_t CublasLtLibraryVersion();

// OK if cuBLASLt can serve `problem` (the list above), else
// FAILED_PRECONDITION saying why. REQUIRES: ValidateGemmProblem OK.
absl::Status CublasLtCanServe(const v1::GemmProblem& problem);

// The cuBLASLt workspace every algorithm gets (algorithms needing more are
// not candidates).
inline constexpr uint64_t kCublasLtWorkspaceBytes = uint64_t{32} << 20;
// A second, smaller cap the heuristic is also asked with (PyTorch's: its
// cublasLtMatmul calls pass 1 MiB, by cuBLASLt's trace in
// bench/results/2026-11-30-norms-gemm-95556ee.md, "The kernel torch._scaled_mm
// runs is ktune's answer"): it
// ranks by the workspace allowed, and under 1 MiB it names algorithms the
// 32 MiB list lacks (on the H200, fp8 at M = 16 and 128 with K = 14336;
// one of them is the answer at 128 x 4096 x 14336:
// bench/results/2026-11-30-gemm-paired-263d781.md, 263d781).
inline constexpr uint64_t kCublasLtSmallWorkspaceBytes = uint64_t{1} << 20;

class CublasLt {
 public:
  // Loads the library and creates a handle. FAILED_PRECONDITION naming the
  // library when it is missing or the handle cannot be created.
  static absl::StatusOr<std::unique_ptr<CublasLt>> Open();
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // cublasLtGetVersion(), e.g. 130100 for 13.1.0.
  uint64_t version() const { return version_; }

  // Up to `max_algos` algorithms from the heuristic, best first (the first is
  // cuBLASLt's default choice), each needing at most `max_workspace_bytes`.
  // Needs a GPU (a current CUDA context).
  absl::StatusOr<std::vector<CublasLtAlgo>> Heuristic(const v1::GemmProblem& problem, int max_algos,
                                                      uint64_t max_workspace_bytes);

  // Up to `max_per_seed` algorithms per seed one setting away from it (the
  // first of its NeighbourConfigs that cublasLtMatmulAlgoCheck accepts for
  // `problem` within `max_workspace_bytes`), none equal to a seed or to
  // another; seed by seed. `clusters`: the GPU has thread block clusters.
  // Needs a GPU.
  absl::StatusOr<std::vector<CublasLtAlgo>> Variants(const v1::GemmProblem& problem,
                                                     const std::vector<CublasLtAlgo>& seeds,
                                                     uint64_t max_workspace_bytes, bool clusters, size_t max_per_seed);

  // The tuner's cuBLASLt candidates for `problem`, in the order ties go
  // (first wins): up to `max_heuristic` from the heuristic under
  // kCublasLtWorkspaceBytes (its head is cuBLASLt's default), then what it
  // adds under kCublasLtSmallWorkspaceBytes, up to `max_heuristic` in all;
  // then Variants of the first two, up to 12 each. A failure to list
  // variants costs only them: `variants_status` (may be null) says why.
  // `clusters` as Variants'. Needs a GPU.
  absl::StatusOr<std::vector<CublasLtAlgo>> Candidates(const v1::GemmProblem& problem, int max_heuristic, bool clusters,
                                                       absl::Status* variants_status = nullptr);

  // The settings of `algo`, read from its bytes (no problem or workspace
  // involved). INVALID_ARGUMENT if it is not 64 bytes.
  absl::StatusOr<CublasLtAlgoSettings> ReadSettings(const CublasLtAlgo& algo) const;

  // OK if `algo` (e.g. read back from the store) is valid for `problem` here.
  absl::Status Check(const v1::GemmProblem& problem, const CublasLtAlgo& algo);

  // Enqueues the matmul on `stream` (a CUstream / cudaStream_t) with
  // `workspace` (device pointer, algo.workspace_bytes or more).
  absl::Status Run(const v1::GemmProblem& problem, const CublasLtAlgo& algo, const GemmOperands& operands,
                   uint64_t workspace, uint64_t workspace_bytes, void* stream);

  struct Api;         // the library's entry points (cublaslt.cc)
  class Descriptors;  // the descriptors of one problem (cublaslt.cc)

 private:
  CublasLt(void* library, std::unique_ptr<Api> api, void* handle, uint64_t version);
  void* library_;
  std::unique_ptr<Api> api_;
  void* handle_;
  uint64_t version_;
  // Run's descriptors, kept for the next call with the same problem, bias and
  // scales: a timed launch must not include building them (the events around
  // it would measure host work).
  std::string run_key_;
  std::unique_ptr<Descriptors> run_descriptors_;
};

}  // namespace ktune
