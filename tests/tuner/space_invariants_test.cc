// Invariants of the norm search spaces (all four ops) over many problems:
// never empty, every config implementable, no duplicates, a deterministic
// order, an implementable heuristic, and recipes whose geometry fits the
// device (backward: the fused kernel, then the reduce kernel with a workspace
// of ceil(M / SPLIT_SIZE) partial rows per gradient).
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/tuner/norm_variant_problems.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

NormProblem Rms(int64_t m, int64_t n, DType dtype, bool weight) {
  NormProblem p;
  p.op = NormOp::kRMSNorm;
  p.pass = NormPass::kForward;
  p.m = m;
  p.n = n;
  p.input_dtype = dtype;
  p.output_dtype = dtype;
  p.weight_dtype = dtype;
  p.has_weight = weight;
  return p;
}

DeviceInfo H200() {
  DeviceInfo d = CompileOnlyTarget();
  d.name = "NVIDIA H200";
  d.l2_bytes = 60 << 20;
  d.memory_bytes = uint64_t{143771} << 20;
  d.driver_version = 13000;
  return d;
}

NormProblem Op(NormOp op, NormPass pass, int64_t m, int64_t n, DType d, DType wt, bool weight, bool bias) {
  NormProblem p = Rms(m, n, d, weight);
  p.op = op;
  p.pass = pass;
  p.weight_dtype = wt;
  p.has_bias = bias;
  return p;
}

std::vector<NormProblem> Problems() {
  std::vector<NormProblem> out;
  for (int64_t m : {1, 7, 4096, 65536}) {
    for (int64_t n : {1, 3, 1000, 1024, 3000, 4096, 5120, 8192, 16384, 262144}) {
      for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32}) {
        for (bool w : {true, false}) {
          for (auto [op, pass] :
               {std::pair{NormOp::kRMSNorm, NormPass::kForward}, std::pair{NormOp::kRMSNorm, NormPass::kBackward},
                std::pair{NormOp::kLayerNorm, NormPass::kForward},
                std::pair{NormOp::kLayerNorm, NormPass::kBackward}}) {
            const bool ln = op == NormOp::kLayerNorm;
            NormProblem p = Op(op, pass, m, n, d, d, w, ln && w);
            if (ValidateNormProblem(p).ok()) out.push_back(p);
            if (w && d != DType::kFP32) {  // fp32 weights beside 16-bit activations
              p.weight_dtype = DType::kFP32;
              if (ValidateNormProblem(p).ok()) out.push_back(p);
            }
          }
        }
      }
    }
  }
  // The variants (ktune.proto's NormProblem): the fused residual add (RMSNorm,
  // both passes), the weight offset (both ops and passes), the fp8 output
  // (RMSNorm forward, alone and with the residual add).
  for (int64_t m : {1, 7, 4096, 65536}) {
    for (int64_t n : {1, 3, 128, 1000, 3000, 4096, 8192, 262144}) {
      for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32}) {
        for (const NormProblem& p : NormVariantsOf(m, n, d)) {
          if (ValidateNormProblem(p).ok()) out.push_back(p);  // not past m * n's bound
        }
      }
    }
  }
  return out;
}

