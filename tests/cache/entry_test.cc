#include "cache/entry.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cache/recipe_check.h"
#include "tests/cache/test_entries.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wire.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

using testutil::MakeTestEntry;

EntryKey KeyOrFail(const v1::Entry& entry) {
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), entry);
  INFO(key.status().ToString());
  REQUIRE(key.ok());
  return *key;
}

TEST_CASE("KeyOf: the same entry gives the same key", "[cache]") {
  const EntryKey a = KeyOrFail(MakeTestEntry());
  const EntryKey b = KeyOrFail(MakeTestEntry());
  CHECK(a == b);
  CHECK(FlatKey(a) == FlatKey(b));
  CHECK(a.op == "rmsnorm.fwd");
  CHECK(a.problem_key.find("m=4096") != std::string::npos);
  CHECK(a.device_key.find("NVIDIA H200") != std::string::npos);
  CHECK(a.software_key.find(testutil::kTestTemplateHash) != std::string::npos);
}

TEST_CASE("KeyOf: what was measured is not part of the key", "[cache]") {
  const EntryKey base = KeyOrFail(MakeTestEntry());
  v1::Entry e = MakeTestEntry();
  e.mutable_measurement()->set_time_us(99);
  e.mutable_config()->mutable_norm()->set_num_warps(8);
  e.set_tuned_at_unix(1800000000);
  e.set_candidates_measured(3);
  CHECK(KeyOrFail(e) == base);
}

TEST_CASE("KeyOf: equivalent spellings of one problem share a key", "[cache]") {
  const EntryKey base = KeyOrFail(MakeTestEntry());
  v1::Entry e = MakeTestEntry();
  e.mutable_problem()->mutable_norm()->set_output_dtype(v1::DTYPE_UNSPECIFIED);  // = input
  e.mutable_problem()->mutable_norm()->set_eps(0);                               // = default
  CHECK(KeyOrFail(e) == base);
}

TEST_CASE("KeyOf: each part of the key separates what it should", "[cache]") {
  const EntryKey base = KeyOrFail(MakeTestEntry());
  struct Case {
    const char* name;
    std::function<void(v1::Entry&)> change;
    std::string EntryKey::*part;
  };
  const std::vector<Case> cases = {
      {"m", [](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_m(8192); }, &EntryKey::problem_key},
      {"n", [](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_n(8192); }, &EntryKey::problem_key},
      {"dtype",
       [](v1::Entry& e) {
         e.mutable_problem()->mutable_norm()->set_input_dtype(v1::FP16);
         e.mutable_problem()->mutable_norm()->set_output_dtype(v1::FP16);
       },
       &EntryKey::problem_key},
      {"eps", [](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_eps(1e-5f); }, &EntryKey::problem_key},
      {"weight", [](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_has_weight(false); },
       &EntryKey::problem_key},
      {"device name", [](v1::Entry& e) { e.mutable_device()->set_name("NVIDIA H100 80GB HBM3"); },
       &EntryKey::device_key},
      {"compute capability", [](v1::Entry& e) { e.mutable_device()->set_cc_major(10); }, &EntryKey::device_key},
      {"SM count", [](v1::Entry& e) { e.mutable_device()->set_sm_count(114); }, &EntryKey::device_key},
      {"memory", [](v1::Entry& e) { e.mutable_device()->set_memory_bytes(85520809984); }, &EntryKey::device_key},
      {"driver", [](v1::Entry& e) { e.mutable_device()->set_driver_version(12080); }, &EntryKey::device_key},
      {"template hash", [](v1::Entry& e) { e.mutable_software()->set_template_hash(std::string(64, 'a')); },
       &EntryKey::software_key},
      {"nvrtc", [](v1::Entry& e) { e.mutable_software()->set_nvrtc_version(12080); }, &EntryKey::software_key},
      {"schema", [](v1::Entry& e) { e.mutable_software()->set_schema_version(kSchemaVersion + 1); },
       &EntryKey::software_key},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    v1::Entry e = MakeTestEntry();
    c.change(e);
    const EntryKey key = KeyOrFail(e);
    CHECK_FALSE(key == base);
    CHECK(key.*c.part != base.*c.part);
    CHECK(FlatKey(key) != FlatKey(base));
    // Only the part that names the change moves.
    for (auto part : {&EntryKey::op, &EntryKey::problem_key, &EntryKey::device_key, &EntryKey::software_key}) {
      if (part != c.part) CHECK(key.*part == base.*part);
    }
  }
}

