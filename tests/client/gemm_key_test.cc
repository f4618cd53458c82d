// One GEMM key everywhere: prewarm's list dedups and shards by the cache's own
// key (GemmCanonicalKey), and `ktune get gemm` spells B as shapes files and
// --from-model do ([N, K]), so a prewarmed shape is found by looking it up.
#include <catch2/catch.hpp>

#include "cache/bundle.h"
#include "cache/entry.h"
#include "client/prewarm_list.h"
#include "client/shapes_file.h"
#include "tests/cache/current_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/gemm_problem.h"

namespace ktune {
namespace {

using testing::CommandResult;
using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

v1::Problem Gemm(int64_t batch, v1::DType d) {
  v1::Problem p;
  v1::GemmProblem* g = p.mutable_gemm();
  g->set_m(8);
  g->set_n(4096);
  g->set_k(4096);
  g->set_batch(batch);
  g->set_a_dtype(v1::BF16);
  g->set_b_dtype(v1::BF16);
  g->set_d_dtype(d);
  g->set_a_layout(v1::ROW_MAJOR);
  g->set_b_layout(v1::COL_MAJOR);
  return p;
}

TEST_CASE("prewarm keys a GEMM as the cache does: one entry is one problem", "[client][prewarm]") {
  // batch 0 and 1, an unset and a bf16 D: one cache entry, spelled four ways.
  const v1::Problem spellings[] = {Gemm(1, v1::BF16), Gemm(0, v1::BF16), Gemm(1, v1::DTYPE_UNSPECIFIED),
                                   Gemm(0, v1::DTYPE_UNSPECIFIED)};
  ProblemList list;
  CHECK(list.Add(spellings[0]));
  for (const v1::Problem& p : spellings) {
    CHECK(ProblemKey(p) == GemmCanonicalKey(spellings[0].gemm()));
    CHECK(ProblemKey(p) == GemmCanonicalKey(p.gemm()));
  }
  CHECK_FALSE(list.Add(spellings[1]));
  CHECK_FALSE(list.Add(spellings[2]));
  CHECK_FALSE(list.Add(spellings[3]));
  CHECK(list.problems().size() == 1);
  // The very key the cache stores each spelling's entry under.
  for (const v1::Problem& p : spellings) {
    absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), testutil::CurrentEntry(p, testutil::SkinnyConfigFor(p.gemm())));
    REQUIRE(key.ok());
    CHECK(key->problem_key == ProblemKey(spellings[0]));
  }
  // So every spelling lands in one shard.
  for (int count = 2; count <= 7; ++count) {
    for (int index = 0; index < count; ++index) {
      const Shard shard{index, count};
      const bool in = InShard({spellings[0], ProblemKey(spellings[0])}, shard);
      for (const v1::Problem& p : spellings) CHECK(InShard({p, ProblemKey(p)}, shard) == in);
    }
  }
}

TEST_CASE("ktune get gemm finds a shape prewarmed from a shapes file", "[client][e2e]") {
  absl::StatusOr<std::vector<PrewarmProblem>> shapes =
      ParseShapes("problems:\n  - {op: gemm, m: 1, n: 4096, k: 4096}\n", "shapes.yaml");
  REQUIRE(shapes.ok());
  REQUIRE(shapes->size() == 1);
  const v1::Problem& prewarmed = (*shapes)[0].problem;
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  // The entry its prewarm would have stored (made here: no GPU to tune on).
  const v1::Entry entry = testutil::CurrentEntry(prewarmed, testutil::SkinnyConfigFor(prewarmed.gemm()));
  REQUIRE(daemon.NewClient()->ImportBundle(EncodeBundle({entry}, "test", 1795000000)).ok());

  const std::string get = std::string(KTUNE_CLI_PATH) + " --server " + daemon.address() +
                          " get gemm --m 1 --n 4096 --k 4096 --policy cached";
  CommandResult found = RunCommand(get, dir.path());
  INFO(found.out << found.err);
  CHECK(found.exit_code == 0);
  CHECK(found.out.find("TUNED") != std::string::npos);
  // [K, N] is another problem, asked for by name.
  CommandResult other = RunCommand(get + " --b-layout kn", dir.path());
  CHECK(other.exit_code != 0);
  CHECK(other.err.find("NOT_FOUND") != std::string::npos);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
