// Problems, their validation and canonical keys, and the proto <-> domain
// conversions of tuner/core/wire.h.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <set>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_wire.h"

namespace ktune {
namespace {

NormProblem Rms(int64_t m, int64_t n) {
  NormProblem p;
  p.m = m;
  p.n = n;
  return p;
}

TEST_CASE("ValidateNormProblem accepts the served range and names bad fields", "[tuner][problem]") {
  CHECK(ValidateNormProblem(Rms(1, 1)).ok());
  CHECK(ValidateNormProblem(Rms(kMaxNormM, 128)).ok());
  CHECK(ValidateNormProblem(Rms(8192, kMaxNormN)).ok());
  NormProblem layernorm_bwd = Rms(4096, 5120);
  layernorm_bwd.op = NormOp::kLayerNorm;
  layernorm_bwd.pass = NormPass::kBackward;
  layernorm_bwd.has_bias = true;
  layernorm_bwd.weight_dtype = DType::kFP32;
  CHECK(ValidateNormProblem(layernorm_bwd).ok());

  struct Case {
    NormProblem problem;
    absl::StatusCode code;
    const char* mentions;
  };
  NormProblem fp8 = Rms(16, 16);
  fp8.input_dtype = DType::kFP8E4M3;
  NormProblem nan_eps = Rms(16, 16);
  nan_eps.eps = std::nanf("");
  NormProblem bias = Rms(16, 16);
  bias.has_bias = true;
  NormProblem fp16_weight = Rms(16, 16);
  fp16_weight.weight_dtype = DType::kFP16;  // input is bf16: only bf16 or fp32 weights
  const std::vector<Case> cases = {
      {Rms(0, 16), absl::StatusCode::kInvalidArgument, "problem.m"},
      {Rms(-5, 16), absl::StatusCode::kInvalidArgument, "problem.m"},
      {Rms(kMaxNormM + 1, 16), absl::StatusCode::kInvalidArgument, "problem.m"},
      {Rms(16, 0), absl::StatusCode::kInvalidArgument, "problem.n"},
      {Rms(16, kMaxNormN + 1), absl::StatusCode::kInvalidArgument, "problem.n"},
      {Rms(kMaxNormM, kMaxNormN), absl::StatusCode::kInvalidArgument, "m * n"},
      {fp8, absl::StatusCode::kInvalidArgument, "problem.input_dtype"},
      {nan_eps, absl::StatusCode::kInvalidArgument, "problem.eps"},
      {bias, absl::StatusCode::kInvalidArgument, "has_bias"},
      {fp16_weight, absl::StatusCode::kInvalidArgument, "problem.weight_dtype"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateNormProblem(c.problem);
    INFO(CanonicalKey(c.problem) << " -> " << s.ToString());
    CHECK(s.code() == c.code);
    CHECK(s.message().find(c.mentions) != std::string::npos);
  }
}

TEST_CASE("canonical keys keep the stored format for any eps and size", "[tuner][problem]") {
  // Keys are what stored entries are found by: CanonicalKey must write what
  // the format below writes, for every value, or stores stop hitting.
  NormProblem p = Rms(1, 1);
  std::vector<float> eps = {1e-5f, 1e-6f, 1e-12f, 1.0f, 0.5f, 3.0e-38f, 1.17549435e-38f, 0.1f, 0.3333333f};
  for (uint32_t bits = 0x00800000u; bits < 0x3f800000u; bits += 0x00123457u) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    eps.push_back(f);
  }
  for (float e : eps) {
    for (int64_t m : {int64_t{1}, int64_t{4096}, int64_t{1} << 40}) {
      p.eps = e;
      p.m = m;
      p.n = m / 2 + 1;
      p.op = m == 1 ? NormOp::kLayerNorm : NormOp::kRMSNorm;
      p.pass = m == 4096 ? NormPass::kBackward : NormPass::kForward;
      p.has_bias = m == 1;
      const std::string expected = absl::StrFormat(
          "%s m=%d n=%d in=%s out=%s wt=%s w=%d b=%d eps=%.9g", OpName(p), p.m, p.n, DTypeName(p.input_dtype),
          DTypeName(p.output_dtype), DTypeName(p.weight_dtype), p.has_weight ? 1 : 0, p.has_bias ? 1 : 0, p.eps);
      CHECK(CanonicalKey(p) == expected);
    }
  }
}

TEST_CASE("canonical keys are stable and separate every field", "[tuner][problem]") {
  const NormProblem base = Rms(4096, 4096);
  CHECK(CanonicalKey(base) == "rmsnorm.fwd m=4096 n=4096 in=bf16 out=bf16 wt=bf16 w=1 b=0 eps=9.99999997e-07");
  std::vector<NormProblem> variants(10, base);
  variants[1].m = 4097;
  variants[2].n = 4095;
  variants[3].input_dtype = DType::kFP16;
  variants[4].output_dtype = DType::kFP32;
  variants[5].has_weight = false;
  variants[6].eps = 1e-5f;
  variants[7].pass = NormPass::kBackward;
  variants[8].weight_dtype = DType::kFP32;
  variants[9].op = NormOp::kLayerNorm;
  std::set<std::string> keys;
  for (const NormProblem& p : variants) keys.insert(CanonicalKey(p));
  CHECK(keys.size() == variants.size());
}

TEST_CASE("op names and dtypes parse back", "[tuner][problem]") {
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) {
      NormOp o;
      NormPass p;
      REQUIRE(ParseNormOpName(OpName(op, pass), &o, &p).ok());
      CHECK(o == op);
      CHECK(p == pass);
    }
  }
  NormOp o;
  NormPass p;
  CHECK(ParseNormOpName("gemm", &o, &p).code() == absl::StatusCode::kInvalidArgument);
  CHECK(ParseNormOpName("rmsnorm", &o, &p).message().find("unknown op") != std::string::npos);
  for (DType d : {DType::kBF16, DType::kFP16, DType::kFP32, DType::kFP8E4M3}) {
    auto parsed = ParseDType(DTypeName(d));
    REQUIRE(parsed.ok());
    CHECK(*parsed == d);
  }
  CHECK_FALSE(ParseDType("float").ok());
  CHECK(DTypeBytes(DType::kBF16) == 2);
  CHECK(DTypeBytes(DType::kFP32) == 4);
}

