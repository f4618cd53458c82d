// Every answer is a function of (problem, store, device) alone: asked in any
// order, on any fresh daemon, a problem gets the same bytes, and the recipe in
// them is the one this build's template writes for the problem and the config
// answered. Compile-only daemons (no GPU needed): heuristic, nearest and
// stored (TUNED) answers.
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/bundle.h"
#include "cache/recipe_check.h"
#include "tests/cache/current_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::TempDir;
using testutil::CurrentEntry;
using testutil::GemmProblemOf;
using testutil::NormProblemOf;

constexpr NormOp kRms = NormOp::kRMSNorm, kLayer = NormOp::kLayerNorm;
constexpr NormPass kFwd = NormPass::kForward, kBwd = NormPass::kBackward;

// Problems two of which often share one kernel (same N, dtypes, flags; only M
// or N differs): each norm op and pass, several dtypes, and GEMMs for each
// template the heuristic picks (skinny, wgmma).
std::vector<v1::Problem> Problems() {
  return {
      NormProblemOf(kRms, kFwd, 4096, 4096),
      NormProblemOf(kRms, kFwd, 4000, 4096),
      NormProblemOf(kRms, kFwd, 4096, 4096, DType::kFP16),
      NormProblemOf(kRms, kFwd, 3000, 4096, DType::kFP16),
      NormProblemOf(kRms, kBwd, 4096, 4096),
      NormProblemOf(kRms, kBwd, 4200, 4096),
      NormProblemOf(kLayer, kFwd, 8192, 2048, DType::kFP32),
      NormProblemOf(kLayer, kFwd, 8000, 2048, DType::kFP32),
      NormProblemOf(kLayer, kBwd, 5000, 2048, DType::kBF16, /*bias=*/true),
      NormProblemOf(kLayer, kBwd, 5100, 2048, DType::kBF16, /*bias=*/true),
      GemmProblemOf(LinearGemm(1, 4096, 4096)),
      GemmProblemOf(LinearGemm(1, 14336, 4096)),
      GemmProblemOf(LinearGemm(2048, 4096, 4096)),
      GemmProblemOf(LinearGemm(2000, 4096, 4096)),
      // Nearest answers: the entries below are of M = 64 and M = 1024.
      GemmProblemOf(LinearGemm(100, 512, 512)),
      GemmProblemOf(LinearGemm(90, 512, 512)),
      NormProblemOf(kRms, kFwd, 1500, 8192),
      NormProblemOf(kRms, kFwd, 1600, 8192),
      // Hits.
      GemmProblemOf(LinearGemm(64, 512, 512)),
      NormProblemOf(kRms, kFwd, 1024, 8192),
  };
}

// Stored entries for the nearest and hit answers: an mma.sync GEMM tile (a
// config no heuristic answer gives) and a norm config.
std::string Bundle() {
  const v1::Problem gemm = GemmProblemOf(LinearGemm(64, 512, 512));
  v1::Config mma;
  v1::MmaSyncTile* t = mma.mutable_gemm()->mutable_mma_sync();
  t->set_block_m(64);
  t->set_block_n(64);
  t->set_block_k(32);
  t->set_warps_m(2);
  t->set_warps_n(2);
  t->set_stages(3);
  t->set_group_m(8);
  t->set_split_k(2);
  const v1::Problem norm = NormProblemOf(kRms, kFwd, 1024, 8192);
  return EncodeBundle({CurrentEntry(gemm, mma), CurrentEntry(norm, testutil::HeuristicConfig(norm))}, "test",
                      1795000000);
}

// Every daemon here finds the code compiled by the ones before on disk: code
// is all that may be shared (it is keyed by what determines it), and each
// daemon's memory starts empty. Compiling once keeps these tests short.
void ShareCompiledCode(const TempDir& dir) {
  static const TempDir kernels;  // removed at exit
  std::filesystem::create_symlink(kernels.path(), dir.path() + "/kernels");
}

absl::StatusOr<v1::GetConfigResponse> Ask(Client& client, const v1::Problem& problem) {
  v1::GetConfigRequest request;
  *request.mutable_problem() = problem;
  request.set_policy(v1::HEURISTIC_ON_MISS);
  request.set_nearest_on_miss(true);
  return client.GetConfig(request);
}

// The serialized answer of each problem (in Problems() order), asked in
// `order`, on a fresh daemon.
std::vector<std::string> AnswersInOrder(DaemonProcess& daemon, const std::vector<size_t>& order,
                                        std::vector<v1::GetConfigResponse>* answers = nullptr) {
  const std::vector<v1::Problem> problems = Problems();
  auto client = daemon.NewClient();
  REQUIRE(client->ImportBundle(Bundle()).ok());
  std::vector<std::string> out(problems.size());
  if (answers != nullptr) answers->resize(problems.size());
  for (size_t i : order) {
    absl::StatusOr<v1::GetConfigResponse> r = Ask(*client, problems[i]);
    INFO(problems[i].ShortDebugString() << ": " << r.status().ToString());
    REQUIRE(r.ok());
    out[i] = r->SerializeAsString();
    if (answers != nullptr) (*answers)[i] = *r;
  }
  return out;
}