TEST_CASE("ValidateEntry: the test entry is valid", "[cache]") {
  absl::Status s = ValidateEntry(BuiltinOps(), MakeTestEntry());
  INFO(s.ToString());
  CHECK(s.ok());
}

TEST_CASE("ValidateEntry: each bad field is named", "[cache]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    std::function<void(v1::Entry&)> change;
    std::string expected;  // the start of the message
  };
  const std::vector<Case> cases = {
      // problem
      {[](v1::Entry& e) { e.clear_problem(); }, "entry.problem: missing (set one of: norm, gemm)"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_gemm()->set_m(1); }, "entry.problem.gemm.n:"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_m(0); }, "entry.problem.m:"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_reduce_rows(8); },
       "entry.config.norm.reduce_rows: must be 0 for a forward problem, got 8"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_reduce_rows(-1); },
       "entry.config.norm.reduce_rows: must be >= 0, got -1"},
      {[](v1::Entry& e) {
         e.mutable_problem()->mutable_norm()->set_norm_pass(v1::BWD);
         e.mutable_config()->mutable_norm()->set_split_size(64);
         e.mutable_config()->mutable_norm()->set_reduce_rows(3);
       },
       "entry.config.norm.reduce_rows: must be 0 or a power of two <= 32, got 3"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_cluster(4); },
       "entry.config.norm.cluster: must be 0 or 1 for a forward problem, got 4"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_cluster(-2); },
       "entry.config.norm.cluster: must be >= 0, got -2"},
      {[](v1::Entry& e) {
         e.mutable_problem()->mutable_norm()->set_norm_pass(v1::BWD);
         e.mutable_config()->mutable_norm()->set_split_size(64);
         e.mutable_config()->mutable_norm()->set_cluster(3);
       },
       "entry.config.norm.cluster: must be 0, 1, 2, 4 or 8, got 3"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_n(-4); }, "entry.problem.n:"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_op(v1::NORM_OP_UNSPECIFIED); }, "entry.problem.op:"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_input_dtype(v1::FP8_E4M3); },
       "entry.problem.input_dtype:"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_eps(-1); }, "entry.problem.eps:"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_has_bias(true); },
       "entry.problem.has_bias: RMSNorm has no bias"},
      {[](v1::Entry& e) { e.mutable_problem()->mutable_norm()->set_weight_dtype(v1::FP16); },
       "entry.problem.weight_dtype:"},
      // device
      {[](v1::Entry& e) { e.clear_device(); }, "entry.device: missing"},
      {[](v1::Entry& e) { e.mutable_device()->set_name(""); }, "entry.device.name: must not be empty"},
      {[](v1::Entry& e) { e.mutable_device()->set_name("H200\n"); },
       "entry.device.name: must not contain control characters"},
      {[](v1::Entry& e) { e.mutable_device()->set_name(std::string(300, 'x')); },
       "entry.device.name: must be at most 256 bytes, got 300"},
      {[](v1::Entry& e) { e.mutable_device()->set_cc_major(0); }, "entry.device.cc_major: must be in [1, 99], got 0"},
      {[](v1::Entry& e) { e.mutable_device()->set_cc_minor(-1); }, "entry.device.cc_minor:"},
      {[](v1::Entry& e) { e.mutable_device()->set_sm_count(0); },
       "entry.device.sm_count: must be in [1, 100000], got 0"},
      {[](v1::Entry& e) { e.mutable_device()->set_driver_version(-1); }, "entry.device.driver_version:"},
      // software
      {[](v1::Entry& e) { e.clear_software(); }, "entry.software: missing"},
      {[](v1::Entry& e) { e.mutable_software()->set_template_hash("abc"); },
       "entry.software.template_hash: must be 64 lowercase hex digits"},
      {[](v1::Entry& e) { e.mutable_software()->set_template_hash(std::string(64, 'A')); },
       "entry.software.template_hash:"},
      {[](v1::Entry& e) { e.mutable_software()->set_nvrtc_version(0); },
       "entry.software.nvrtc_version: must be >= 1, got 0"},
      {[](v1::Entry& e) { e.mutable_software()->set_schema_version(0); }, "entry.software.schema_version:"},
      // config
      {[](v1::Entry& e) { e.clear_config(); }, "entry.config.norm: a norm problem needs a norm config"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_gemm(); }, "entry.config.norm:"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_x_block(0); },
       "entry.config.norm.x_block: must be >= 1, got 0"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_r_block(-8); }, "entry.config.norm.r_block:"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_num_warps(0); }, "entry.config.norm.num_warps:"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_num_warps(64); },
       "entry.config.norm.num_warps: must be <= 32"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_vec(0); }, "entry.config.norm.vec:"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_pipeline_depth(0); },
       "entry.config.norm.pipeline_depth:"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_x_block(256); },
       "entry.config.norm.x_block: must be <= num_warps * 32 = 128, got 256"},
      {[](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_split_size(4); },
       "entry.config.norm.split_size: must be 0 for a forward problem, got 4"},
      // recipe
      {[](v1::Entry& e) { e.clear_recipe(); }, "entry.recipe: missing"},
      {[](v1::Entry& e) { e.mutable_recipe()->set_template_id(""); }, "entry.recipe.template_id: must not be empty"},
      {[](v1::Entry& e) { e.mutable_recipe()->set_template_hash(""); }, "entry.recipe.template_hash:"},
      {[](v1::Entry& e) { e.mutable_recipe()->set_arch("sm_80"); },
       "entry.recipe.arch: must be \"sm_90\" or \"sm_90a\" for a cc 9.0 device, got \"sm_80\""},
      {[](v1::Entry& e) { e.mutable_recipe()->set_nvrtc_options(0, ""); },
       "entry.recipe.nvrtc_options[0]: must not be empty"},
      {[](v1::Entry& e) { e.mutable_recipe()->clear_kernels(); },
       "entry.recipe.kernels: must have 1 to 16 kernels, got 0"},
      {[](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_name_expression(""); },
       "entry.recipe.kernels[0].name_expression: must not be empty"},
      {[](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->clear_grid(); },
       "entry.recipe.kernels[0].grid: must have 3 values, got 0"},
      {[](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->mutable_block()->RemoveLast(); },
       "entry.recipe.kernels[0].block: must have 3 values, got 2"},
      {[](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_grid(1, 0); },
       "entry.recipe.kernels[0].grid[1]: must be >= 1"},
      {[](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_block(2, 0); },
       "entry.recipe.kernels[0].block[2]: must be >= 1"},
      {[](v1::Entry& e) {
         e.mutable_recipe()->mutable_kernels(0)->set_block(0, 4000000000u);
         e.mutable_recipe()->mutable_kernels(0)->set_block(1, 4000000000u);
         e.mutable_recipe()->mutable_kernels(0)->set_block(2, 4000000000u);
       },
       "entry.recipe.kernels[0].block: must have at most 1024 threads"},
      {[](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_params(1, ""); },
       "entry.recipe.kernels[0].params[1]: must not be empty"},
      // measurement
      {[](v1::Entry& e) { e.clear_measurement(); }, "entry.measurement: missing"},
      {[](v1::Entry& e) { e.mutable_measurement()->set_time_us(-1); },
       "entry.measurement.time_us: must be finite and > 0, got -1"},
      {[](v1::Entry& e) { e.mutable_measurement()->set_time_us(0); },
       "entry.measurement.time_us: must be finite and > 0, got 0"},
      {[nan](v1::Entry& e) { e.mutable_measurement()->set_time_us(nan); },
       "entry.measurement.time_us: must be finite and > 0, got nan"},
      {[inf](v1::Entry& e) { e.mutable_measurement()->set_time_us(inf); }, "entry.measurement.time_us:"},
      {[](v1::Entry& e) { e.mutable_measurement()->set_spread(-0.1); },
       "entry.measurement.spread: must be finite and >= 0, got -0.1"},
      {[nan](v1::Entry& e) { e.mutable_measurement()->set_spread(nan); }, "entry.measurement.spread:"},
      {[](v1::Entry& e) { e.mutable_measurement()->set_repetitions(0); },
       "entry.measurement.repetitions: must be >= 1, got 0"},
      {[](v1::Entry& e) { e.mutable_measurement()->set_throughput(-2); }, "entry.measurement.throughput:"},
      // provenance
      {[](v1::Entry& e) { e.set_tuned_at_unix(0); }, "entry.tuned_at_unix: must be > 0, got 0"},
      {[](v1::Entry& e) { e.set_candidates_measured(0); }, "entry.candidates_measured: must be >= 1, got 0"},
      {[](v1::Entry& e) { e.set_ktune_version(std::string("0.1\x07", 4)); }, "entry.ktune_version:"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.expected);
    v1::Entry e = MakeTestEntry();
    c.change(e);
    absl::Status s = ValidateEntry(BuiltinOps(), e);
    CAPTURE(s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()).rfind(c.expected, 0) == 0);
  }
}