TEST_CASE("NormSearchSpace invariants over many problems", "[tuner][space]") {
  const std::vector<NormProblem> problems = Problems();
  REQUIRE(problems.size() > 1000);
  int clustered = 0;  // clustered configs whose recipes were checked
  for (const DeviceInfo& device : {CompileOnlyTarget(), H200()}) {
    for (const NormProblem& p : problems) {
      INFO(CanonicalKey(p) << " on " << device.name);
      const std::vector<NormConfig> space = NormSearchSpace(p, device);
      REQUIRE_FALSE(space.empty());
      CHECK(space.size() <= 64);  // a cold tune stays within seconds

      // The pruned space; for some backwards the unpruned one too (it alone
      // holds the clustered configs).
      std::vector<NormConfig> checked = space;
      if (p.pass == NormPass::kBackward && p.m >= 4096 && (p.n == 1000 || p.n == 8192) &&
          p.input_dtype == DType::kBF16) {
        SpaceOptions all;
        all.pruned = false;
        for (const NormConfig& c : NormSearchSpace(p, device, all)) {
          if (std::find(checked.begin(), checked.end(), c) == checked.end()) checked.push_back(c);
        }
      }
      std::set<std::string> seen;
      for (const NormConfig& c : checked) {
        INFO(ToString(c));
        const absl::Status can = CanImplement(p, c, device);
        INFO(can.ToString());
        REQUIRE(can.ok());
        CHECK(seen.insert(ToString(c)).second);  // no duplicates

        absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, device);
        REQUIRE(r.ok());
        const bool fwd = p.pass == NormPass::kForward;
        const bool ln = p.op == NormOp::kLayerNorm;
        const int parts = fwd ? 0 : (p.has_weight ? 1 : 0) + (ln && p.has_bias ? 1 : 0);
        // A persistent grid of one CTA, or of one cluster, over every row
        // with partials writes dw and db itself: no workspace, no reduce kernel.
        const bool direct =
            parts > 0 && c.persistent && c.split_size >= 1 && (p.m + c.split_size - 1) / c.split_size <= c.cluster;
        REQUIRE(r->kernels.size() == (parts > 0 && !direct ? 2u : 1u));
        const KernelLaunch& k = r->kernels[0];
        CHECK(r->template_id == NormTemplateId(p));
        CHECK(r->template_hash.size() == 64);
        CHECK(r->arch == Arch(device));
        CHECK(r->cubin.empty());
        CHECK(k.lowered_name.empty());
        // rmsnorm_bwd<, rmsnorm_bwd_cluster< for a cluster, rmsnorm_bwd_single_cta< for one CTA,
        // rmsnorm_bwd_single_cluster< for one cluster.
        const std::string entry =
            "ktune::" + r->template_id.substr(5) +
            (c.cluster > 1 ? (direct ? "_single_cluster<" : "_cluster<") : (direct ? "_single_cta<" : "<"));
        CHECK(k.name_expression.rfind(entry, 0) == 0);
        CHECK(k.block[0] == static_cast<uint32_t>(c.threads()));
        CHECK(k.block[0] <= 1024);
        CHECK(k.block[1] == 1);
        CHECK(k.block[2] == 1);
        CHECK(k.grid[0] >= 1);
        CHECK(k.grid[1] == 1);
        CHECK(k.grid[2] == 1);
        CHECK(k.dynamic_smem_bytes <= static_cast<uint32_t>(device.max_smem_per_block_optin));
        CHECK(c.threads_per_row() >= 4);
        CHECK(c.r_block == c.threads_per_row() * c.vec * c.chunks());
        if (c.persistent) CHECK(c.r_block >= p.n);
        CHECK(p.n % c.vec == 0);
        if (fwd) {
          CHECK(c.split_size == 0);
          CHECK(k.grid[0] <= static_cast<uint32_t>((p.m + c.x_block - 1) / c.x_block));
          CHECK(r->workspace_bytes == 0);
          CHECK(k.params ==
                (ln ? std::vector<std::string>{"x", "w", "b", "y", "mean", "rstd", "M", "N", "eps"}
                    : std::vector<std::string>{"x", "residual", "w", "y", "rstd", "scale", "M", "N", "eps"}));
        } else {
          // A CTA per split, padded to whole clusters; a workspace row per
          // cluster (per CTA without one), staged in the partials' layout.
          const int64_t ctas = (p.m + c.split_size - 1) / c.split_size;
          const int64_t partial_rows = (ctas + c.cluster - 1) / c.cluster;
          CHECK(c.split_size % c.x_block == 0);
          CHECK(k.grid[0] == static_cast<uint32_t>(partial_rows * c.cluster));
          CHECK(r->workspace_bytes ==
                (direct ? 0u : static_cast<uint64_t>(parts) * partial_rows * p.n * sizeof(float)));
          if (direct) CHECK(k.grid[0] == static_cast<uint32_t>(c.cluster));  // one CTA or one cluster
          if (c.cluster > 1) {
            ++clustered;
            CHECK((c.persistent && c.x_block == 1 && parts > 0));
            // The space's floor: at least two clusters of work, or one cluster
            // whose CTAs more than half of have rows.
            if (direct) {
              CHECK(2 * ctas > c.cluster);
            } else {
              CHECK(ctas >= 2 * c.cluster);
            }
            CHECK(k.dynamic_smem_bytes == static_cast<uint32_t>(parts * c.r_block * sizeof(float)));
          }
          if (direct) {
            CHECK(k.params ==
                  (ln ? std::vector<std::string>{"x", "dy", "w", "mean", "rstd", "dx", "dw", "db", "M", "N"}
                      : std::vector<std::string>{"x", "dy", "dresidual", "w", "rstd", "dx", "dw", "M", "N"}));
            CHECK(c.reduce_rows == 0);
            CHECK(ReduceRowsCandidates(p, c).empty());
          } else {
            CHECK(k.params ==
                  (ln ? std::vector<std::string>{"x", "dy", "w", "mean", "rstd", "dx", "ws", "M", "N"}
                      : std::vector<std::string>{"x", "dy", "dresidual", "w", "rstd", "dx", "ws", "M", "N"}));
          }
          if (parts > 0 && !direct) {
            const KernelLaunch& red = r->kernels[1];
            CHECK(red.name_expression.rfind("ktune::norm_bwd_reduce<", 0) == 0);
            CHECK(red.params == std::vector<std::string>{"ws", "dw", "db", "P", "N"});
            CHECK(static_cast<int64_t>(red.grid[0]) * red.block[0] >= p.n);
            CHECK(red.grid[1] == static_cast<uint32_t>(parts));
            CHECK(red.block[0] * red.block[1] <= 1024);
          }
        }
      }

      // Deterministic: the order is the tie-break order.
      CHECK(NormSearchSpace(p, device) == space);

      const NormConfig h = HeuristicNormConfig(p, device);
      INFO("heuristic " << ToString(h));
      CHECK(CanImplement(p, h, device).ok());
      CHECK(NormLaunchRecipe(p, h, device).ok());
    }
  }
  CHECK(clustered > 100);
}