TEST_CASE("answers do not depend on what was asked before", "[e2e][answers]") {
  TempDir first_dir, second_dir;
  DaemonProcess first(first_dir.path(), first_dir.path() + "/cache.db");
  DaemonProcess second(second_dir.path(), second_dir.path() + "/cache.db");
  ShareCompiledCode(first_dir);
  ShareCompiledCode(second_dir);
  REQUIRE(first.Start());
  REQUIRE(second.Start());

  std::vector<size_t> forward(Problems().size());
  for (size_t i = 0; i < forward.size(); ++i) forward[i] = i;
  std::vector<size_t> backward(forward.rbegin(), forward.rend());
  std::vector<v1::GetConfigResponse> answers;
  const std::vector<std::string> a = AnswersInOrder(first, forward, &answers);
  const std::vector<std::string> b = AnswersInOrder(second, backward);
  const std::vector<v1::Problem> problems = Problems();
  for (size_t i = 0; i < problems.size(); ++i) {
    INFO(problems[i].ShortDebugString() << "\n" << answers[i].recipe().ShortDebugString());
    CHECK(a[i] == b[i]);
  }
  // Each path answered: heuristic, nearest and stored.
  CHECK(answers[0].source() == v1::HEURISTIC);
  CHECK(answers[14].source() == v1::NEAREST);
  CHECK(answers[16].source() == v1::NEAREST);
  CHECK(answers[18].source() == v1::TUNED);
  CHECK(answers[19].source() == v1::TUNED);
  CHECK(first.Stop() == 0);
  CHECK(second.Stop() == 0);
}

TEST_CASE("two problems sharing one kernel each get their own grid and workspace", "[e2e][answers]") {
  TempDir dir;
  ShareCompiledCode(dir);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  const std::vector<v1::Problem> problems = Problems();
  std::vector<size_t> order(problems.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<v1::GetConfigResponse> answers;
  AnswersInOrder(daemon, order, &answers);

  // Every answer's recipe is the one the template writes for its own problem
  // and the config answered (lowered names aside: they come from compiling).
  for (size_t i = 0; i < problems.size(); ++i) {
    INFO(problems[i].ShortDebugString());
    v1::LaunchRecipe recipe = answers[i].recipe();
    for (v1::KernelLaunch& k : *recipe.mutable_kernels()) {
      // Compiled for the answer, except a stored one's without its cubin.
      CHECK(k.lowered_name().empty() == (answers[i].source() == v1::TUNED));
      k.clear_lowered_name();
    }
    const absl::Status s = VerifyRecipe(BuiltinOps(), problems[i], answers[i].config(), recipe, CompileOnlyTarget());
    INFO(s.ToString());
    CHECK(s.ok());
  }
  // Each pair (problems 2i, 2i + 1) shares its kernels, asked one after the
  // other: the case a memo of whole recipes got wrong.
  for (size_t i = 0; i + 2 < problems.size(); i += 2) {  // the last two are hits of two ops
    INFO(problems[i].ShortDebugString() << " and " << problems[i + 1].ShortDebugString());
    const v1::LaunchRecipe& x = answers[i].recipe();
    const v1::LaunchRecipe& y = answers[i + 1].recipe();
    REQUIRE(x.kernels_size() == y.kernels_size());
    for (int k = 0; k < x.kernels_size(); ++k) CHECK(x.kernels(k).name_expression() == y.kernels(k).name_expression());
  }
  // The figures of the issue: the skinny kernel of N = 4096 needs 896 CTAs at
  // N = 14336; layernorm.bwd at M = 5100 needs 160 split CTAs and three more
  // rows of fp32 dw and db partials (2048 wide) than at M = 5000.
  CHECK(answers[10].recipe().kernels(0).grid(0) == 256);
  CHECK(answers[11].recipe().kernels(0).grid(0) == 896);
  CHECK(answers[8].recipe().kernels(0).grid(0) == 157);
  CHECK(answers[9].recipe().kernels(0).grid(0) == 160);
  CHECK(answers[9].recipe().workspace_bytes() - answers[8].recipe().workspace_bytes() == 3 * 2 * 2048 * 4);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

double Metric(const v1::GetStatusResponse& status, const std::string& name) {
  auto it = status.metrics().find(name);
  return it == status.metrics().end() ? 0 : it->second;
}

TEST_CASE("GetConfig metrics count what was answered, and an unknown policy is refused before the lookup",
          "[e2e][answers][metrics]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();
  REQUIRE(client->ImportBundle(Bundle()).ok());

  // A compile-only daemon refuses TUNE_ON_MISS: a refusal, not a tuned answer.
  v1::GetConfigRequest tune;
  *tune.mutable_problem() = NormProblemOf(kRms, kFwd, 4096, 4096);
  tune.set_policy(v1::TUNE_ON_MISS);
  CHECK(client->GetConfig(tune).status().code() == absl::StatusCode::kFailedPrecondition);

  // An unknown policy, for a key that is stored.
  v1::GetConfigRequest bad;
  *bad.mutable_problem() = NormProblemOf(kRms, kFwd, 1024, 8192);
  bad.set_policy(static_cast<v1::Policy>(77));
  const absl::Status refused = client->GetConfig(bad).status();
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("policy") != std::string::npos);
  bad.set_policy(v1::CACHED_ONLY);
  REQUIRE(client->GetConfig(bad).ok());  // the key is stored

  auto status = client->GetStatus();
  REQUIRE(status.ok());
  CHECK(Metric(*status, "ktune_getconfig_total{answer=\"tuned\"}") == 0);
  CHECK(Metric(*status, "ktune_getconfig_total{answer=\"refused\"}") == 1);
  CHECK(Metric(*status, "ktune_getconfig_total{answer=\"error\"}") == 1);
  CHECK(Metric(*status, "ktune_getconfig_total{answer=\"hit\"}") == 1);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