TEST_CASE("ValidateEntry: a norm config the templates cannot run is refused, saying why", "[cache]") {
  v1::Entry e = MakeTestEntry();  // RMSNorm 4096 x 4096, persistent, 4 warps of vec 8: 4 chunks
  REQUIRE(ValidateEntry(BuiltinOps(), e).ok());
  e.mutable_config()->mutable_norm()->set_r_block(2048);  // two chunks: not the whole row
  CHECK(std::string(ValidateEntry(BuiltinOps(), e).message()) ==
        "entry.config.norm: cannot run this problem on sm_90: xb=1 rb=2048 w=4 v=8 pd=1 persistent: "
        "persistent needs r_block >= N");
  e = MakeTestEntry();
  e.mutable_config()->mutable_norm()->set_r_block(3000);  // not threads_per_row * vec * chunks
  CHECK_THAT(std::string(ValidateEntry(BuiltinOps(), e).message()),
             Catch::Contains("r_block must be threads_per_row * vec * chunks"));
  // On an architecture this version does not know, only the fields are checked.
  e.mutable_device()->set_cc_major(11);
  e.mutable_recipe()->set_arch("sm_110");
  CHECK(ValidateEntry(BuiltinOps(), e).ok());
}

TEST_CASE("ValidateEntry: a prefix replaces \"entry.\"", "[cache]") {
  v1::Entry e = MakeTestEntry();
  e.mutable_problem()->mutable_norm()->set_n(0);
  absl::Status s = ValidateEntry(BuiltinOps(), e, "entry 3: ");
  CHECK(std::string(s.message()).rfind("entry 3: problem.n: ", 0) == 0);
}

