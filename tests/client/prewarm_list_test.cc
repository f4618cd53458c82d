// The prewarm problem list (client/prewarm_list.h): dedup by key, and the
// --shard arithmetic batch jobs rely on: shards partition the list, the same
// way in every process.
#include "client/prewarm_list.h"

#include <catch2/catch.hpp>
#include <map>

#include "tuner/core/wire.h"

namespace ktune {
namespace {

v1::Problem Rms(int64_t m, int64_t n) {
  NormProblem p;
  p.m = m;
  p.n = n;
  v1::Problem out;
  *out.mutable_norm() = NormProblemToProto(p);
  return out;
}

std::vector<PrewarmProblem> ManyProblems() {
  ProblemList list;
  for (int64_t m = 1; m <= 40; ++m) {
    for (int64_t n : {128, 1024, 4096, 5120, 8192}) list.Add(Rms(m * 7, n));
  }
  return list.Take();
}

TEST_CASE("the problem list drops duplicates and keeps first-seen order", "[client][prewarm]") {
  ProblemList list;
  CHECK(list.Add(Rms(8, 16)));
  CHECK(list.Add(Rms(4, 16)));
  CHECK_FALSE(list.Add(Rms(8, 16)));
  REQUIRE(list.problems().size() == 2);
  CHECK(list.problems()[0].key == "rmsnorm.fwd m=8 n=16 in=bf16 out=bf16 wt=bf16 w=1 b=0 eps=9.99999997e-07");
  CHECK(list.problems()[1].problem.norm().m() == 4);
}

TEST_CASE("the list counts its problems by kind, every kind named", "[client][prewarm]") {
  ProblemList list;
  list.Add(Rms(8, 16));
  CHECK(CountByKind(list.problems()) == "1 norm, 0 gemm");
  v1::Problem gemm;
  gemm.mutable_gemm()->set_m(16);
  list.Add(gemm);
  list.Add(Rms(4, 16));
  CHECK(CountByKind(list.problems()) == "2 norm, 1 gemm");
  // A problem of no kind is listed (by its text) but counted under none.
  list.Add(v1::Problem());
  CHECK(list.problems().size() == 4);
  CHECK(CountByKind(list.problems()) == "2 norm, 1 gemm");
  const absl::Status none = ValidatePrewarmProblems({list.problems().back()});
  CHECK(none.message().find("problem: missing (set one of: norm, gemm)") != absl::string_view::npos);
}

TEST_CASE("shard parsing validates i < n and n >= 1", "[client][prewarm]") {
  auto ok = ParseShard("2/5");
  REQUIRE(ok.ok());
  CHECK(ok->index == 2);
  CHECK(ok->count == 5);
  CHECK(ParseShard("0/1").ok());
  for (const char* bad : {"5/5", "1/0", "-1/3", "0/-2", "1", "a/b", "1/2/3", "", "1/"}) {
    INFO(bad);
    auto s = ParseShard(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().message().rfind("--shard: ", 0) == 0);
  }
}

TEST_CASE("shards partition the list: every problem in exactly one", "[client][prewarm]") {
  const std::vector<PrewarmProblem> all = ManyProblems();
  REQUIRE(all.size() == 200);
  for (int n : {1, 2, 3, 7, 16}) {
    std::map<std::string, int> seen;
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      const std::vector<PrewarmProblem> part = SelectShard(all, Shard{i, n});
      total += part.size();
      for (const PrewarmProblem& p : part) ++seen[p.key];
      if (n <= 3) CHECK(!part.empty());  // the hash spreads 200 problems over a few shards
    }
    CHECK(total == all.size());
    CHECK(seen.size() == all.size());
    for (const auto& [key, count] : seen) CHECK(count == 1);
  }
}

TEST_CASE("sharding is deterministic and independent of list order", "[client][prewarm]") {
  std::vector<PrewarmProblem> all = ManyProblems();
  const std::vector<PrewarmProblem> first = SelectShard(all, Shard{1, 4});
  std::reverse(all.begin(), all.end());
  std::vector<PrewarmProblem> again = SelectShard(all, Shard{1, 4});
  std::reverse(again.begin(), again.end());
  REQUIRE(first.size() == again.size());
  for (size_t i = 0; i < first.size(); ++i) CHECK(first[i].key == again[i].key);
  // The hash is part of the contract between ktune builds: pin it.
  CHECK(StableKeyHash("") == 14695981039346656037ull);
  CHECK(StableKeyHash("a") == 0xaf63dc4c8601ec8cull);
}

}  // namespace
}  // namespace ktune
