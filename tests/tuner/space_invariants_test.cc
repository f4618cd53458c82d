// Invariants of the RMSNorm forward search space over many problems: never
// empty, every config implementable, no duplicates, a deterministic order, an
// implementable heuristic, and recipes whose geometry fits the device.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "tuner/norm_space.h"

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

std::vector<NormProblem> Problems() {
  std::vector<NormProblem> out;
  for (int64_t m : {1, 7, 4096, 65536}) {
    for (int64_t n : {1, 3, 1000, 1024, 3000, 4096, 5120, 8192, 16384, 262144}) {
      for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32}) {
        for (bool w : {true, false}) {
          NormProblem p = Rms(m, n, d, w);
          if (ValidateNormProblem(p).ok()) out.push_back(p);
        }
      }
    }
  }
  return out;
}

TEST_CASE("NormSearchSpace invariants over many problems", "[tuner][space]") {
  const std::vector<NormProblem> problems = Problems();
  REQUIRE(problems.size() > 200);
  for (const DeviceInfo& device : {CompileOnlyTarget(), H200()}) {
    for (const NormProblem& p : problems) {
      INFO(CanonicalKey(p) << " on " << device.name);
      const std::vector<NormConfig> space = NormSearchSpace(p, device);
      REQUIRE_FALSE(space.empty());
      CHECK(space.size() <= 64);  // a cold tune stays within seconds

      std::set<std::string> seen;
      for (const NormConfig& c : space) {
        INFO(ToString(c));
        const absl::Status can = CanImplement(p, c, device);
        INFO(can.ToString());
        REQUIRE(can.ok());
        CHECK(seen.insert(ToString(c)).second);  // no duplicates

        absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, device);
        REQUIRE(r.ok());
        REQUIRE(r->kernels.size() == 1);
        const KernelLaunch& k = r->kernels[0];
        CHECK(r->template_id == "norm/rmsnorm_fwd");
        CHECK(r->template_hash.size() == 64);
        CHECK(r->arch == Arch(device));
        CHECK(r->cubin.empty());
        CHECK(k.lowered_name.empty());
        CHECK(k.name_expression.rfind("ktune::rmsnorm_fwd<", 0) == 0);
        CHECK(k.block[0] == static_cast<uint32_t>(c.threads()));
        CHECK(k.block[0] <= 1024);
        CHECK(k.block[1] == 1);
        CHECK(k.block[2] == 1);
        CHECK(k.grid[0] >= 1);
        CHECK(k.grid[0] <= static_cast<uint32_t>((p.m + c.x_block - 1) / c.x_block));
        CHECK(k.grid[1] == 1);
        CHECK(k.grid[2] == 1);
        CHECK(k.dynamic_smem_bytes <= static_cast<uint32_t>(device.max_smem_per_block_optin));
        CHECK(k.params == std::vector<std::string>{"x", "w", "y", "rstd", "M", "N", "eps"});
        CHECK(c.threads_per_row() >= 4);
        CHECK(c.r_block == c.threads_per_row() * c.vec * c.chunks());
        if (c.persistent) CHECK(c.r_block >= p.n);
        CHECK(p.n % c.vec == 0);
      }

      // Deterministic: the order is the tie-break order.
      CHECK(NormSearchSpace(p, device) == space);

      const NormConfig h = HeuristicNormConfig(p, device);
      INFO("heuristic " << ToString(h));
      CHECK(CanImplement(p, h, device).ok());
      CHECK(NormLaunchRecipe(p, h, device).ok());
    }
  }
}

TEST_CASE("Bench shapes get a space of a few dozen candidates", "[tuner][space]") {
  const DeviceInfo device = H200();
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{
           {32768, 1024}, {32768, 4096}, {16384, 8192}, {8192, 16384}, {65536, 2048},
           {4096, 4096}}) {
    const NormProblem p = Rms(m, n, DType::kBF16, true);
    const size_t size = NormSearchSpace(p, device).size();
    INFO(CanonicalKey(p) << ": " << size << " candidates");
    CHECK(size >= 8);
    CHECK(size <= 64);
  }
}

TEST_CASE("Only RMSNorm forward is implemented today", "[tuner][space]") {
  const DeviceInfo device = CompileOnlyTarget();
  NormProblem p = Rms(4096, 4096, DType::kBF16, true);
  const NormConfig c = HeuristicNormConfig(p, device);
  CHECK(NormTemplateId(p) == "norm/rmsnorm_fwd");
  for (auto [op, pass] : {std::pair{NormOp::kRMSNorm, NormPass::kBackward},
                          std::pair{NormOp::kLayerNorm, NormPass::kForward},
                          std::pair{NormOp::kLayerNorm, NormPass::kBackward}}) {
    NormProblem q = p;
    q.op = op;
    q.pass = pass;
    INFO(OpName(q));
    CHECK(NormSearchSpace(q, device).empty());
    CHECK(CanImplement(q, c, device).code() == absl::StatusCode::kUnimplemented);
    CHECK(NormLaunchRecipe(q, c, device).status().code() == absl::StatusCode::kUnimplemented);
  }
  NormProblem lnb = p;
  lnb.op = NormOp::kLayerNorm;
  lnb.pass = NormPass::kBackward;
  CHECK(NormTemplateId(lnb) == "norm/layernorm_bwd");
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