TEST_CASE("ValidateEntry: the arch-specific target of the device is accepted", "[cache]") {
  v1::Entry e = MakeTestEntry();
  e.mutable_recipe()->set_arch("sm_90a");
  CHECK(ValidateEntry(BuiltinOps(), e).ok());
}

TEST_CASE("FlatKey: parts cannot run into each other", "[cache]") {
  EntryKey a{"rmsnorm.fwd", "p", "d x", "s"};
  EntryKey b{"rmsnorm.fwd", "p", "d", "x s"};
  CHECK(FlatKey(a) != FlatKey(b));
}

using testutil::MakeTestGemmEntry;

TEST_CASE("ValidateEntry: GEMM entries of either source are valid and keyed by their problem", "[cache][gemm]") {
  for (bool cublaslt : {false, true}) {
    INFO(cublaslt);
    const v1::Entry e = MakeTestGemmEntry(2048, 4096, 4096, cublaslt);
    absl::Status s = ValidateEntry(BuiltinOps(), e);
    INFO(s.ToString());
    CHECK(s.ok());
    const EntryKey key = KeyOrFail(e);
    CHECK(key.op == "gemm");
    CHECK(key.problem_key ==
          "gemm m=2048 n=4096 k=4096 batch=1 a=bf16 b=bf16 c=none d=bf16 a_layout=row b_layout=col epilogue=none");
    CHECK(KeyOrFail(MakeTestGemmEntry(2048, 4096, 4096, !cublaslt)) == key);  // the source is not part of the key
    CHECK_FALSE(KeyOrFail(MakeTestGemmEntry(2049, 4096, 4096, cublaslt)) == key);
  }
}