TEST_CASE("Bench shapes get a space of a few dozen candidates", "[tuner][space]") {
  const DeviceInfo device = H200();
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{
           {32768, 1024}, {32768, 4096}, {16384, 8192}, {8192, 16384}, {65536, 2048}, {4096, 4096}}) {
    for (auto [op, pass] :
         {std::pair{NormOp::kRMSNorm, NormPass::kForward}, std::pair{NormOp::kRMSNorm, NormPass::kBackward},
          std::pair{NormOp::kLayerNorm, NormPass::kForward}, std::pair{NormOp::kLayerNorm, NormPass::kBackward}}) {
      const NormProblem p = Op(op, pass, m, n, DType::kBF16, DType::kBF16, true, op == NormOp::kLayerNorm);
      const size_t size = NormSearchSpace(p, device).size();
      const size_t unpruned = NormSearchSpace(p, device, SpaceOptions{.pruned = false}).size();
      INFO(CanonicalKey(p) << ": " << size << " candidates, " << unpruned << " unpruned");
      // Backward rows of 8192+ hold few register geometries (x, dy, w and the
      // fp32 partials per thread): a handful of candidates there.
      CHECK(size >= (pass == NormPass::kBackward && n >= 8192 ? 2u : 8u));
      CHECK(size <= 64);
      CHECK(unpruned > size);
    }
  }
}

TEST_CASE("The unpruned grid contains the pruned space", "[tuner][space]") {
  const DeviceInfo device = H200();
  for (const NormProblem& p :
       {Op(NormOp::kRMSNorm, NormPass::kBackward, 4096, 5120, DType::kBF16, DType::kBF16, true, false),
        Op(NormOp::kLayerNorm, NormPass::kForward, 32768, 1024, DType::kBF16, DType::kFP32, true, true)}) {
    const std::vector<NormConfig> all = NormSearchSpace(p, device, SpaceOptions{.pruned = false});
    for (const NormConfig& c : NormSearchSpace(p, device)) {
      INFO(CanonicalKey(p) << " " << ToString(c));
      CHECK(std::find(all.begin(), all.end(), c) != all.end());
    }
    for (const NormConfig& c : all) CHECK(CanImplement(p, c, device).ok());
  }
}

TEST_CASE("Small-M backward splits fill the SMs", "[tuner][space]") {
  // 4096 rows: SPLIT_SIZE must leave at least one CTA per SM.
  const DeviceInfo device = H200();
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    const NormProblem p =
        Op(op, NormPass::kBackward, 4096, 4096, DType::kBF16, DType::kBF16, true, op == NormOp::kLayerNorm);
    for (const NormConfig& c : NormSearchSpace(p, device)) {
      INFO(ToString(c));
      CHECK((p.m + c.split_size - 1) / c.split_size >= device.sm_count / 2);
    }
    const NormConfig h = HeuristicNormConfig(p, device);
    INFO("heuristic " << ToString(h));
    CHECK((p.m + h.split_size - 1) / h.split_size >= device.sm_count);
  }
}

TEST_CASE("a backward split whose grid nearly fills one wave is a candidate beside the two-wave one",
          "[tuner][space]") {
  // LayerNorm 8192 x 16384, one 512-thread CTA per SM (shared-memory
  // partials): split 32 launches 256 CTAs (1.94 waves of 132), split 64 128
  // (0.97 of a wave, 6% faster on the H200). Both are tried, unpipelined.
  const DeviceInfo device = H200();
  const NormProblem p =
      Op(NormOp::kLayerNorm, NormPass::kBackward, 8192, 16384, DType::kBF16, DType::kBF16, true, true);
  std::set<int> splits;
  for (const NormConfig& c : NormSearchSpace(p, device)) {
    if (c.num_warps == 16 && c.x_block == 1 && c.pipeline_depth == 1) splits.insert(c.split_size);
  }
  CHECK(splits.count(32) == 1);
  CHECK(splits.count(64) == 1);
  // Only while the double fills 90% of a wave: at 4096 rows split 32 (128
  // CTAs) is that double; split 64 (64 CTAs, half the SMs idle) is not tried.
  const NormProblem small =
      Op(NormOp::kLayerNorm, NormPass::kBackward, 4096, 16384, DType::kBF16, DType::kBF16, true, true);
  std::set<int> small_splits;
  for (const NormConfig& c : NormSearchSpace(small, device)) {
    if (c.num_warps == 16 && c.x_block == 1) small_splits.insert(c.split_size);
  }
  CHECK(small_splits.count(32) == 1);
  CHECK(small_splits.count(64) == 0);
}