TEST_CASE("MinimumBytes counts x, w and y once", "[tuner][problem]") {
  NormProblem p = Rms(32768, 4096);
  CHECK(MinimumBytes(p) == 32768LL * 4096 * 4 + 4096 * 2);
  p.has_weight = false;
  p.output_dtype = DType::kFP32;
  CHECK(MinimumBytes(p) == 32768LL * 4096 * 6);
  NormProblem bwd = Rms(1024, 2048);  // LayerNorm backward, fp32 gamma and beta
  bwd.op = NormOp::kLayerNorm;
  bwd.pass = NormPass::kBackward;
  bwd.has_bias = true;
  bwd.weight_dtype = DType::kFP32;
  // read x, dy (bf16), write dx (bf16); read w, write dw and db (fp32)
  CHECK(MinimumBytes(bwd) == 1024LL * 2048 * 6 + 3 * 2048 * 4);
}

TEST_CASE("norm problems and configs round-trip through the wire format", "[tuner][wire]") {
  NormProblem p = Rms(65536, 3000);
  p.input_dtype = DType::kFP16;
  p.output_dtype = DType::kFP32;
  p.weight_dtype = DType::kFP32;
  p.has_weight = false;
  p.eps = 1e-5f;
  auto back = NormProblemFromProto(NormProblemToProto(p));
  REQUIRE(back.ok());
  CHECK(*back == p);

  v1::NormProblem defaults;
  defaults.set_op(v1::RMSNORM);
  defaults.set_norm_pass(v1::FWD);
  defaults.set_m(2);
  defaults.set_n(3);
  defaults.set_input_dtype(v1::BF16);
  auto d = NormProblemFromProto(defaults);
  REQUIRE(d.ok());
  CHECK(d->output_dtype == DType::kBF16);  // unspecified: same as input
  CHECK(d->eps == kDefaultNormEps);        // 0: the default
  CHECK(d->weight_dtype == DType::kBF16);  // unspecified: same as input

  defaults.set_norm_pass(v1::NORM_PASS_UNSPECIFIED);
  CHECK(NormProblemFromProto(defaults).status().message().find("problem.pass") != std::string::npos);
  defaults.set_norm_pass(v1::FWD);
  defaults.set_output_dtype(static_cast<v1::DType>(42));
  CHECK(NormProblemFromProto(defaults).status().message().find("problem.output_dtype") != std::string::npos);

  NormConfig c;
  c.x_block = 2;
  c.r_block = 1024;
  c.num_warps = 8;
  c.vec = 8;
  c.pipeline_depth = 2;
  c.persistent = false;
  auto cback = NormConfigFromProto(NormConfigToProto(c));
  REQUIRE(cback.ok());
  CHECK(*cback == c);
  v1::NormConfig bad = NormConfigToProto(c);
  bad.set_num_warps(0);
  CHECK(NormConfigFromProto(bad).status().message().find("num_warps") != std::string::npos);
  // No cluster is written as unset, as entries from before clusters have it;
  // a cluster round-trips.
  CHECK(NormConfigToProto(c).cluster() == 0);
  c.cluster = 4;
  cback = NormConfigFromProto(NormConfigToProto(c));
  REQUIRE(cback.ok());
  CHECK(cback->cluster == 4);
  CHECK(*cback == c);
  bad = NormConfigToProto(c);
  bad.set_cluster(-1);
  CHECK(NormConfigFromProto(bad).status().message().find("config.norm.cluster") != std::string::npos);
}