// A wgmma entry (128 x 256 tiles, two consumers, split_k as given) for the
// test problem; valid as built with split_k 1, 2 or 4 at K = 4096.
v1::Entry WgmmaEntry(int split_k) {
  v1::Entry e = MakeTestGemmEntry();
  v1::WgmmaTile* t = e.mutable_config()->mutable_gemm()->mutable_wgmma();
  t->set_block_m(128);
  t->set_block_n(256);
  t->set_consumers(2);
  t->set_cluster_m(1);
  t->set_stages(4);
  t->set_group_m(8);
  t->set_split_k(split_k);
  e.mutable_recipe()->set_template_id("gemm/gemm_wgmma");
  return e;
}

TEST_CASE("ValidateEntry: each bad GEMM field is named", "[cache][gemm]") {
  struct Case {
    bool cublaslt;
    std::function<void(v1::Entry&)> change;
    std::string expected;  // the start of the message
  };
  const std::vector<Case> cases = {
      {false, [](v1::Entry& e) { e.mutable_problem()->mutable_gemm()->set_k(0); }, "entry.problem.gemm.k:"},
      {false, [](v1::Entry& e) { e.mutable_config()->mutable_norm()->set_x_block(1); },
       "entry.config.gemm: a GEMM problem needs a GEMM config"},
      {false, [](v1::Entry& e) { e.mutable_config()->mutable_gemm()->clear_source(); },
       "entry.config.gemm: must name a source"},
      {false, [](v1::Entry& e) { e.mutable_config()->mutable_gemm()->mutable_mma_sync()->set_stages(0); },
       "entry.config.gemm.mma_sync.stages:"},
      {false, [](v1::Entry& e) { e.mutable_recipe()->set_cublaslt_algo(std::string(64, 'x')); },
       "entry.recipe.cublaslt_algo: must be empty"},
      {false, [](v1::Entry& e) { e.mutable_recipe()->set_template_id("gemm/gemm_wgmma"); },
       "entry.recipe.template_id: a mma_sync config needs a gemm/gemm_mma recipe, got 'gemm/gemm_wgmma'"},
      {false,
       [](v1::Entry& e) {
         e = WgmmaEntry(1);
         e.mutable_config()->mutable_gemm()->mutable_wgmma()->set_cluster_m(0);  // a missing field reads 0
       },
       "entry.config.gemm.wgmma.cluster_m: must be >= 1, got 0"},
      {false, [](v1::Entry& e) { e.mutable_config()->mutable_gemm()->mutable_skinny()->set_warps(8); },
       "entry.config.gemm.skinny.unroll: must be >= 1, got 0"},
      {false,
       [](v1::Entry& e) {
         v1::SkinnyTile* t = e.mutable_config()->mutable_gemm()->mutable_skinny();
         t->set_warps(8);
         t->set_unroll(4);
       },
       "entry.recipe.template_id: a skinny config needs a gemm/gemm_skinny recipe, got 'gemm/gemm_mma'"},
      {true, [](v1::Entry& e) { e.mutable_config()->mutable_gemm()->mutable_cublaslt()->set_algo("short"); },
       "entry.config.gemm.cublaslt.algo: must be 64 bytes, got 5"},
      {true, [](v1::Entry& e) { e.mutable_config()->mutable_gemm()->mutable_cublaslt()->set_version(0); },
       "entry.config.gemm.cublaslt.version:"},
      {true, [](v1::Entry& e) { e.mutable_recipe()->set_cublaslt_algo(std::string(64, 'y')); },
       "entry.recipe.cublaslt_algo: a cuBLASLt config needs the recipe of the same algorithm"},
      {true, [](v1::Entry& e) { e.mutable_recipe()->add_kernels()->set_name_expression("x"); },
       "entry.recipe.kernels: must be empty for a cuBLASLt call"},
  };
  for (const Case& c : cases) {
    v1::Entry e = MakeTestGemmEntry(2048, 4096, 4096, c.cublaslt);
    c.change(e);
    const absl::Status s = ValidateEntry(BuiltinOps(), e);
    INFO(c.expected);
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()).rfind(c.expected, 0) == 0);
  }
}