TEST_CASE("Every norm op has a template, a space and a heuristic", "[tuner][space]") {
  const DeviceInfo device = CompileOnlyTarget();
  for (auto [op, pass, id] : {std::tuple{NormOp::kRMSNorm, NormPass::kForward, "norm/rmsnorm_fwd"},
                              std::tuple{NormOp::kRMSNorm, NormPass::kBackward, "norm/rmsnorm_bwd"},
                              std::tuple{NormOp::kLayerNorm, NormPass::kForward, "norm/layernorm_fwd"},
                              std::tuple{NormOp::kLayerNorm, NormPass::kBackward, "norm/layernorm_bwd"}}) {
    const NormProblem q = Op(op, pass, 4096, 4096, DType::kBF16, DType::kBF16, true, false);
    INFO(OpName(q));
    CHECK(NormTemplateId(q) == id);
    CHECK_FALSE(NormSearchSpace(q, device).empty());
    const NormConfig h = HeuristicNormConfig(q, device);
    CHECK(CanImplement(q, h, device).ok());
    CHECK(NormLaunchRecipe(q, h, device).ok());
    CHECK((h.split_size > 0) == (pass == NormPass::kBackward));
  }
  // RMSNorm backward without a weight: no dw, so no reduce kernel, no workspace.
  const NormProblem nw =
      Op(NormOp::kRMSNorm, NormPass::kBackward, 4096, 4096, DType::kBF16, DType::kBF16, false, false);
  absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(nw, HeuristicNormConfig(nw, device), device);
  REQUIRE(r.ok());
  CHECK(r->kernels.size() == 1);
  CHECK(r->workspace_bytes == 0);
  // A forward config is not a backward one (no split), and vice versa.
  NormProblem fwd = nw;
  fwd.pass = NormPass::kForward;
  CHECK(CanImplement(nw, HeuristicNormConfig(fwd, device), device).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(CanImplement(fwd, HeuristicNormConfig(nw, device), device).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("norm kernels may be launched as programmatic dependents on sm_90 only", "[tuner][space]") {
  DeviceInfo hopper = CompileOnlyTarget();
  REQUIRE(hopper.cc_major == 9);
  DeviceInfo ampere = hopper;
  ampere.cc_major = 8;
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    NormProblem bwd;
    bwd.op = op;
    bwd.m = 4096;
    bwd.n = 4096;
    bwd.pass = NormPass::kBackward;
    bwd.has_bias = op == NormOp::kLayerNorm;
    for (const DeviceInfo& d : {hopper, ampere}) {
      INFO("cc " << d.cc_major << (op == NormOp::kRMSNorm ? " rmsnorm" : " layernorm"));
      auto r = NormLaunchRecipe(bwd, HeuristicNormConfig(bwd, d), d);
      REQUIRE(r.ok());
      REQUIRE(r->kernels.size() == 2);
      CHECK(r->kernels[0].programmatic_dependent == (d.cc_major >= 9));  // waits for the caller's kernel
      CHECK(r->kernels[1].programmatic_dependent == (d.cc_major >= 9));  // waits for the partials
    }
    NormProblem fwd = bwd;
    fwd.pass = NormPass::kForward;
    auto f = NormLaunchRecipe(fwd, HeuristicNormConfig(fwd, hopper), hopper);
    REQUIRE(f.ok());
    CHECK(f->kernels[0].programmatic_dependent);
    auto old = NormLaunchRecipe(fwd, HeuristicNormConfig(fwd, ampere), ampere);
    REQUIRE(old.ok());
    CHECK_FALSE(old->kernels[0].programmatic_dependent);
  }
}

TEST_CASE("a backward over a few rows offers one CTA that writes dw and db itself", "[tuner][space]") {
  const DeviceInfo device = H200();
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    const bool ln = op == NormOp::kLayerNorm;
    for (int64_t m : {1, 4, 16, 64, 128}) {
      INFO((ln ? "layernorm " : "rmsnorm ") << m << " x 4096");
      const NormProblem p = Op(op, NormPass::kBackward, m, 4096, DType::kBF16, DType::kBF16, true, ln);
      int single = 0;
      for (const NormConfig& c : NormSearchSpace(p, device)) {
        if (c.split_size < p.m || c.cluster > 1) continue;
        INFO(ToString(c));
        ++single;
        auto r = NormLaunchRecipe(p, c, device);
        REQUIRE(r.ok());
        REQUIRE(r->kernels.size() == 1);  // no reduce kernel
        CHECK(r->kernels[0].grid[0] == 1u);
        CHECK(r->workspace_bytes == 0u);
        CHECK_THAT(r->kernels[0].name_expression,
                   Catch::StartsWith(ln ? "ktune::layernorm_bwd_single_cta<" : "ktune::rmsnorm_bwd_single_cta<"));
        NormConfig tuned_reduce = c;
        tuned_reduce.reduce_rows = 2;  // nothing to reduce
        CHECK_THAT(std::string(CanImplement(p, tuned_reduce, device).message()), Catch::Contains("reduce_rows"));
      }
      // Up to 64 rows (kSingleCtaMaxRows) the space holds single-CTA configs; beyond, one SM's bandwidth bounds it.
      if (m <= 64) {
        CHECK(single > 0);
      } else {
        CHECK(single == 0);
      }
    }
  }
  // A LayerNorm with a bias and no weight: the single CTA writes db alone.
  // (Single clusters: the next test case.)
  const NormProblem bias_only =
      Op(NormOp::kLayerNorm, NormPass::kBackward, 4, 4096, DType::kBF16, DType::kBF16, false, true);
  bool found = false;
  for (const NormConfig& c : NormSearchSpace(bias_only, device)) {
    if (c.split_size < bias_only.m) continue;
    found = true;
    auto r = NormLaunchRecipe(bias_only, c, device);
    REQUIRE(r.ok());
    CHECK(r->kernels.size() == 1u);
  }
  CHECK(found);
}

TEST_CASE("a backward over a few rows on sm_90 offers one cluster that writes dw and db itself", "[tuner][space]") {
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    const bool ln = op == NormOp::kLayerNorm;
    // (rows, the cluster: as many CTAs as rows up to 8, the fewest rows each)
    for (const auto& [m, cluster, split] : std::vector<std::tuple<int64_t, int, int>>{
             {1, 0, 0}, {2, 2, 1}, {5, 4, 2}, {16, 8, 2}, {48, 8, 8}, {256, 8, 32}, {257, 0, 0}}) {
      INFO((ln ? "layernorm " : "rmsnorm ") << m << " x 4096");
      const NormProblem p = Op(op, NormPass::kBackward, m, 4096, DType::kBF16, DType::kBF16, true, ln);
      int found = 0;
      for (const NormConfig& c : NormSearchSpace(p, H200())) {
        if (c.cluster <= 1) continue;
        INFO(ToString(c));
        ++found;
        CHECK(c.cluster == cluster);
        CHECK(c.split_size == split);
        CHECK(c.x_block == 1);
        auto r = NormLaunchRecipe(p, c, H200());
        REQUIRE(r.ok());
        REQUIRE(r->kernels.size() == 1);  // no reduce kernel
        CHECK(r->kernels[0].grid[0] == static_cast<uint32_t>(cluster));
        CHECK(r->workspace_bytes == 0u);
        CHECK_THAT(r->kernels[0].name_expression, Catch::StartsWith(ln ? "ktune::layernorm_bwd_single_cluster<"
                                                                       : "ktune::rmsnorm_bwd_single_cluster<"));
        CHECK_THAT(r->kernels[0].name_expression, Catch::Contains(", " + std::to_string(cluster) + ">"));
        CHECK(ReduceRowsCandidates(p, c).empty());
      }
      if (cluster > 0) {
        CHECK(found >= 1);
      } else {
        CHECK(found == 0);  // one row has nothing to spread; past 256 rows a split grid
      }
      // Clusters are sm_90's: an sm_80 device gets none.
      DeviceInfo ampere = H200();
      ampere.cc_major = 8;
      for (const NormConfig& c : NormSearchSpace(p, ampere)) CHECK(c.cluster == 1);
    }
  }
}

