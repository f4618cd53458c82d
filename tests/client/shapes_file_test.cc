// Shapes files (client/shapes_file.h): YAML and JSON give the same problems,
// defaults fill what an entry leaves out, and every bad input is one error
// naming the file, the line, the entry and the field.
#include "client/shapes_file.h"

#include <catch2/catch.hpp>
#include <ctime>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

NormProblem NormOf(const PrewarmProblem& p) {
  absl::StatusOr<NormProblem> norm = NormProblemFromProto(p.problem.norm());
  REQUIRE(norm.ok());
  return *norm;
}

std::string ErrorOf(const std::string& text) {
  auto parsed = ParseShapes(text, "shapes.yaml");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(parsed.status().message());
}

TEST_CASE("a YAML shapes file with defaults, m lists and gemm entries", "[client][shapes]") {
  const char* text = R"(
defaults:
  dtype: fp16
  eps: 1.0e-5
  bias: true
problems:
  - {op: rmsnorm.fwd, m: [1, 16], n: 4096}
  - op: layernorm.bwd
    m: 128
    n: 1024
    weight_dtype: fp32
  - {op: rmsnorm.fwd, m: 16, n: 4096}   # a duplicate: dropped
  - {op: gemm, m: 64, n: 128, k: 256, dtype: bf16}
)";
  auto parsed = ParseShapes(text, "shapes.yaml");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 4);

  const NormProblem a = NormOf((*parsed)[0]);
  CHECK(a.op == NormOp::kRMSNorm);
  CHECK(a.pass == NormPass::kForward);
  CHECK(a.m == 1);
  CHECK(a.n == 4096);
  CHECK(a.input_dtype == DType::kFP16);
  CHECK(a.weight_dtype == DType::kFP16);
  CHECK(a.eps == 1e-5f);
  CHECK_FALSE(a.has_bias);  // the default bias is for LayerNorm entries only
  CHECK(NormOf((*parsed)[1]).m == 16);

  const NormProblem ln = NormOf((*parsed)[2]);
  CHECK(ln.op == NormOp::kLayerNorm);
  CHECK(ln.pass == NormPass::kBackward);
  CHECK(ln.has_bias);
  CHECK(ln.weight_dtype == DType::kFP32);
  CHECK(ln.output_dtype == DType::kFP16);

  const PrewarmProblem& g = (*parsed)[3];
  REQUIRE(g.problem.has_gemm());
  CHECK(g.problem.gemm().k() == 256);
  CHECK(g.problem.gemm().a_dtype() == v1::BF16);
  CHECK(g.key.rfind("gemm m=64 n=128 k=256", 0) == 0);
}

TEST_CASE("JSON shapes give the same problems as YAML", "[client][shapes]") {
  const char* yaml =
      "- {op: rmsnorm.bwd, m: [8, 4096], n: 2048, eps: 1.0e-6}\n"
      "- {op: layernorm.fwd, m: 3, n: 5, bias: true, weight: false}\n";
  const char* json = R"({"problems": [
      {"op": "rmsnorm.bwd", "m": [8, 4096], "n": 2048, "eps": 1e-6},
      {"op": "layernorm.fwd", "m": 3, "n": 5, "bias": true, "weight": false}]})";
  auto a = ParseShapes(yaml, "a.yaml");
  auto b = ParseShapes(json, "b.json");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(a->size() == 3);
  REQUIRE(b->size() == 3);
  for (size_t i = 0; i < a->size(); ++i) CHECK((*a)[i].key == (*b)[i].key);
  CHECK_FALSE(NormOf((*b)[2]).has_weight);
}

TEST_CASE("the shipped example shapes file parses", "[client][shapes]") {
  const auto path =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "deploy" / "shapes-example.yaml";
  auto parsed = LoadShapesFile(path.string());
  REQUIRE(parsed.ok());
  CHECK(parsed->size() == 11);
  CHECK(parsed->back().problem.has_gemm());
}