TEST_CASE("ValidateEntry: a GEMM config the template cannot run is refused, saying why", "[cache][gemm]") {
  for (int split : {1, 2, 4}) {
    INFO(split);
    CHECK(ValidateEntry(BuiltinOps(), WgmmaEntry(split)).ok());
  }
  struct Case {
    v1::Entry entry;
    std::string expected;  // the whole message
  };
  std::vector<Case> cases;
  cases.push_back({WgmmaEntry(3),
                   "entry.config.gemm: cannot run this problem on sm_90: wgmma bm128 bn256 c2 s4 g8 k3: "
                   "split_k must be a power of two <= 16"});
  {
    v1::Entry e = WgmmaEntry(2);
    e.mutable_problem()->mutable_gemm()->set_k(4160);  // 65 steps of 64
    cases.push_back({e,
                     "entry.config.gemm: cannot run this problem on sm_90: wgmma bm128 bn256 c2 s4 g8 k2: "
                     "split_k = 2 does not divide K's 65 steps of 64"});
  }
  {
    v1::Entry e = WgmmaEntry(1);
    e.mutable_device()->set_cc_major(8);  // an A100's entry
    cases.push_back({e,
                     "entry.config.gemm: cannot run this problem on sm_80: wgmma bm128 bn256 c2 s4 g8: "
                     "needs sm_90 (compiled for sm_90a), device is sm_80"});
  }
  {
    v1::Entry e = MakeTestGemmEntry();
    e.mutable_config()->mutable_gemm()->mutable_mma_sync()->set_block_k(256);
    cases.push_back({e,
                     "entry.config.gemm: cannot run this problem on sm_90: bm128 bn128 bk256 w2x2 s4 g8: "
                     "block_k must be 16 to 128"});
  }
  {
    v1::Entry e = MakeTestGemmEntry();
    e.mutable_config()->mutable_gemm()->mutable_mma_sync()->set_split_k(6);
    cases.push_back({e,
                     "entry.config.gemm: cannot run this problem on sm_90: bm128 bn128 bk32 w2x2 s4 g8 k6: "
                     "split_k must be a power of two <= 16"});
  }
  {
    v1::Entry e = MakeTestGemmEntry();  // M = 2048
    v1::SkinnyTile* t = e.mutable_config()->mutable_gemm()->mutable_skinny();
    t->set_warps(8);
    t->set_unroll(4);
    e.mutable_recipe()->set_template_id("gemm/gemm_skinny");
    cases.push_back(
        {e, "entry.config.gemm: cannot run this problem on sm_90: skinny w8 u4: serves M <= 16, M is 2048"});
  }
  {
    v1::Entry e = MakeTestGemmEntry(16);  // fp8 at M = 16: the pipelined loop is for M <= 8
    e.mutable_problem()->mutable_gemm()->set_a_dtype(v1::FP8_E4M3);
    e.mutable_problem()->mutable_gemm()->set_b_dtype(v1::FP8_E4M3);
    v1::SkinnyTile* t = e.mutable_config()->mutable_gemm()->mutable_skinny();
    t->set_warps(8);
    t->set_unroll(1);
    t->set_pipelined(true);
    e.mutable_recipe()->set_template_id("gemm/gemm_skinny");
    cases.push_back({e,
                     "entry.config.gemm: cannot run this problem on sm_90: skinny w8 u1 pipelined: pipelined "
                     "serves fp8 at M <= 8 only"});
  }
  for (const Case& c : cases) {
    const absl::Status s = ValidateEntry(BuiltinOps(), c.entry);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()) == c.expected);
  }
}