TEST_CASE("norm variants: a problem without them keeps its key, each one is in the key", "[tuner][problem][variants]") {
  // The plain problem's key is byte for byte what stores hold (the format
  // from before the variants existed), however it was decoded: an old
  // message has none of the new fields, and setting them to their defaults
  // changes nothing.
  const std::string plain = "rmsnorm.fwd m=4096 n=4096 in=bf16 out=bf16 wt=bf16 w=1 b=0 eps=9.99999997e-07";
  NormProblem base = Rms(4096, 4096);
  CHECK(CanonicalKey(base) == plain);
  v1::NormProblem old_wire;
  old_wire.set_op(v1::RMSNORM);
  old_wire.set_norm_pass(v1::FWD);
  old_wire.set_m(4096);
  old_wire.set_n(4096);
  old_wire.set_input_dtype(v1::BF16);
  old_wire.set_has_weight(true);
  const std::string old_bytes = old_wire.SerializeAsString();
  auto decoded = NormProblemFromProto(old_wire);
  REQUIRE(decoded.ok());
  CHECK(CanonicalKey(*decoded) == plain);
  CHECK_FALSE(decoded->residual);
  CHECK_FALSE(decoded->weight_offset);
  CHECK(decoded->out_scale == 0.0f);
  // Proto3 writes no default: the re-encoded plain problem is the old bytes.
  v1::NormProblem reencoded = NormProblemToProto(*decoded);
  reencoded.clear_output_dtype();
  reencoded.clear_weight_dtype();
  reencoded.clear_eps();
  CHECK(reencoded.SerializeAsString() == old_bytes);

  NormProblem res = base;
  res.residual = true;
  CHECK(CanonicalKey(res) == plain + " res=1");
  NormProblem off = base;
  off.weight_offset = true;
  CHECK(CanonicalKey(off) == plain + " woff=1");
  NormProblem both = res;
  both.weight_offset = true;
  CHECK(CanonicalKey(both) == plain + " res=1 woff=1");
  NormProblem fp8 = base;
  fp8.output_dtype = DType::kFP8E4M3;
  CHECK(CanonicalKey(fp8) == "rmsnorm.fwd m=4096 n=4096 in=bf16 out=fp8e4m3 wt=bf16 w=1 b=0 eps=9.99999997e-07");
  // The scale is the launch's (a pointer), not the problem's identity: one
  // entry serves every layer's scale.
  NormProblem scaled = fp8;
  scaled.out_scale = 0.0125f;
  CHECK(CanonicalKey(scaled) == CanonicalKey(fp8));
  CHECK_FALSE(scaled == fp8);  // still carried as a value
  CHECK(VerifyScale(fp8) == 1.0f);
  CHECK(VerifyScale(scaled) == 0.0125f);
  std::set<std::string> keys;
  for (const NormProblem& p : {base, res, off, both, fp8}) keys.insert(CanonicalKey(p));
  CHECK(keys.size() == 5);

  // Bytes: the residual is read and written (forward) or dresidual read (backward).
  CHECK(MinimumBytes(res) == MinimumBytes(base) + 2 * 4096LL * 4096 * 2);
  NormProblem res_bwd = res;
  res_bwd.pass = NormPass::kBackward;
  NormProblem plain_bwd = base;
  plain_bwd.pass = NormPass::kBackward;
  CHECK(MinimumBytes(res_bwd) == MinimumBytes(plain_bwd) + 4096LL * 4096 * 2);
  CHECK(MinimumBytes(fp8) == 4096LL * 4096 * 3 + 4096 * 2);
}