TEST_CASE("the backward's reduce kernel rows are a knob of their own", "[tuner][space]") {
  const DeviceInfo d = CompileOnlyTarget();
  NormProblem bwd;
  bwd.m = 32768;
  bwd.n = 4096;
  bwd.pass = NormPass::kBackward;
  const NormConfig c = HeuristicNormConfig(bwd, d);
  auto derived = NormLaunchRecipe(bwd, c, d);
  REQUIRE(derived.ok());
  REQUIRE(derived->kernels.size() == 2);
  const std::vector<int> rows = ReduceRowsCandidates(bwd, c);
  REQUIRE_FALSE(rows.empty());
  CHECK(rows.size() <= 2);
  for (int r : rows) {
    INFO(r);
    const int derived_rows = static_cast<int>(derived->kernels[1].block[1]);
    CHECK((r == derived_rows / 2 || r == derived_rows * 2));  // its neighbours, not itself
    NormConfig v = c;
    v.reduce_rows = r;
    auto recipe = NormLaunchRecipe(bwd, v, d);
    REQUIRE(recipe.ok());
    CHECK(recipe->kernels[0].name_expression == derived->kernels[0].name_expression);  // fused unchanged
    CHECK(recipe->kernels[1].block[1] == static_cast<uint32_t>(r));
    CHECK_THAT(ToString(v), Catch::EndsWith(" rr=" + std::to_string(r)));
  }
  NormConfig odd = c;
  odd.reduce_rows = 3;
  CHECK_THAT(std::string(CanImplement(bwd, odd, d).message()), Catch::Contains("reduce_rows"));
  NormProblem fwd = bwd;
  fwd.pass = NormPass::kForward;
  NormConfig f = HeuristicNormConfig(fwd, d);
  CHECK(ReduceRowsCandidates(fwd, f).empty());
  f.reduce_rows = 8;
  CHECK_FALSE(CanImplement(fwd, f, d).ok());
  NormProblem no_weight = bwd;  // RMSNorm backward without a weight: no partials, no reduce kernel
  no_weight.has_weight = false;
  CHECK(ReduceRowsCandidates(no_weight, HeuristicNormConfig(no_weight, d)).empty());
}