TEST_CASE("bad shapes files name the file, line, entry and field", "[client][shapes]") {
  SECTION("not YAML") {
    const std::string e = ErrorOf("problems: [ {op: rmsnorm.fwd, m: 1\n");
    CHECK(e.rfind("shapes.yaml:", 0) == 0);
    CHECK(e.find("not valid YAML or JSON") != std::string::npos);
  }
  SECTION("empty") { CHECK(ErrorOf("").find("empty") != std::string::npos); }
  SECTION("unknown op") {
    const std::string e = ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8}\n- {op: softmax, m: 1, n: 8}\n");
    CHECK(e.find("shapes.yaml:2: problems[1].op: unknown op 'softmax'") == 0);
  }
  SECTION("missing field") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1}\n").find("problems[0].n: missing") != std::string::npos);
  }
  SECTION("not an integer") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: [1, x], n: 8}\n")
              .find("problems[0].m[1]: must be a positive integer, got 'x'") != std::string::npos);
  }
  SECTION("zero") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 0, n: 8}\n").find("problems[0].m: must be a positive integer") !=
          std::string::npos);
  }
  SECTION("out of the daemon's bounds") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 300000}\n")
              .find("shapes.yaml:1: problems[0].n: must be in [1, 262144], got 300000") == 0);
  }
  SECTION("a typo in a field name") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, dtpye: fp16}\n").find("problems[0].dtpye: unknown field") !=
          std::string::npos);
  }
  SECTION("bad dtype, from the defaults") {
    const std::string e = ErrorOf("defaults:\n  dtype: fp64\nproblems:\n  - {op: rmsnorm.fwd, m: 1, n: 8}\n");
    CHECK(e.find("shapes.yaml:2: defaults.dtype: unknown dtype 'fp64'") == 0);
  }
  SECTION("RMSNorm with a bias") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, bias: true}\n").find("problems[0].bias: RMSNorm has no bias") !=
          std::string::npos);
  }
  SECTION("weight dtype neither the input's nor fp32") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, dtype: bf16, weight_dtype: fp16}\n")
              .find("problems[0].weight_dtype: must be the input dtype") != std::string::npos);
  }
  SECTION("gemm without k, and k on a norm") {
    CHECK(ErrorOf("- {op: gemm, m: 1, n: 8}\n").find("problems[0].k: missing") != std::string::npos);
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, k: 2}\n").find("problems[0].k: only gemm") != std::string::npos);
  }
  SECTION("one bad entry among good ones rejects the file") {
    const std::string e = ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8}\n- {op: rmsnorm.fwd, m: 1, n: 8, eps: 2}\n");
    CHECK(e.find("shapes.yaml:2: problems[1].eps: must be finite and in (0, 1]") == 0);
  }
  SECTION("unknown top-level key") {
    CHECK(ErrorOf("problem: []\n").find("unknown top-level key") != std::string::npos);
  }
}

// Found by tests/fuzz/shapes_file_fuzzer: yaml-cpp throws when a list or a
// mapping is read as a field name, which took `ktune prewarm` down.
TEST_CASE("a list or mapping where a field name belongs is an error and not a crash", "[client][shapes]") {
  CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, [4096, 65536], eps: 1.0e-6}\n")
            .find("shapes.yaml:1: problems[0]: a field name must be a plain word") == 0);
  CHECK(ErrorOf("defaults: {{dtype: bf16}: 1}\nproblems: [{op: rmsnorm.fwd, m: 1, n: 8}]\n")
            .find("defaults: a field name must be a plain word") != std::string::npos);
  CHECK(ErrorOf("? [problems]\n: 1\n").find("a top-level key must be a plain word") != std::string::npos);
}

TEST_CASE("entries take the norm variants: residual, weight_offset and an fp8 output's scale", "[client][shapes]") {
  const char* text = R"(
problems:
  - {op: rmsnorm.fwd, m: 16, n: 4096, residual: true, weight_offset: true}
  - {op: rmsnorm.fwd, m: 16, n: 4096}
  - {op: rmsnorm.fwd, m: 16, n: 4096, out_dtype: fp8e4m3, scale: 0.5}
  - {op: rmsnorm.fwd, m: 16, n: 4096, out_dtype: fp8e4m3, scale: 0.25}   # the scale is not in the key: dropped
  - {op: rmsnorm.bwd, m: 16, n: 4096, residual: true}
  - {op: layernorm.fwd, m: 16, n: 1024, bias: true, weight_offset: true}
)";
  auto parsed = ParseShapes(text, "shapes.yaml");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 5);

  const NormProblem both = NormOf((*parsed)[0]);
  CHECK(both.residual);
  CHECK(both.weight_offset);
  CHECK(both.output_dtype == DType::kBF16);
  CHECK(both.out_scale == 0.0f);
  CHECK(absl::EndsWith((*parsed)[0].key, " res=1 woff=1"));

  const NormProblem plain = NormOf((*parsed)[1]);
  CHECK_FALSE(plain.residual);
  CHECK_FALSE(plain.weight_offset);
  // The plain key is what it was before the variants existed.
  CHECK((*parsed)[1].key == CanonicalKey(plain));
  CHECK((*parsed)[1].key.find("res=") == std::string::npos);
  CHECK((*parsed)[1].key.find("woff=") == std::string::npos);

  const NormProblem fp8 = NormOf((*parsed)[2]);
  CHECK(fp8.output_dtype == DType::kFP8E4M3);
  CHECK(fp8.input_dtype == DType::kBF16);
  CHECK(fp8.out_scale == 0.5f);  // the first of the two entries is kept
  CHECK_FALSE(fp8.residual);
  CHECK((*parsed)[2].key.find(" out=fp8e4m3 ") != std::string::npos);

  const NormProblem bwd = NormOf((*parsed)[3]);
  CHECK(bwd.pass == NormPass::kBackward);
  CHECK(bwd.residual);

  const NormProblem ln = NormOf((*parsed)[4]);
  CHECK(ln.op == NormOp::kLayerNorm);
  CHECK(ln.weight_offset);
  CHECK_FALSE(ln.residual);
}