TEST_CASE("norm variants round-trip through the wire format", "[tuner][wire][variants]") {
  for (int variant = 0; variant < 4; ++variant) {
    NormProblem p = Rms(8192, 128);
    p.residual = variant == 0 || variant == 3;
    p.weight_offset = variant == 1 || variant == 3;
    if (variant >= 2) {
      p.output_dtype = DType::kFP8E4M3;
      p.out_scale = variant == 2 ? 0.5f : 0.0f;
    }
    REQUIRE(ValidateNormProblem(p).ok());
    const v1::NormProblem wire = NormProblemToProto(p);
    CHECK(wire.residual() == p.residual);
    CHECK(wire.weight_offset() == p.weight_offset);
    CHECK(wire.out_scale() == p.out_scale);
    auto back = NormProblemFromProto(wire);
    REQUIRE(back.ok());
    CHECK(*back == p);
    CHECK(CanonicalKey(*back) == CanonicalKey(p));
    if (p.output_dtype == DType::kFP8E4M3) CHECK(wire.output_dtype() == v1::FP8_E4M3);
  }
}

TEST_CASE("norm variants: bad combinations are INVALID_ARGUMENT naming the field", "[tuner][problem][variants]") {
  struct Case {
    const char* what;
    NormProblem problem;
    const char* mentions;
  };
  auto with = [](auto edit) {
    NormProblem p = Rms(64, 128);
    edit(p);
    return p;
  };
  const std::vector<Case> cases = {
      {"fp8 output on a backward", with([](NormProblem& p) {
         p.pass = NormPass::kBackward;
         p.output_dtype = DType::kFP8E4M3;
       }),
       "problem.output_dtype"},
      {"fp8 output on LayerNorm", with([](NormProblem& p) {
         p.op = NormOp::kLayerNorm;
         p.output_dtype = DType::kFP8E4M3;
       }),
       "problem.output_dtype"},
      {"a negative scale", with([](NormProblem& p) {
         p.output_dtype = DType::kFP8E4M3;
         p.out_scale = -1.0f;
       }),
       "problem.out_scale"},
      {"an infinite scale", with([](NormProblem& p) {
         p.output_dtype = DType::kFP8E4M3;
         p.out_scale = std::numeric_limits<float>::infinity();
       }),
       "problem.out_scale"},
      {"a NaN scale", with([](NormProblem& p) {
         p.output_dtype = DType::kFP8E4M3;
         p.out_scale = std::nanf("");
       }),
       "problem.out_scale"},
      {"a scale without fp8 output", with([](NormProblem& p) { p.out_scale = 2.0f; }), "problem.out_scale"},
      {"a residual on LayerNorm", with([](NormProblem& p) {
         p.op = NormOp::kLayerNorm;
         p.residual = true;
       }),
       "problem.residual"},
      {"a weight offset without a weight", with([](NormProblem& p) {
         p.has_weight = false;
         p.weight_offset = true;
       }),
       "problem.weight_offset"},
      {"fp8 weights", with([](NormProblem& p) { p.weight_dtype = DType::kFP8E4M3; }), "problem.weight_dtype"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateNormProblem(c.problem);
    INFO(c.what << " -> " << s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.mentions) != std::string::npos);
  }
  // And what is allowed: both variants on one RMSNorm backward, the offset on
  // LayerNorm, fp8 output with the residual add.
  CHECK(ValidateNormProblem(with([](NormProblem& p) {
          p.pass = NormPass::kBackward;
          p.residual = true;
          p.weight_offset = true;
        })).ok());
  CHECK(ValidateNormProblem(with([](NormProblem& p) {
          p.op = NormOp::kLayerNorm;
          p.has_bias = true;
          p.weight_offset = true;
        })).ok());
  CHECK(ValidateNormProblem(with([](NormProblem& p) {
          p.output_dtype = DType::kFP8E4M3;
          p.residual = true;
          p.out_scale = 0.02f;
        })).ok());
}