TEST_CASE("clusters sum the backward's partials: where they are offered and what they change", "[tuner][space]") {
  const DeviceInfo d = CompileOnlyTarget();
  NormProblem bwd;
  bwd.m = 16384;
  bwd.n = 8192;
  bwd.pass = NormPass::kBackward;
  // Pruned: none (they lost to their twins on the H200). Unpruned: 2, 4, 8.
  for (const NormConfig& c : NormSearchSpace(bwd, d)) CHECK(c.cluster == 1);
  SpaceOptions all;
  all.pruned = false;
  const std::vector<NormConfig> space = NormSearchSpace(bwd, d, all);
  int plain = 0;
  std::map<int, int> clustered;  // cluster size -> configs
  for (const NormConfig& c : space) {
    if (c.cluster == 1) {
      ++plain;
      continue;
    }
    ++clustered[c.cluster];
    INFO(ToString(c));
    CHECK_THAT(ToString(c), Catch::Contains(" cl=" + std::to_string(c.cluster)));
    // Its twin without the cluster is a candidate too, and the recipes differ
    // only where the cluster shows: the entry point, the grid, P, the staging.
    NormConfig twin = c;
    twin.cluster = 1;
    REQUIRE(std::find(space.begin(), space.end(), twin) != space.end());
    auto with = NormLaunchRecipe(bwd, c, d);
    auto without = NormLaunchRecipe(bwd, twin, d);
    REQUIRE(with.ok());
    REQUIRE(without.ok());
    CHECK(with->kernels[0].grid[0] == without->kernels[0].grid[0]);  // 16384 / split: whole clusters
    CHECK(with->workspace_bytes * c.cluster == without->workspace_bytes);
    CHECK(with->kernels[0].dynamic_smem_bytes == static_cast<uint32_t>(c.r_block * 4));
    CHECK_THAT(with->kernels[0].name_expression, Catch::StartsWith("ktune::rmsnorm_bwd_cluster<"));
    CHECK_THAT(with->kernels[0].name_expression, Catch::EndsWith(", " + std::to_string(c.cluster) + ">"));
  }
  CHECK(clustered.size() == 3);  // 2, 4 and 8
  int all_clustered = 0;
  for (const auto& [size, count] : clustered) all_clustered += count;
  CHECK(plain > all_clustered / 3);  // x_block > 1 and looped configs have no cluster form

  // Padding: 1000 rows at split 16 are 63 CTAs, launched as 64 (16 clusters of 4).
  NormConfig c = HeuristicNormConfig(bwd, d);
  REQUIRE(c.x_block == 1);
  bwd.m = 1000;
  c.split_size = 16;
  c.cluster = 4;
  REQUIRE(CanImplement(bwd, c, d).ok());
  auto padded = NormLaunchRecipe(bwd, c, d);
  REQUIRE(padded.ok());
  CHECK(padded->kernels[0].grid[0] == 64u);
  CHECK(padded->workspace_bytes == static_cast<uint64_t>(16 * bwd.n * 4));

  // Refusals, each naming its reason.
  auto refused = [&](const NormProblem& p, const NormConfig& config, const DeviceInfo& device, const char* why) {
    const absl::Status s = CanImplement(p, config, device);
    INFO(ToString(config) << ": " << s.ToString());
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains(why));
  };
  NormConfig three = c;
  three.cluster = 3;
  refused(bwd, three, d, "cluster must be 1, 2, 4 or 8");
  NormConfig sixteen = c;
  sixteen.cluster = 16;
  refused(bwd, sixteen, d, "cluster must be 1, 2, 4 or 8");
  DeviceInfo ampere = d;
  ampere.cc_major = 8;
  refused(bwd, c, ampere, "clusters need sm_90");
  NormProblem no_weight = bwd;
  no_weight.has_weight = false;
  refused(no_weight, c, d, "no weight or bias");
  NormConfig two_rows = c;
  two_rows.x_block = 2;
  refused(bwd, two_rows, d, "one row per CTA");
  NormProblem fwd = bwd;
  fwd.pass = NormPass::kForward;
  NormConfig f = HeuristicNormConfig(fwd, d);
  f.cluster = 4;
  refused(fwd, f, d, "cluster is for the backward pass");
}

// A forward kernel's template argument, counted from the end: 1 is
// CTAS_PER_SM, 2 FULL_TILES, 3 X_KEEP_L2.
std::string ArgumentFromEnd(const std::string& name_expression, int from_end) {
  const size_t open = name_expression.find('<');
  std::vector<std::string> args =
      absl::StrSplit(name_expression.substr(open + 1, name_expression.size() - open - 2), ", ");
  REQUIRE(args.size() >= static_cast<size_t>(from_end));
  return args[args.size() - from_end];
}

