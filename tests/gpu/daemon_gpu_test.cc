// ktuned on a real GPU, end to end over gRPC: a streamed tune, the stored
// winner served from the cache (also after a restart), and that winner
// relaunched from nothing but its recipe and verified.
#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "tests/e2e/daemon_process.h"
#include "tests/gpu/gpu_env.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_runner.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

v1::Problem Rms(int64_t m, int64_t n) {
  v1::Problem p;
  NormProblem norm;
  norm.m = m;
  norm.n = n;
  *p.mutable_norm() = NormProblemToProto(norm);
  return p;
}

TEST_CASE("ktuned tunes over gRPC, stores the winner and serves it after a restart", "[gpu][daemon]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();
  auto status = client->GetStatus();
  REQUIRE(status.ok());
  REQUIRE_FALSE(status->compile_only());
  REQUIRE(status->devices_size() == 1);

  // A streamed tune reports every stage and ends with the tuned answer.
  v1::TuneRequest tune;
  *tune.mutable_problem() = Rms(3000, 3000);
  std::set<std::string> stages;
  int candidates = 0;
  auto tuned = client->Tune(tune, [&](const v1::TuneEvent& e) {
    if (e.has_progress()) stages.insert(e.progress().stage());
    if (e.has_candidate()) ++candidates;
  });
  REQUIRE(tuned.ok());
  CHECK(tuned->source() == v1::TUNED);
  CHECK(tuned->measurement().time_us() > 0);
  CHECK(tuned->measurement().repetitions() >= 20);
  for (const char* stage : {"generated", "pruned", "compiled", "verified", "measured"}) {
    CHECK(stages.count(stage) == 1);
  }
  CHECK(candidates > 0);

  // The cache answers it, with the cubin, and the recipe alone launches it.
  v1::GetConfigRequest get;
  *get.mutable_problem() = Rms(3000, 3000);
  get.set_policy(v1::CACHED_ONLY);
  get.set_include_cubin(true);
  auto hit = client->GetConfig(get);
  REQUIRE(hit.ok());
  CHECK(hit->source() == v1::TUNED);
  CHECK(hit->config().SerializeAsString() == tuned->config().SerializeAsString());
  REQUIRE_FALSE(hit->recipe().cubin().empty());
  auto problem = NormProblemFromProto(get.problem().norm());
  REQUIRE(problem.ok());
  auto runner = NormRunner::Create(*problem, testing::GpuDevice(), /*seed=*/77);
  REQUIRE(runner.ok());
  auto verified = (*runner)->Verify(RecipeFromProto(hit->recipe()));
  REQUIRE(verified.ok());
  CHECK(verified->ok);
  INFO(verified->detail);

  // 32 concurrent TUNE_ON_MISS callers of one new key share one tuning job.
  v1::GetConfigRequest shared;
  *shared.mutable_problem() = Rms(1024, 5120);
  shared.set_policy(v1::TUNE_ON_MISS);
  const auto answers = testing::ConcurrentGetConfig(daemon, shared, 32);
  for (const auto& a : answers) {
    REQUIRE(a.ok());
    CHECK(a->source() == v1::TUNED);
    CHECK(a->measurement().time_us() == answers[0]->measurement().time_us());
  }
  auto after = client->GetStatus();
  REQUIRE(after.ok());
  CHECK(after->metrics().at("ktune_tunes_total{result=\"ok\"}") == 2);

  // A heuristic answer queues a background tune; the same call is then TUNED.
  v1::GetConfigRequest quick;
  *quick.mutable_problem() = Rms(777, 2048);
  quick.set_policy(v1::HEURISTIC_ON_MISS);
  auto first = client->GetConfig(quick);
  REQUIRE(first.ok());
  CHECK(first->source() == v1::HEURISTIC);
  CHECK(first->tune_queued());
  absl::StatusOr<v1::GetConfigResponse> later;
  for (int i = 0; i < 600; ++i) {
    later = client->GetConfig(quick);
    if (later.ok() && later->source() == v1::TUNED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(later.ok());
  CHECK(later->source() == v1::TUNED);

  // A restart keeps both entries.
  REQUIRE(daemon.Stop() == 0);
  REQUIRE(daemon.Start());
  auto again = daemon.NewClient()->GetConfig(get);
  REQUIRE(again.ok());
  CHECK(again->source() == v1::TUNED);
  CHECK(again->measurement().time_us() == hit->measurement().time_us());
  auto listed = daemon.NewClient()->ListEntries(v1::ListEntriesRequest());
  REQUIRE(listed.ok());
  CHECK(listed->entries_size() == 3);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