TEST_CASE("fingerprints and recipes round-trip, and keys separate environments", "[tuner][wire]") {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.memory_bytes = 150754820096ull;
  d.driver_version = 13000;
  const DeviceInfo dback = DeviceFromProto(DeviceToProto(d));
  CHECK(DeviceKey(dback) == DeviceKey(d));
  CHECK(Arch(d) == "sm_90");
  DeviceInfo other = d;
  other.driver_version = 12080;
  CHECK(DeviceKey(other) != DeviceKey(d));
  CHECK(DeviceKey(CompileOnlyTarget()) != DeviceKey(d));

  SoftwareFingerprint s{std::string(64, 'f'), 13000, kSchemaVersion};
  CHECK(SoftwareKey(SoftwareFromProto(SoftwareToProto(s))) == SoftwareKey(s));
  SoftwareFingerprint s2 = s;
  s2.template_hash[0] = 'e';
  CHECK(SoftwareKey(s2) != SoftwareKey(s));

  LaunchRecipe r;
  r.template_id = "norm/rmsnorm_fwd";
  r.template_hash = std::string(64, 'a');
  r.nvrtc_options = {"--gpu-architecture=sm_90", "-std=c++17"};
  r.arch = "sm_90";
  KernelLaunch k;
  k.name_expression = "ktune::rmsnorm_fwd<ktune::bf16>";
  k.lowered_name = "_Z3foo";
  k.grid = {1024, 1, 1};
  k.block = {256, 1, 1};
  k.dynamic_smem_bytes = 64;
  k.params = {"x", "w", "y"};
  r.kernels.push_back(k);
  k.programmatic_dependent = true;
  r.kernels.push_back(k);
  r.workspace_bytes = 12;
  r.cubin = std::string(
      "\x7f"
      "ELF\0\1",
      6);
  const LaunchRecipe with = RecipeFromProto(RecipeToProto(r, true));
  CHECK(with.cubin == r.cubin);
  CHECK(with.kernels[0].grid == k.grid);
  CHECK(with.kernels[0].params == k.params);
  CHECK_FALSE(with.kernels[0].programmatic_dependent);
  CHECK(with.kernels[1].programmatic_dependent);
  CHECK(with.nvrtc_options == r.nvrtc_options);
  CHECK(RecipeFromProto(RecipeToProto(r, false)).cubin.empty());
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("mma.sync GEMM tiles round-trip through the wire format and bad ones are named", "[tuner][wire]") {
  GemmTileConfig c;
  c.block_m = 64;
  c.block_n = 256;
  c.block_k = 32;
  c.warps_m = 1;
  c.warps_n = 4;
  c.stages = 5;
  c.group_m = 4;
  c.split_k = 4;
  absl::StatusOr<GemmTileConfig> back = GemmTileConfigFromProto(GemmTileConfigToProto(c));
  REQUIRE(back.ok());
  CHECK(*back == c);
  // An entry written before split-K existed has no split_k: one split.
  v1::MmaSyncTile old = GemmTileConfigToProto(c);
  old.clear_split_k();
  REQUIRE(GemmTileConfigFromProto(old).ok());
  CHECK(GemmTileConfigFromProto(old)->split_k == 1);
  v1::MmaSyncTile negative = GemmTileConfigToProto(c);
  negative.set_split_k(-2);
  CHECK(std::string(GemmTileConfigFromProto(negative).status().message()) ==
        "config.gemm.mma_sync.split_k: must be >= 1, got -2");
  v1::MmaSyncTile bad = GemmTileConfigToProto(c);
  bad.set_stages(0);
  const absl::Status s = GemmTileConfigFromProto(bad).status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()) == "config.gemm.mma_sync.stages: must be >= 1, got 0");
}

}  // namespace
}  // namespace ktune