std::string KeepXArgument(const std::string& name_expression) { return ArgumentFromEnd(name_expression, 3); }

TEST_CASE("the forward keeps x in L2 on long rows and one-wave pipelines only", "[tuner][space]") {
  const DeviceInfo d = H200();
  auto keep_x = [&](const NormProblem& p, int warps, int tpr, bool persistent, int pipeline) {
    NormConfig c;
    c.num_warps = warps;
    c.x_block = warps * 32 / tpr;
    c.vec = 16 / DTypeBytes(p.input_dtype);
    c.r_block = static_cast<int>((p.n + tpr * c.vec - 1) / (tpr * c.vec)) * tpr * c.vec;
    if (!persistent) c.r_block = tpr * c.vec;
    c.persistent = persistent;
    c.pipeline_depth = pipeline;
    REQUIRE(CanImplement(p, c, d).ok());
    absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    return KeepXArgument(r->kernels[0].name_expression);
  };
  CHECK(keep_x(Rms(16384, 8192, DType::kBF16, true), 16, 512, true, 1) == "true");  // 16 KB rows
  CHECK(keep_x(Rms(65536, 2048, DType::kBF16, true), 4, 128, true, 1) == "true");   // 4 KB rows
  CHECK(keep_x(Rms(32768, 1024, DType::kBF16, true), 2, 64, true, 1) == "false");   // 2 KB rows
  CHECK(keep_x(Rms(32768, 1024, DType::kBF16, true), 2, 64, true, 2) == "true");    // one wave
  CHECK(keep_x(Rms(32768, 1024, DType::kFP32, true), 4, 128, true, 1) == "true");   // 4 KB of fp32
  CHECK(keep_x(Rms(64, 262144, DType::kBF16, true), 8, 256, false, 1) == "false");  // looped
  NormProblem ln = Rms(8192, 16384, DType::kBF16, true);
  ln.op = NormOp::kLayerNorm;
  CHECK(keep_x(ln, 8, 256, true, 1) == "true");
}

TEST_CASE("the forward drops bounds checks only where the config tiles the problem exactly", "[tuner][space]") {
  const DeviceInfo d = H200();
  // warps, threads per row, chunks of VEC, persistent, pipeline depth.
  auto full_tiles = [&](const NormProblem& p, int warps, int tpr, int chunks, bool persistent, int pipeline) {
    NormConfig c;
    c.num_warps = warps;
    c.x_block = warps * 32 / tpr;
    c.vec = 16 / DTypeBytes(p.input_dtype);
    c.r_block = tpr * c.vec * chunks;
    c.persistent = persistent;
    c.pipeline_depth = pipeline;
    REQUIRE(CanImplement(p, c, d).ok());
    absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    return ArgumentFromEnd(r->kernels[0].name_expression, 2);
  };
  CHECK(full_tiles(Rms(32768, 1024, DType::kBF16, true), 2, 64, 2, true, 1) == "true");
  CHECK(full_tiles(Rms(32768, 1024, DType::kBF16, true), 4, 64, 2, true, 1) == "true");    // 2 rows per CTA
  CHECK(full_tiles(Rms(32767, 1024, DType::kBF16, true), 4, 64, 2, true, 1) == "false");   // a last, half row block
  CHECK(full_tiles(Rms(32767, 1024, DType::kBF16, true), 2, 64, 2, true, 1) == "true");    // one row per CTA
  CHECK(full_tiles(Rms(4096, 1000, DType::kBF16, true), 2, 64, 2, true, 1) == "false");    // a padded pass
  CHECK(full_tiles(Rms(4096, 1024, DType::kBF16, true), 2, 64, 4, true, 1) == "false");    // a half-empty pass
  CHECK(full_tiles(Rms(32768, 1024, DType::kBF16, true), 2, 64, 2, true, 2) == "false");   // pipelined
  CHECK(full_tiles(Rms(64, 262144, DType::kBF16, true), 8, 256, 1, false, 1) == "false");  // looped
  CHECK(full_tiles(Rms(32768, 2048, DType::kBF16, true), 4, 128, 2, true, 1) == "false");  // 4 KB rows
  CHECK(full_tiles(Rms(32768, 512, DType::kFP32, true), 2, 64, 2, true, 1) == "true");     // 2 KB of fp32
  NormProblem ln = Rms(32768, 1024, DType::kBF16, true);
  ln.op = NormOp::kLayerNorm;
  ln.has_bias = true;
  CHECK(full_tiles(ln, 2, 64, 2, true, 1) == "true");
}

