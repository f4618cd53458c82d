// cuBLASLt as a candidate source (tuner/gpu/cublaslt.h): what it serves, and that
// the library loads and answers cleanly on machines with or without a GPU.
// Running its algorithms is checked on the GPU machine.
#include "tuner/gpu/cublaslt.h"

#include <catch2/catch.hpp>

#include "tests/tuner/gemm_test_problems.h"
#include "tuner/core/gemm_problem.h"

namespace ktune {
namespace {

// 256 x 512 x 1024 with A and B of dtype `ab`.
v1::GemmProblem Problem(v1::DType ab, v1::Layout b_layout, v1::Epilogue epilogue = v1::EPILOGUE_NONE) {
  v1::GemmProblem p = TestGemm(256, 512, 1024, b_layout, epilogue);
  p.set_a_dtype(ab);
  p.set_b_dtype(ab);
  REQUIRE(ValidateGemmProblem(p).ok());
  return p;
}
TEST_CASE("cuBLASLt serves bf16 and TN fp8 with no epilogue or a bias", "[tuner][cublaslt]") {
  CHECK(CublasLtCanServe(Problem(v1::BF16, v1::COL_MAJOR)).ok());
  CHECK(CublasLtCanServe(Problem(v1::BF16, v1::ROW_MAJOR, v1::EPILOGUE_BIAS)).ok());
  CHECK(CublasLtCanServe(Problem(v1::FP8_E4M3, v1::COL_MAJOR)).ok());
  // fp8 with B as [K, N] is refused at the edge (ValidateGemmProblem), and
  // here too, should a caller skip that.
  v1::GemmProblem fp8_nn = TestGemm(256, 512, 1024, v1::ROW_MAJOR);
  fp8_nn.set_a_dtype(v1::FP8_E4M3);
  fp8_nn.set_b_dtype(v1::FP8_E4M3);
  CHECK(ValidateGemmProblem(fp8_nn).code() == absl::StatusCode::kInvalidArgument);
  const absl::Status fp8_refused = CublasLtCanServe(fp8_nn);
  CHECK(fp8_refused.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(fp8_refused.message()), Catch::Contains("TN"));
  const absl::Status gelu = CublasLtCanServe(Problem(v1::BF16, v1::COL_MAJOR, v1::EPILOGUE_BIAS_GELU));
  CHECK_THAT(std::string(gelu.message()), Catch::Contains("GELU"));
}

TEST_CASE("cuBLASLt loads or says why not and its heuristic fails cleanly without a GPU", "[tuner][cublaslt]") {
  absl::StatusOr<std::unique_ptr<CublasLt>> lt = CublasLt::Open();
  if (!lt.ok()) {
    // A machine without the library: a clear refusal, nothing else.
    CHECK(lt.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(lt.status().message()), Catch::Contains("cuBLASLt") || Catch::Contains("cublasLt"));
    return;
  }
  CHECK((*lt)->version() >= 120000);
  const v1::GemmProblem p = Problem(v1::BF16, v1::COL_MAJOR);
  CublasLtAlgo short_algo;
  short_algo.data = "too short";
  CHECK((*lt)->Check(p, short_algo).code() == absl::StatusCode::kInvalidArgument);
  CHECK((*lt)->Variants(p, {short_algo}, 32 << 20, true, 4).status().code() == absl::StatusCode::kInvalidArgument);
  const absl::Status unread = (*lt)->ReadSettings(short_algo).status();
  CHECK(unread.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(unread.message()), Catch::Contains("64 bytes"));
  absl::StatusOr<std::vector<CublasLtAlgo>> algos = (*lt)->Heuristic(p, 8, 32 << 20);
  if (!algos.ok()) {
    INFO(algos.status().ToString());
    CHECK_FALSE(algos.status().message().empty());  // no GPU: an error naming the call, no crash
    // The tuner's list fails with the heuristic's error, before any variant.
    absl::Status variants = absl::UnknownError("untouched");
    absl::StatusOr<std::vector<CublasLtAlgo>> candidates = (*lt)->Candidates(p, 8, true, &variants);
    REQUIRE_FALSE(candidates.ok());
    CHECK(candidates.status() == algos.status());
    CHECK(variants.code() == absl::StatusCode::kUnknown);
    return;
  }
  // A GPU: algorithms of 64 bytes that cuBLASLt itself accepts back.
  REQUIRE_FALSE(algos->empty());
  for (const CublasLtAlgo& a : *algos) {
    CHECK(a.data.size() == 64);
    CHECK((*lt)->Check(p, a).ok());
  }
}

TEST_CASE("an algorithm's settings print every field, in cuBLASLt's numbering", "[tuner][cublaslt]") {
  // id, tile, split K, reduction, swizzle, custom option, stages, inner shape, cluster.
  const CublasLtAlgoSettings s{66, 21, 1, 0, 0, 5, 30, 0, 2};
  CHECK(ToString(s) == "algo 66 tile 21 splitk 1 reduction 0 swizzle 0 custom 5 stages 30 inner 0 cluster 2");
  CublasLtAlgoSettings other = s;
  CHECK(other == s);
  other.inner = 1;  // every field counts: two kernels differ in any one
  CHECK_FALSE(other == s);
}

TEST_CASE("a second heuristic list adds only algorithms the first lacks, after it, up to the cap",
          "[tuner][cublaslt]") {
  auto algo = [](char tag) {
    CublasLtAlgo a;
    a.data = std::string(64, tag);
    return a;
  };
  auto tags = [](const std::vector<CublasLtAlgo>& algos) {
    std::string out;
    for (const CublasLtAlgo& a : algos) out += a.data[0];
    return out;
  };
  const std::vector<CublasLtAlgo> first = {algo('a'), algo('b'), algo('c')};
  // The first list's order (and its head, cuBLASLt's default) is kept; repeats are dropped.
  CHECK(tags(MergeCublasLtAlgos(first, {algo('b'), algo('d'), algo('a'), algo('e')}, 16)) == "abcde");
  CHECK(tags(MergeCublasLtAlgos(first, {algo('d'), algo('e')}, 4)) == "abcd");
  CHECK(tags(MergeCublasLtAlgos(first, {algo('d')}, 2)) == "ab");
  CHECK(tags(MergeCublasLtAlgos({}, {algo('d'), algo('d')}, 8)) == "d");
  CHECK(tags(MergeCublasLtAlgos(first, {}, 8)) == "abc");
  // Same configuration, different bytes (another workspace size, say) count as different.
  CublasLtAlgo b2 = algo('b');
  b2.data[63] = 'x';
  CHECK(tags(MergeCublasLtAlgos(first, {b2}, 8)) == "abcb");
}

TEST_CASE("variants change one setting of the seed, clusters first, each once", "[tuner][cublaslt]") {
  CublasLtConfig seed;
  seed.stages = 7;
  seed.swizzle = 0;
  seed.custom = 1;
  seed.cluster = 3;  // 2x1x1
  CublasLtCaps caps;
  caps.stages = {7, 9, 9, 12};  // the seed's own, and a repeat
  caps.swizzle = true;
  caps.custom_max = 100;
  caps.clusters = true;
  const std::vector<CublasLtConfig> all = NeighbourConfigs(seed, caps);
  // 5 other cluster shapes, the other swizzle, 2 other stage counts, 4 other custom options.
  REQUIRE(all.size() == 5 + 1 + 2 + 4);
  for (size_t i = 0; i < all.size(); ++i) {
    const CublasLtConfig& c = all[i];
    const int changed = (c.stages != seed.stages) + (c.swizzle != seed.swizzle) + (c.custom != seed.custom) +
                        (c.cluster != seed.cluster);
    CHECK(changed == 1);
    for (size_t j = 0; j < i; ++j) CHECK_FALSE(all[j] == c);
  }
  CHECK(all[0].cluster == 2);  // 1x1x1 first; the seed's 2x1x1 is skipped
  CHECK(all[1].cluster == 5);  // 1x2x1
  CHECK(all[5].swizzle == 1);
  CHECK(all[6].stages == 9);
  CHECK(all[7].stages == 12);
  CHECK(all[8].custom == 0);
  CHECK(all[9].custom == 2);  // the seed's 1 is skipped
  CHECK(all[11].custom == 4);

  // Without clusters, swizzle or custom options only the stages vary; with
  // nothing to vary there is nothing.
  caps.clusters = false;
  caps.swizzle = false;
  caps.custom_max = 0;
  seed.custom = 0;
  CHECK(NeighbourConfigs(seed, caps).size() == 2);
  caps.stages.clear();
  CHECK(NeighbourConfigs(seed, caps).empty());
}

}  // namespace
}  // namespace ktune