TEST_CASE("a default residual is for rmsnorm entries and a default scale for fp8-output entries only",
          "[client][shapes]") {
  // As a default bias is for the layernorm entries: the other entries of
  // the file take no such field, and are not refused for the default.
  const char* text = R"(
defaults:
  residual: true
  weight_offset: true
  scale: 0.25
problems:
  - {op: rmsnorm.fwd, m: 8, n: 64}
  - {op: rmsnorm.bwd, m: 8, n: 64}
  - {op: layernorm.fwd, m: 8, n: 64}
  - {op: rmsnorm.fwd, m: 8, n: 64, out_dtype: fp8e4m3}
  - {op: rmsnorm.fwd, m: 8, n: 64, residual: false, weight_offset: false}
  - {op: gemm, m: 8, n: 64, k: 64}
)";
  auto parsed = ParseShapes(text, "shapes.yaml");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 6);

  const NormProblem fwd = NormOf((*parsed)[0]);
  CHECK(fwd.residual);
  CHECK(fwd.weight_offset);
  CHECK(fwd.out_scale == 0.0f);  // bf16 output: no scale
  const NormProblem bwd = NormOf((*parsed)[1]);
  CHECK(bwd.residual);
  CHECK(bwd.weight_offset);
  const NormProblem ln = NormOf((*parsed)[2]);
  CHECK_FALSE(ln.residual);
  CHECK(ln.weight_offset);  // every norm has a weight offset
  CHECK(ln.out_scale == 0.0f);
  const NormProblem fp8 = NormOf((*parsed)[3]);
  CHECK(fp8.output_dtype == DType::kFP8E4M3);
  CHECK(fp8.out_scale == 0.25f);
  CHECK(fp8.residual);
  const NormProblem own = NormOf((*parsed)[4]);  // an entry's own value wins
  CHECK_FALSE(own.residual);
  CHECK_FALSE(own.weight_offset);
  CHECK((*parsed)[5].problem.has_gemm());
}