TEST_CASE("ValidateEntry: on an architecture it does not know, a GEMM config gets field checks only", "[cache][gemm]") {
  v1::Entry e = WgmmaEntry(3);  // refused on sm_90 (above)
  e.mutable_device()->set_cc_major(11);
  e.mutable_device()->set_cc_minor(0);
  e.mutable_recipe()->set_arch("sm_110");
  REQUIRE(ArchSmemPerBlockOptin(11, 0) == 0);
  INFO(ValidateEntry(BuiltinOps(), e).ToString());
  CHECK(ValidateEntry(BuiltinOps(), e).ok());
  e.mutable_config()->mutable_gemm()->mutable_wgmma()->set_split_k(-1);
  CHECK(std::string(ValidateEntry(BuiltinOps(), e).message()).rfind("entry.config.gemm.wgmma.split_k:", 0) == 0);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

// The device an entry was tuned on, as ValidateEntry rebuilds it from the
// fingerprint and the architecture's limits.
DeviceInfo EntryDevice(const v1::Entry& e) {
  DeviceInfo d = DeviceFromProto(e.device());
  d.max_smem_per_block_optin = ArchSmemPerBlockOptin(d.cc_major, d.cc_minor);
  d.max_threads_per_sm = ArchMaxThreadsPerSm(d.cc_major, d.cc_minor);
  return d;
}

// `e` as this build stores it: its software fingerprint and the recipe this
// build's template writes for its config (no lowered names: those come from
// compiling it).
v1::Entry WithTemplatesRecipe(v1::Entry e) {
  absl::StatusOr<SoftwareFingerprint> software = BuiltinOps().Software(e.problem());
  REQUIRE(software.ok());
  *e.mutable_software() = SoftwareToProto(*software);
  absl::StatusOr<LaunchRecipe> r = absl::UnknownError("unset");
  if (e.problem().has_gemm()) {
    absl::StatusOr<GemmTileConfig> c = GemmTileConfigFromProto(e.config().gemm().mma_sync());
    REQUIRE(c.ok());
    r = GemmLaunchRecipe(e.problem().gemm(), *c, EntryDevice(e));
  } else {
    absl::StatusOr<NormProblem> p = NormProblemFromProto(e.problem().norm());
    absl::StatusOr<NormConfig> c = NormConfigFromProto(e.config().norm());
    REQUIRE(p.ok());
    REQUIRE(c.ok());
    r = NormLaunchRecipe(*p, *c, EntryDevice(e));
  }
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  *e.mutable_recipe() = StoredRecipe(RecipeToProto(*r, /*include_cubin=*/false));
  return e;
}

TEST_CASE("ValidateEntry: a recipe of this build's template must be the one it writes for the config",
          "[cache][gemm]") {
  const v1::Entry norm = WithTemplatesRecipe(MakeTestEntry());
  CHECK(ValidateEntry(BuiltinOps(), norm).ok());
  v1::Entry gemm = MakeTestGemmEntry();
  gemm.mutable_problem()->mutable_gemm()->set_m(16);  // few tiles: a split-K config is one the space offers
  gemm.mutable_config()->mutable_gemm()->mutable_mma_sync()->set_split_k(4);
  gemm = WithTemplatesRecipe(gemm);
  INFO(ValidateEntry(BuiltinOps(), gemm).ToString());
  REQUIRE(ValidateEntry(BuiltinOps(), gemm).ok());
  REQUIRE(gemm.recipe().workspace_bytes() > 0);

  struct Case {
    v1::Entry entry;
    std::function<void(v1::Entry&)> change;
    std::string expected;  // the whole message
  };
  const std::vector<Case> cases = {
      {gemm, [](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_grid(1, 1); },
       "entry.recipe.kernels[0].grid: is (32, 1, 1), but this template writes (32, 4, 1) for the problem and "
       "config"},
      {gemm, [](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->mutable_params()->RemoveLast(); },
       "entry.recipe.kernels[0].params: is [\"a\", \"b\", \"c\", \"d\", \"bias\", \"M\", \"N\", \"K\", \"alpha\", "
       "\"beta\"], but this template writes [\"a\", \"b\", \"c\", \"d\", \"bias\", \"M\", \"N\", \"K\", \"alpha\", "
       "\"beta\", \"ws\"] for the problem and config"},
      {gemm, [](v1::Entry& e) { e.mutable_recipe()->set_workspace_bytes(16); },
       "entry.recipe.workspace_bytes: is 16, but this template writes 8388736 for the problem and config"},
      {gemm, [](v1::Entry& e) { e.mutable_recipe()->set_workspace_zeroed(false); },
       "entry.recipe.workspace_zeroed: is false, but this template writes true for the problem and config"},
      {gemm,
       [](v1::Entry& e) {
         e.mutable_recipe()->mutable_kernels(0)->set_name_expression(
             "ktune::gemm_mma<ktune::bf16, ktune::bf16, true, 0, false, 128, 128, 32, 2, 2, 4, 8, 1>");
       },
       "entry.recipe.kernels[0].name_expression: is \"ktune::gemm_mma<ktune::bf16, ktune::bf16, true, 0, false, 128, "
       "128, 32, 2, 2, 4, 8, 1>\", but this template writes \"ktune::gemm_mma<ktune::bf16, ktune::bf16, true, 0, "
       "false, 128, 128, 32, 2, 2, 4, 8, 4>\" for the problem and config"},
      {norm, [](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_block(0, 64); },
       "entry.recipe.kernels[0].block: is (64, 1, 1), but this template writes (" +
           std::to_string(norm.recipe().kernels(0).block(0)) + ", 1, 1) for the problem and config"},
      {norm, [](v1::Entry& e) { e.mutable_recipe()->mutable_kernels(0)->set_programmatic_dependent(false); },
       "entry.recipe.kernels[0].programmatic_dependent: is false, but this template writes true for the "
       "problem and config"},
      {norm, [](v1::Entry& e) { e.mutable_recipe()->add_kernels()->CopyFrom(e.recipe().kernels(0)); },
       "entry.recipe.kernels: is 2 kernels, but this template writes 1 for the problem and config"},
  };
  for (const Case& c : cases) {
    v1::Entry e = c.entry;
    c.change(e);
    const absl::Status s = ValidateEntry(BuiltinOps(), e);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()) == c.expected);
  }
  // A recipe of another template text is refused while the entry claims this
  // build's software (it would be served); an entry of another build's
  // software (another version's, stale here, never served) is not compared.
  v1::Entry other = gemm;
  other.mutable_recipe()->set_template_hash(std::string(64, 'a'));
  other.mutable_recipe()->mutable_kernels(0)->set_grid(1, 1);
  CHECK(std::string(ValidateEntry(BuiltinOps(), other).message()).rfind("entry.recipe.template_hash: is ", 0) == 0);
  other.mutable_software()->set_template_hash(std::string(64, 'a'));
  CHECK(ValidateEntry(BuiltinOps(), other).ok());
}

}  // namespace
}  // namespace ktune