TEST_CASE("hoisted params count as live registers where bounds checks are dropped", "[tuner][space]") {
  const DeviceInfo d = H200();
  NormProblem ln = Rms(32768, 1024, DType::kBF16, true);
  ln.op = NormOp::kLayerNorm;
  ln.has_bias = true;
  NormConfig c = HeuristicNormConfig(ln, d);  // 4 warps, 2 rows of 64 threads, 2 chunks of 8 bf16
  std::tie(c.num_warps, c.x_block, c.vec, c.r_block, c.persistent, c.pipeline_depth) =
      std::make_tuple(4, 2, 8, 1024, true, 1);
  auto ctas_per_sm = [&](const NormProblem& p) {
    absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    return std::stoi(ArgumentFromEnd(r->kernels[0].name_expression, 1));
  };
  // Exact: x (8 words) and every w and b vector (16) live, 40 more: 64
  // registers, 8 warps per sub-partition, 8 CTAs of 4 warps. M odd: x and
  // one vector each of w and b (16), 56 registers, 9 warps, 9 CTAs.
  CHECK(ctas_per_sm(ln) == 8);
  ln.m = 32767;
  CHECK(ctas_per_sm(ln) == 9);
}

TEST_CASE("the LayerNorm backward prefetches its next rows into L2 when unpipelined on sm_90", "[tuner][space]") {
  // PREFETCH_L2 is the fused kernel's last template argument.
  auto prefetch = [](const NormProblem& p, NormConfig c, int pipeline, const DeviceInfo& d) {
    c.pipeline_depth = pipeline;
    REQUIRE(CanImplement(p, c, d).ok());
    absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    const std::string& e = r->kernels[0].name_expression;
    return e.substr(e.rfind(", ") + 2, e.size() - e.rfind(", ") - 3);
  };
  const DeviceInfo h200 = H200();
  NormProblem ln = Rms(8192, 16384, DType::kBF16, true);
  ln.op = NormOp::kLayerNorm;
  ln.pass = NormPass::kBackward;
  ln.has_bias = true;
  NormConfig c;
  c.num_warps = 16;
  c.vec = 8;
  c.r_block = 16384;
  c.split_size = 64;
  CHECK(prefetch(ln, c, 1, h200) == "true");
  NormProblem ln8k = ln;  // the H200 winner at 16384 x 8192: pipelined, rows in registers
  ln8k.m = 16384;
  ln8k.n = 8192;
  NormConfig c8k = c;
  c8k.r_block = 8192;
  CHECK(prefetch(ln8k, c8k, 1, h200) == "true");
  CHECK(prefetch(ln8k, c8k, 2, h200) == "false");
  DeviceInfo a100 = h200;  // the bulk-copy engine is sm_90's
  a100.cc_major = 8;
  CHECK(prefetch(ln, c, 1, a100) == "false");
  NormProblem rms = ln;  // measured -2 to +1%: not for RMSNorm
  rms.op = NormOp::kRMSNorm;
  rms.has_bias = false;
  CHECK(prefetch(rms, c, 1, h200) == "false");
  NormProblem odd = ln;  // rows of 1004 * 2 bytes: not whole 16-byte units
  odd.n = 1004;
  NormConfig o = c;
  o.num_warps = 8;
  o.vec = 4;
  o.r_block = 1024;
  CHECK(prefetch(odd, o, 1, h200) == "false");
}

TEST_CASE("CanImplement says why a config cannot run", "[tuner][space]") {
  const DeviceInfo device = CompileOnlyTarget();
  const NormProblem p = Rms(4096, 3000, DType::kBF16, true);
  NormConfig good;
  good.num_warps = 4;
  good.x_block = 1;
  good.vec = 8;
  good.r_block = 128 * 8 * 3;  // 3 chunks cover 3000
  good.persistent = true;
  good.pipeline_depth = 1;
  REQUIRE(CanImplement(p, good, device).ok());

  auto rejected = [&](NormConfig c) {
    const absl::Status s = CanImplement(p, c, device);
    INFO(ToString(c) << " -> " << s.ToString());
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_FALSE(s.message().empty());
  };
  NormConfig c = good;
  c.vec = 16;  // 32 bytes of bf16
  c.r_block = 128 * 16 * 2;
  rejected(c);
  c = good;
  c.r_block = 128 * 8 * 2;  // 2048 < N
  rejected(c);
  c = good;
  c.persistent = false;
  c.pipeline_depth = 2;
  rejected(c);
  c = good;
  c.num_warps = 3;
  rejected(c);
  c = good;
  c.x_block = 64;  // 2 threads per row
  rejected(c);
  c = good;
  c.r_block = 1000;  // not threads * vec * chunks
  rejected(c);
  c = good;
  c.split_size = 4;
  rejected(c);
  c = good;
  c.num_warps = 32;
  c.r_block = 1024 * 8 * 16;  // far too many registers for 1024 threads
  rejected(c);

  NormProblem odd = p;
  odd.n = 3001;  // not a multiple of 8
  CHECK(CanImplement(odd, good, device).code() == absl::StatusCode::kFailedPrecondition);

  DeviceInfo old = device;
  old.cc_major = 7;
  CHECK(CanImplement(p, good, old).code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ktune