TEST_CASE("the norm variants where they do not apply are errors naming the field", "[client][shapes]") {
  SECTION("a residual on a layernorm entry") {
    CHECK(ErrorOf("- {op: layernorm.fwd, m: 1, n: 8}\n- {op: layernorm.bwd, m: 1, n: 8, residual: true}\n") ==
          "shapes.yaml:2: problems[1].residual: the fused residual add is RMSNorm's only");
  }
  SECTION("a variant on a gemm entry") {
    for (const char* field : {"residual: true", "weight_offset: true", "scale: 0.5"}) {
      INFO(field);
      const std::string name = std::string(field).substr(0, std::string(field).find(':'));
      CHECK(ErrorOf(absl::StrCat("- {op: gemm, m: 8, n: 64, k: 64, ", field, "}\n")) ==
            absl::StrCat("shapes.yaml:1: problems[0].", name, ": only norms take this field"));
    }
  }
  SECTION("a scale without fp8 output") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, scale: 0.5}\n") ==
          "shapes.yaml:1: problems[0].scale: a scale is for fp8e4m3 output only");
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, out_dtype: bf16, scale: 2}\n")
              .find("problems[0].scale: a scale is for fp8e4m3 output only") != std::string::npos);
  }
  SECTION("a scale that is not a positive number") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, out_dtype: fp8e4m3, scale: -1}\n") ==
          "shapes.yaml:1: problems[0].scale: must be finite and > 0 (0: 1), got -1");
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, out_dtype: fp8e4m3, scale: big}\n") ==
          "shapes.yaml:1: problems[0].scale: must be a number, got 'big'");
    // Below float32's range: it would round to 0, the problem's "unset" (1).
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, out_dtype: fp8e4m3, scale: 1.0e-50}\n") ==
          "shapes.yaml:1: problems[0].scale: 1e-50 is below the smallest float32 scale");
  }
  SECTION("a residual or weight_offset that is not a boolean") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, residual: maybe}\n") ==
          "shapes.yaml:1: problems[0].residual: must be true or false, got 'maybe'");
    // A layernorm entry's own residual is read, to be refused, too.
    CHECK(ErrorOf("- {op: layernorm.fwd, m: 1, n: 8, residual: [1]}\n") ==
          "shapes.yaml:1: problems[0].residual: must be true or false");
    CHECK(ErrorOf("defaults:\n  residual: 2\nproblems:\n  - {op: rmsnorm.fwd, m: 1, n: 8}\n") ==
          "shapes.yaml:2: defaults.residual: must be true or false, got '2'");
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, weight_offset: maybe}\n") ==
          "shapes.yaml:1: problems[0].weight_offset: must be true or false, got 'maybe'");
  }
  SECTION("a weight offset without a weight") {
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, weight: false, weight_offset: true}\n")
              .find("shapes.yaml:1: problems[0].weight_offset: (1 + w) needs a weight") == 0);
  }
  SECTION("fp8 output other than on the rmsnorm forward") {
    CHECK(ErrorOf("- {op: rmsnorm.bwd, m: 1, n: 8, out_dtype: fp8e4m3}\n") ==
          "shapes.yaml:1: problems[0].out_dtype: fp8e4m3 output is for the RMSNorm forward only (bf16, fp16 or fp32 "
          "for rmsnorm.bwd)");
    CHECK(ErrorOf("- {op: layernorm.fwd, m: 1, n: 8, out_dtype: fp8e4m3}\n") ==
          "shapes.yaml:1: problems[0].out_dtype: fp8e4m3 output is for the RMSNorm forward only (bf16, fp16 or fp32 "
          "for layernorm.fwd)");
    // fp8 in is no norm at all.
    CHECK(ErrorOf("- {op: rmsnorm.fwd, m: 1, n: 8, dtype: fp8e4m3}\n")
              .find("shapes.yaml:1: problems[0].dtype: fp8e4m3 is not supported for norms") == 0);
  }
}

TEST_CASE("an unreadable shapes file names the file", "[client][shapes]") {
  auto parsed = LoadShapesFile("/nonexistent/shapes.yaml");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().message() == "/nonexistent/shapes.yaml: cannot read the shapes file: no such file");
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

std::string MList(int64_t count) {
  std::string m = "[";
  for (int64_t i = 1; i <= count; ++i) absl::StrAppend(&m, i == 1 ? "" : ",", i);
  return m + "]";
}

// CPU seconds of this process since `start` (a std::clock() reading): a
// loaded CI machine stretches wall time, not the work done.
double SecondsSince(std::clock_t start) { return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC; }

TEST_CASE("a shapes file is expanded in linear time up to its cap of problems", "[client][shapes]") {
  // At the cap: every problem distinct, so every one goes through the
  // duplicate check (a sorted vector made this quadratic).
  const std::clock_t start = std::clock();
  auto at_cap = ParseShapes(absl::StrCat("- {op: rmsnorm.fwd, m: ", MList(kMaxShapesProblems), ", n: 64}\n"), "s.yaml");
  REQUIRE(at_cap.ok());
  CHECK(static_cast<int64_t>(at_cap->size()) == kMaxShapesProblems);
  CHECK(SecondsSince(start) < 10);  // about 0.5 s on one core; most of it yaml-cpp's parse

  // 400,000 m values took 25 s and were all accepted; now the cap refuses
  // them with a message that says what to do.
  const std::clock_t over_start = std::clock();
  const std::string over = ErrorOf(absl::StrCat("- {op: rmsnorm.fwd, m: ", MList(400000), ", n: 64}\n"));
  CHECK(over.find("shapes.yaml:1: more than 100000 problems") == 0);
  CHECK(over.find("split the list into several files") != std::string::npos);
  CHECK(SecondsSince(over_start) < 10);
}

TEST_CASE("a small shapes file of aliases that stands for millions of problems is refused quickly",
          "[client][shapes]") {
  // 50 KB: one entry of 2,000 m values, then 10,000 aliases of it: 2e7
  // problems (all duplicates) once yaml-cpp expands the aliases.
  std::string text = absl::StrCat("- &e {op: rmsnorm.fwd, m: ", MList(2000), ", n: 64}\n");
  for (int i = 0; i < 10000; ++i) text += "- *e\n";
  REQUIRE(text.size() < 64 * 1024);
  const std::clock_t start = std::clock();
  const std::string error = ErrorOf(text);
  CHECK(SecondsSince(start) < 5);
  CHECK(error.find("more than 100000 problems (every m value counts, each time an alias repeats it)") !=
        std::string::npos);
}

}  // namespace
}  // namespace ktune
