// End-to-end: a real ktuned on a temporary socket and database, driven through
// the client library and the ktune CLI. Runs without a GPU (the daemon is then
// compile-only); nothing here executes a kernel.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cache/bundle.h"
#include "cache/recipe_check.h"
#include "google/protobuf/util/message_differencer.h"
#include "httplib.h"
#include "tests/e2e/daemon_process.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/builtin_ops.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wire.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

v1::Problem RmsNormProblem(int64_t m, int64_t n, v1::DType dtype = v1::BF16) {
  v1::Problem p;
  v1::NormProblem* norm = p.mutable_norm();
  norm->set_op(v1::RMSNORM);
  norm->set_norm_pass(v1::FWD);
  norm->set_m(m);
  norm->set_n(n);
  norm->set_input_dtype(dtype);
  norm->set_has_weight(true);
  return p;
}

// A well-formed tuned entry as another machine would have stored it.
v1::Entry TunedEntry(int64_t m, int64_t n) {
  v1::Entry e;
  *e.mutable_problem() = RmsNormProblem(m, n);
  e.mutable_problem()->mutable_norm()->set_output_dtype(v1::BF16);
  e.mutable_problem()->mutable_norm()->set_eps(1e-6f);
  v1::DeviceFingerprint* d = e.mutable_device();
  d->set_name("NVIDIA H200");
  d->set_cc_major(9);
  d->set_cc_minor(0);
  d->set_sm_count(132);
  d->set_memory_bytes(150754820096ull);
  d->set_driver_version(13000);
  v1::SoftwareFingerprint* s = e.mutable_software();
  s->set_template_hash(std::string(64, 'a'));
  s->set_nvrtc_version(13000);
  s->set_schema_version(1);
  v1::NormConfig* c = e.mutable_config()->mutable_norm();
  c->set_x_block(1);
  c->set_r_block(static_cast<int32_t>(n));
  c->set_num_warps(4);
  c->set_vec(8);
  c->set_pipeline_depth(1);
  c->set_persistent(true);
  v1::LaunchRecipe* r = e.mutable_recipe();
  r->set_template_id("norm/rmsnorm_fwd");
  r->set_template_hash(std::string(64, 'a'));
  r->add_nvrtc_options("--gpu-architecture=sm_90");
  r->set_arch("sm_90");
  v1::KernelLaunch* k = r->add_kernels();
  k->set_name_expression("ktune::rmsnorm_fwd<...>");
  k->set_lowered_name("_Z10rmsnorm_fwd");
  for (uint32_t v : {static_cast<uint32_t>(m), 1u, 1u}) k->add_grid(v);
  for (uint32_t v : {128u, 1u, 1u}) k->add_block(v);
  v1::Measurement* meas = e.mutable_measurement();
  meas->set_time_us(40.5);
  meas->set_spread(0.02);
  meas->set_repetitions(30);
  meas->set_throughput(3.9);
  meas->set_throughput_unit("TB/s");
  e.set_tuned_at_unix(1795000000);
  e.set_candidates_measured(24);
  e.set_ktune_version("0.1.0");
  return e;
}

std::vector<v1::Entry> ListAll(DaemonProcess& daemon) {
  auto r = daemon.NewClient()->ListEntries(v1::ListEntriesRequest());
  REQUIRE(r.ok());
  return {r->entries().begin(), r->entries().end()};
}

bool SameEntries(const std::vector<v1::Entry>& a, const std::vector<v1::Entry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!google::protobuf::util::MessageDifferencer::Equals(a[i], b[i])) return false;
  }
  return true;
}

std::string Cli(const DaemonProcess& daemon) {
  return std::string(KTUNE_CLI_PATH) + " --server " + daemon.address() + " ";
}

TEST_CASE("ktuned serves status, heuristic answers and refuses what it cannot do", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/db/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();

  auto status = client->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->version() == KTUNE_VERSION);
  CHECK(status->entries() == 0);
  CHECK(status->nvrtc_version() >= 12000);
  if (status->compile_only()) {
    CHECK_FALSE(status->compile_only_reason().empty());
    CHECK(status->devices_size() == 0);
    CHECK(daemon.Log().find("compile_only") != std::string::npos);
  } else {
    CHECK(status->devices_size() == 1);
  }

  SECTION("the socket is private to the user and group") {
    struct stat st {};
    REQUIRE(stat(daemon.socket_path().c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0660);
  }

  SECTION("a miss gets a compiled heuristic recipe") {
    v1::GetConfigRequest request;
    *request.mutable_problem() = RmsNormProblem(4096, 4096);
    request.set_policy(v1::HEURISTIC_ON_MISS);
    request.set_include_cubin(true);
    auto r = client->GetConfig(request);
    REQUIRE(r.ok());
    CHECK(r->source() == v1::HEURISTIC);
    REQUIRE(r->config().has_norm());
    CHECK(r->config().norm().num_warps() >= 1);
    CHECK(r->recipe().template_id() == "norm/rmsnorm_fwd");
    CHECK(r->recipe().template_hash().size() == 64);
    REQUIRE(r->recipe().kernels_size() == 1);
    CHECK_FALSE(r->recipe().kernels(0).lowered_name().empty());
    CHECK(r->recipe().kernels(0).block(0) >= 32);
    CHECK(r->recipe().kernels(0).grid(0) >= 1);
    REQUIRE(r->recipe().cubin().size() > 4);
    CHECK(r->recipe().cubin().substr(0, 4) ==
          "\x7f"
          "ELF");
    // A heuristic answer stores nothing.
    CHECK(ListAll(daemon).empty());
  }

  SECTION("CACHED_ONLY misses with NOT_FOUND") {
    v1::GetConfigRequest request;
    *request.mutable_problem() = RmsNormProblem(4096, 4096);
    request.set_policy(v1::CACHED_ONLY);
    auto r = client->GetConfig(request);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kNotFound);
  }

  SECTION("a compile-only daemon refuses to tune, clearly") {
    if (!status->compile_only()) return;
    v1::GetConfigRequest request;
    *request.mutable_problem() = RmsNormProblem(4096, 4096);
    request.set_policy(v1::TUNE_ON_MISS);
    auto r = client->GetConfig(request);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(r.status().message().find("compile-only") != std::string::npos);
    v1::TuneRequest tune;
    *tune.mutable_problem() = RmsNormProblem(4096, 4096);
    auto t = client->Tune(tune, nullptr);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == absl::StatusCode::kFailedPrecondition);
  }

  SECTION("GEMM on a compile-only daemon: the model's tile compiled, no tuning, validated all the same") {
    v1::GetConfigRequest request;
    v1::GemmProblem* g = request.mutable_problem()->mutable_gemm();
    g->set_m(128);
    g->set_n(128);
    g->set_k(128);
    g->set_a_dtype(v1::BF16);
    g->set_b_dtype(v1::BF16);
    request.set_include_cubin(true);
    auto r = client->GetConfig(request);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->source() == v1::HEURISTIC);
    // B's layout unset is [K, N]: the wgmma model's best unsplit config,
    // reading B N-major.
    CHECK(r->config().gemm().has_wgmma());
    CHECK(r->recipe().template_id() == "gemm/gemm_wgmma");
    REQUIRE(r->recipe().kernels_size() == 1);
    CHECK_FALSE(r->recipe().kernels(0).lowered_name().empty());
    CHECK_FALSE(r->recipe().cubin().empty());
    request.set_policy(v1::CACHED_ONLY);
    CHECK(client->GetConfig(request).status().code() == absl::StatusCode::kNotFound);
    request.set_policy(v1::TUNE_ON_MISS);
    CHECK(client->GetConfig(request).status().code() == absl::StatusCode::kFailedPrecondition);
    // fp8 ([N, K]): the wgmma model's best unsplit config, e4m3 operands.
    request.set_policy(v1::HEURISTIC_ON_MISS);
    g->set_a_dtype(v1::FP8_E4M3);
    g->set_b_dtype(v1::FP8_E4M3);
    g->set_b_layout(v1::COL_MAJOR);
    auto fp8 = client->GetConfig(request);
    INFO(fp8.status().ToString());
    REQUIRE(fp8.ok());
    CHECK(fp8->source() == v1::HEURISTIC);
    REQUIRE(fp8->config().gemm().has_wgmma());
    CHECK(fp8->config().gemm().wgmma().split_k() == 1);
    REQUIRE(fp8->recipe().kernels_size() == 1);
    CHECK(fp8->recipe().kernels(0).name_expression().find("ktune::gemm_wgmma<ktune::e4m3,") == 0);
    // At M <= 16 both types are answered by the skinny template (its fp8 form
    // ran on the H200: bench/results/2026-11-30-norms-gemm-158b556.md).
    g->set_m(8);
    auto decode = client->GetConfig(request);
    REQUIRE(decode.ok());
    CHECK(decode->config().gemm().has_skinny());
    CHECK(decode->recipe().kernels(0).name_expression().find("ktune::gemm_skinny<ktune::e4m3,") == 0);
    g->set_a_dtype(v1::BF16);
    g->set_b_dtype(v1::BF16);
    auto decode_bf16 = client->GetConfig(request);
    REQUIRE(decode_bf16.ok());
    CHECK(decode_bf16->config().gemm().has_skinny());
    g->set_a_dtype(v1::FP8_E4M3);
    g->set_b_dtype(v1::FP8_E4M3);
    g->set_m(128);
    // K of 8192 is more than one fp8 accumulator spans: only split or
    // promoted configs (or cuBLASLt), measured before anything is answered.
    g->set_k(8192);
    auto long_k = client->GetConfig(request);
    CHECK(long_k.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(long_k.status().message().find("K over 4096") != std::string::npos);
    g->set_k(0);
    auto bad = client->GetConfig(request);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(bad.status().message().find("problem.gemm.k") != std::string::npos);
  }

  CHECK(daemon.Stop() == 0);
}

TEST_CASE("invalid problems get INVALID_ARGUMENT and store nothing", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();

  struct Case {
    const char* name;
    v1::Problem problem;
    const char* field;
  };
  v1::Problem unknown_dtype = RmsNormProblem(128, 128);
  unknown_dtype.mutable_norm()->set_input_dtype(static_cast<v1::DType>(99));
  v1::Problem no_op = RmsNormProblem(128, 128);
  no_op.mutable_norm()->set_op(v1::NORM_OP_UNSPECIFIED);
  v1::Problem bad_eps = RmsNormProblem(128, 128);
  bad_eps.mutable_norm()->set_eps(-1);
  const std::vector<Case> cases = {
      {"M=0", RmsNormProblem(0, 4096), "problem.m"},
      {"N=-1", RmsNormProblem(4096, -1), "problem.n"},
      {"N above the limit", RmsNormProblem(16, kMaxNormN + 1), "problem.n"},
      {"unknown dtype", unknown_dtype, "problem.input_dtype"},
      {"no op", no_op, "problem.op"},
      {"negative eps", bad_eps, "problem.eps"},
      {"empty problem", v1::Problem(), "problem"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    for (v1::Policy policy : {v1::CACHED_ONLY, v1::HEURISTIC_ON_MISS, v1::TUNE_ON_MISS}) {
      v1::GetConfigRequest request;
      *request.mutable_problem() = c.problem;
      request.set_policy(policy);
      auto r = client->GetConfig(request);
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(r.status().message().find(c.field) != std::string::npos);
    }
    v1::TuneRequest tune;
    *tune.mutable_problem() = c.problem;
    auto t = client->Tune(tune, nullptr);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(ListAll(daemon).empty());
  auto status = client->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->entries() == 0);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("bundles move entries between daemons, and bad bundles change nothing", "[e2e]") {
  TempDir dir;
  DaemonProcess a(dir.path() + "/a", dir.path() + "/a/cache.db");
  DaemonProcess b(dir.path() + "/b", dir.path() + "/b/cache.db");
  std::filesystem::create_directories(dir.path() + "/a");
  std::filesystem::create_directories(dir.path() + "/b");
  REQUIRE(a.Start());
  REQUIRE(b.Start());

  const std::vector<v1::Entry> seed = {TunedEntry(4096, 4096), TunedEntry(32768, 1024), TunedEntry(16384, 8192)};
  auto imported = a.NewClient()->ImportBundle(EncodeBundle(seed, "test", 1795000000));
  REQUIRE(imported.ok());
  CHECK(imported->added() == 3);
  const std::vector<v1::Entry> in_a = ListAll(a);
  REQUIRE(in_a.size() == 3);

  auto exported = a.NewClient()->ExportBundle();
  REQUIRE(exported.ok());
  CHECK(exported->entries() == 3);
  auto into_b = b.NewClient()->ImportBundle(exported->bundle());
  REQUIRE(into_b.ok());
  CHECK(into_b->added() == 3);
  CHECK(SameEntries(ListAll(b), in_a));

  SECTION("importing the same bundle again changes nothing") {
    auto again = b.NewClient()->ImportBundle(exported->bundle());
    REQUIRE(again.ok());
    CHECK(again->added() == 0);
    CHECK(again->unchanged() == 3);
    CHECK(SameEntries(ListAll(b), in_a));
  }

  SECTION("truncated and corrupted bundles are refused and the store is unchanged") {
    const std::string good = EncodeBundle({TunedEntry(8192, 16384)}, "test", 1795000000);
    std::vector<std::pair<std::string, std::string>> bad = {
        {"empty", ""},
        {"truncated header", good.substr(0, 20)},
        {"truncated payload", good.substr(0, good.size() - 7)},
        {"trailing bytes", good + "x"},
        {"foreign file", std::string("PK\x03\x04 this is a zip file, not a bundle at all......"
                                     "..................................")},
    };
    std::string flipped = good;
    flipped[flipped.size() / 2 + 30] ^= 0x40;
    bad.push_back({"corrupted payload", flipped});
    std::string version = good;
    version[8] = 9;
    bad.push_back({"unknown format version", version});
    for (const auto& [name, bytes] : bad) {
      INFO(name);
      auto r = b.NewClient()->ImportBundle(bytes);
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(r.status().message().find("nothing imported") != std::string::npos);
      CHECK(SameEntries(ListAll(b), in_a));
    }
  }

  SECTION("a restart keeps every entry") {
    REQUIRE(b.Stop() == 0);
    REQUIRE(b.Start());
    CHECK(SameEntries(ListAll(b), in_a));
    auto status = b.NewClient()->GetStatus();
    REQUIRE(status.ok());
    CHECK(status->entries() == 3);
    CHECK(status->entries_by_op().at("rmsnorm.fwd") == 3);
  }

  CHECK(a.Stop() == 0);
  CHECK(b.Stop() == 0);
}

TEST_CASE("the ktune CLI drives a daemon and fails with one-line reasons", "[e2e][cli]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  const std::string cli = Cli(daemon);

  auto status = RunCommand(cli + "status --json", dir.path());
  REQUIRE(status.exit_code == 0);
  CHECK(status.out.find("\"compile_only\"") != std::string::npos);
  CHECK(status.out.find("\"version\": \"" KTUNE_VERSION "\"") != std::string::npos);

  auto get = RunCommand(cli + "get rmsnorm.fwd --m 4096 --n 5120 --dtype fp16 --policy heuristic --json", dir.path());
  REQUIRE(get.exit_code == 0);
  CHECK(get.out.find("\"source\": \"HEURISTIC\"") != std::string::npos);
  CHECK(get.out.find("\"config\"") != std::string::npos);
  CHECK(get.out.find("\"lowered_name\"") != std::string::npos);

  auto human = RunCommand(cli + "get rmsnorm.fwd --m 4096 --n 4096", dir.path());
  REQUIRE(human.exit_code == 0);
  CHECK(human.out.find("HEURISTIC") != std::string::npos);

  auto cached = RunCommand(cli + "get rmsnorm.fwd --m 4096 --n 4096 --policy cached", dir.path());
  CHECK(cached.exit_code != 0);
  CHECK(cached.err.find("NOT_FOUND") != std::string::npos);

  auto bad_m = RunCommand(cli + "get rmsnorm.fwd --m 0 --n 4096", dir.path());
  CHECK(bad_m.exit_code != 0);
  CHECK(bad_m.err.find("problem.m") != std::string::npos);
  CHECK(std::count(bad_m.err.begin(), bad_m.err.end(), '\n') == 1);

  auto bad_dtype = RunCommand(cli + "get rmsnorm.fwd --m 16 --n 16 --dtype int7", dir.path());
  CHECK(bad_dtype.exit_code != 0);
  CHECK(bad_dtype.err.find("int7") != std::string::npos);
  CHECK(std::count(bad_dtype.err.begin(), bad_dtype.err.end(), '\n') == 1);

  // GEMM from the CLI: for B as [N, K] on an sm_90 target the wgmma
  // template's best config (B as [N, K] or [K, N]), for M <= 16 the skinny
  // template's; flags checked.
  auto gemm = RunCommand(cli + "get gemm --m 128 --n 4096 --k 4096 --b-layout nk", dir.path());
  INFO(gemm.err);
  REQUIRE(gemm.exit_code == 0);
  CHECK(gemm.out.find("HEURISTIC") != std::string::npos);
  CHECK(gemm.out.find("wgmma") != std::string::npos);
  CHECK(gemm.out.find("gemm/gemm_wgmma") != std::string::npos);
  auto gemm_kn = RunCommand(cli + "get gemm --m 128 --n 4096 --k 4096 --b-layout kn", dir.path());
  INFO(gemm_kn.err);
  REQUIRE(gemm_kn.exit_code == 0);
  CHECK(gemm_kn.out.find("gemm/gemm_wgmma") != std::string::npos);
  // The kernel's last three template arguments, B_KN, SWAP_AB and
  // TAIL_SPLIT: B_KN true ("Lb1E"), SWAP_AB false, no tail split ("Li1E"),
  // then the ends of the template arguments and of the name, then void.
  CHECK(gemm_kn.out.find("Lb1ELb0ELi1EEEv") != std::string::npos);
  CHECK(gemm.out.find("Lb0ELb0ELi1EEEv") != std::string::npos);
  // fp8: D is bf16 unless asked otherwise; B must be [N, K] (the default), and
  // the refusal of [K, N] says so.
  auto fp8 = RunCommand(cli + "get gemm --m 128 --n 4096 --k 4096 --dtype fp8e4m3", dir.path());
  INFO(fp8.err);
  REQUIRE(fp8.exit_code == 0);
  CHECK(fp8.out.find("gemm/gemm_wgmma") != std::string::npos);
  auto fp8_kn = RunCommand(cli + "get gemm --m 128 --n 4096 --k 4096 --dtype fp8e4m3 --b-layout kn", dir.path());
  CHECK(fp8_kn.exit_code != 0);
  CHECK(fp8_kn.err.find("problem.gemm.b_layout") != std::string::npos);
  CHECK(fp8_kn.err.find("[N, K]") != std::string::npos);
  auto decode = RunCommand(cli + "get gemm --m 4 --n 4096 --k 4096 --b-layout nk", dir.path());
  INFO(decode.err);
  REQUIRE(decode.exit_code == 0);
  CHECK(decode.out.find("skinny") != std::string::npos);
  auto bad_layout = RunCommand(cli + "get gemm --m 16 --n 16 --k 16 --b-layout mn", dir.path());
  CHECK(bad_layout.exit_code != 0);
  CHECK(bad_layout.err.find("b-layout") != std::string::npos);
  auto layout_on_norm = RunCommand(cli + "get rmsnorm.fwd --m 16 --n 16 --b-layout nk", dir.path());
  CHECK(layout_on_norm.exit_code != 0);
  CHECK(layout_on_norm.err.find("only gemm") != std::string::npos);

  auto bad_op = RunCommand(cli + "get softmax --m 16 --n 16", dir.path());
  CHECK(bad_op.exit_code != 0);
  CHECK(bad_op.err.find("softmax") != std::string::npos);

  auto bad_flag = RunCommand(cli + "ls --frobnicate", dir.path());
  CHECK(bad_flag.exit_code != 0);
  CHECK(std::count(bad_flag.err.begin(), bad_flag.err.end(), '\n') == 1);

  auto no_daemon = RunCommand(
      std::string(KTUNE_CLI_PATH) + " --server unix:" + dir.path() + "/nobody.sock --timeout 2 status", dir.path());
  CHECK(no_daemon.exit_code != 0);
  CHECK(no_daemon.err.find("cannot reach ktuned") != std::string::npos);

  // Bundles through the CLI: import, list, export, re-import elsewhere.
  const std::string seed_path = dir.path() + "/seed.ktb";
  {
    std::ofstream out(seed_path, std::ios::binary);
    out << EncodeBundle({TunedEntry(4096, 4096), TunedEntry(65536, 2048)}, "test", 1795000000);
  }
  auto imported = RunCommand(cli + "import " + seed_path + " --json", dir.path());
  REQUIRE(imported.exit_code == 0);
  CHECK(imported.out.find("\"added\": 2") != std::string::npos);

  auto ls = RunCommand(cli + "ls --json", dir.path());
  REQUIRE(ls.exit_code == 0);
  CHECK(ls.out.find("\"entries\"") != std::string::npos);
  CHECK(ls.out.find("\"m\": \"65536\"") != std::string::npos);  // int64 is a JSON string
  auto ls_text = RunCommand(cli + "ls", dir.path());
  REQUIRE(ls_text.exit_code == 0);
  CHECK(ls_text.out.find("2 entries") != std::string::npos);
  auto ls_bad = RunCommand(cli + "ls --op rmsnorm.sideways", dir.path());
  CHECK(ls_bad.exit_code != 0);

  const std::string out_path = dir.path() + "/out.ktb";
  auto exported = RunCommand(cli + "export -o " + out_path, dir.path());
  REQUIRE(exported.exit_code == 0);
  CHECK(std::filesystem::file_size(out_path) > kBundleHeaderBytes);

  const std::string broken_path = dir.path() + "/broken.ktb";
  {
    std::ofstream out(broken_path, std::ios::binary);
    out << "not a bundle";
  }
  auto broken = RunCommand(cli + "import " + broken_path, dir.path());
  CHECK(broken.exit_code != 0);
  CHECK(broken.err.find("nothing imported") != std::string::npos);
  auto ls_after = RunCommand(cli + "ls", dir.path());
  CHECK(ls_after.out.find("2 entries") != std::string::npos);

  CHECK(daemon.Stop() == 0);
}

TEST_CASE("ktune get asks for the norm variants, and refuses them where they do not apply", "[e2e][cli]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());  // at debug level: each GetConfig's problem key is logged
  const std::string cli = Cli(daemon);

  auto variant = RunCommand(
      cli + "get rmsnorm.fwd --m 64 --n 4096 --residual --weight-offset --policy heuristic --brief", dir.path());
  INFO(variant.err);
  REQUIRE(variant.exit_code == 0);
  CHECK(variant.out.rfind("rmsnorm.fwd 64x4096 bf16 +residual 1+w ", 0) == 0);
  CHECK(variant.out.find(" HEURISTIC ") != std::string::npos);
  auto fp8 = RunCommand(
      cli + "get rmsnorm.fwd --m 64 --n 4096 --out-dtype fp8e4m3 --scale 0.5 --policy heuristic --brief", dir.path());
  INFO(fp8.err);
  REQUIRE(fp8.exit_code == 0);
  CHECK(fp8.out.rfind("rmsnorm.fwd 64x4096 bf16 out:fp8e4m3 ", 0) == 0);
  CHECK(fp8.out.find(" HEURISTIC ") != std::string::npos);

  // Usage errors (2), each naming the flag or the problem field it set, and
  // found before any call.
  struct Case {
    std::string args;
    std::string message;  // in stderr
  };
  const std::vector<Case> usage = {
      {"get gemm --m 64 --n 4096 --k 4096 --residual", "--residual"},
      {"get gemm --m 64 --n 4096 --k 4096 --weight-offset", "--weight-offset"},
      {"get gemm --m 64 --n 4096 --k 4096 --dtype fp8e4m3 --scale 0.5", "--scale"},
      {"get layernorm.fwd --m 64 --n 4096 --residual", "problem.residual: the fused residual add is RMSNorm's only"},
      {"get layernorm.bwd --m 64 --n 4096 --residual", "problem.residual"},
      {"get rmsnorm.fwd --m 64 --n 4096 --scale 0.5", "problem.out_scale: a scale is for fp8e4m3 output only"},
      {"get rmsnorm.fwd --m 64 --n 4096 --out-dtype fp8e4m3 --scale -1", "problem.out_scale: must be finite"},
      {"get rmsnorm.bwd --m 64 --n 4096 --out-dtype fp8e4m3", "problem.output_dtype"},
      {"get rmsnorm.fwd --m 64 --n 4096 --no-weight --weight-offset", "problem.weight_offset"},
      {"tune gemm --m 64 --n 4096 --k 4096 --residual", "--residual"},
      {"tune layernorm.fwd --m 64 --n 4096 --residual", "problem.residual"},
  };
  for (const Case& c : usage) {
    INFO(c.args);
    const auto r = RunCommand(cli + c.args, dir.path());
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }

  CHECK(daemon.Stop() == 0);
  // The daemon was asked for the variants themselves: the problem keys it
  // logged carry them (the scale is not part of a key), and no refused
  // command reached it.
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(daemon.Log(), '\n')) {
    if (absl::StrContains(line, "event=request op=GetConfig")) lines.emplace_back(line);
  }
  NormProblem residual;
  residual.m = 64;
  residual.n = 4096;
  residual.residual = true;
  residual.weight_offset = true;
  NormProblem fp8_out;
  fp8_out.m = 64;
  fp8_out.n = 4096;
  fp8_out.output_dtype = DType::kFP8E4M3;
  REQUIRE(lines.size() == 2);
  CHECK(absl::StrContains(lines[0], "problem=\"" + CanonicalKey(residual) + "\""));
  CHECK(absl::StrContains(lines[0], " res=1 woff=1\""));
  CHECK(absl::StrContains(lines[0], "source=HEURISTIC"));
  CHECK(absl::StrContains(lines[1], "problem=\"" + CanonicalKey(fp8_out) + "\""));
  CHECK(absl::StrContains(lines[1], " out=fp8e4m3 "));
  CHECK(absl::StrContains(lines[1], "source=HEURISTIC"));
}

TEST_CASE("a second ktuned on a live socket refuses to start", "[e2e]") {
  TempDir dir;
  DaemonProcess first(dir.path(), dir.path() + "/one.db");
  REQUIRE(first.Start());
  auto second = RunCommand(
      "timeout 20 " + std::string(KTUNED_PATH) + " --listen " + first.address() + " --db " + dir.path() + "/two.db",
      dir.path());
  CHECK(second.exit_code == 1);
  CHECK(second.err.find("already serving") != std::string::npos);
  CHECK(first.NewClient()->GetStatus().ok());
  CHECK(first.Stop() == 0);
}

TEST_CASE("ktuned rejects bad flags with a clear message", "[e2e]") {
  TempDir dir;
  const std::string ktuned = std::string(KTUNED_PATH);
  auto tcp = RunCommand(ktuned + " --listen 0.0.0.0:7070 --db " + dir.path() + "/x.db", dir.path());
  CHECK(tcp.exit_code != 0);
  CHECK(tcp.err.find("needs TLS") != std::string::npos);
  auto relative = RunCommand(ktuned + " --listen unix:relative.sock --db " + dir.path() + "/x.db", dir.path());
  CHECK(relative.exit_code != 0);
  CHECK(relative.err.find("absolute path") != std::string::npos);
  auto level = RunCommand(ktuned + " --log-level loud", dir.path());
  CHECK(level.exit_code != 0);
  CHECK(level.err.find("loud") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/x.db"));
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

// The measurement and provenance of a test entry for M rows (10 us + M ns).
void SetMeasured(v1::Entry* e, int64_t m) {
  e->mutable_measurement()->set_time_us(10 + m / 1000.0);
  e->mutable_measurement()->set_spread(0.01);
  e->mutable_measurement()->set_repetitions(30);
  e->set_tuned_at_unix(1795000000);
  e->set_candidates_measured(10);
  e->set_ktune_version("test");
}

// An entry as this (compile-only) daemon would key it: its target device and
// the current template hash, NVRTC version and schema.
v1::Entry LocalEntry(int64_t m, int64_t n, const NormConfig& config) {
  NormProblem p;
  p.m = m;
  p.n = n;
  v1::Entry e;
  *e.mutable_problem()->mutable_norm() = NormProblemToProto(p);
  *e.mutable_device() = DeviceToProto(CompileOnlyTarget());
  auto source = FindKernelSource(NormTemplateId(p));
  REQUIRE(source.ok());
  *e.mutable_software() = SoftwareToProto({(*source)->hash, NvrtcVersion(), kSchemaVersion});
  *e.mutable_config()->mutable_norm() = NormConfigToProto(config);
  auto recipe = NormLaunchRecipe(p, config, CompileOnlyTarget());
  REQUIRE(recipe.ok());
  *e.mutable_recipe() = StoredRecipe(RecipeToProto(*recipe, false));
  SetMeasured(&e, m);
  return e;
}

TEST_CASE("hits, nearest-shape answers and metrics on a compile-only daemon", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  const int metrics_port = 20000 + getpid() % 20000;
  REQUIRE(daemon.Start({"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port)}));
  auto client = daemon.NewClient();

  NormProblem shape;
  shape.m = 1024;
  shape.n = 4096;
  const std::vector<NormConfig> space = NormSearchSpace(shape, CompileOnlyTarget());
  REQUIRE(space.size() >= 2);
  const NormConfig small_config = space.front(), large_config = space.back();
  REQUIRE(client
              ->ImportBundle(EncodeBundle({LocalEntry(1024, 4096, small_config), LocalEntry(65536, 4096, large_config)},
                                          "test", 1795000000))
              .ok());

  auto ask = [&](int64_t m, v1::Policy policy, bool nearest) {
    v1::GetConfigRequest request;
    *request.mutable_problem() = RmsNormProblem(m, 4096);
    request.set_policy(policy);
    request.set_nearest_on_miss(nearest);
    return client->GetConfig(request);
  };

  SECTION("an exact key is a TUNED hit, with its stored measurement") {
    auto hit = ask(1024, v1::CACHED_ONLY, false);
    REQUIRE(hit.ok());
    CHECK(hit->source() == v1::TUNED);
    CHECK(hit->measurement().time_us() == Approx(10 + 1.024));
    CHECK(hit->config().norm().SerializeAsString() == NormConfigToProto(small_config).SerializeAsString());
    // Stored without its interface, served with the template's own.
    auto recipe = NormLaunchRecipe(shape, small_config, CompileOnlyTarget());
    REQUIRE(recipe.ok());
    CHECK(CompareRecipe("", hit->recipe(), *recipe).ok());
    CHECK_FALSE(hit->recipe().tensors().empty());
    REQUIRE(hit->recipe().kernels_size() >= 1);
    CHECK(hit->recipe().kernels(0).args_size() == hit->recipe().kernels(0).params_size());
  }

  SECTION("a miss gets the nearest M's config, adapted to its own M") {
    auto near_small = ask(2000, v1::HEURISTIC_ON_MISS, true);
    REQUIRE(near_small.ok());
    CHECK(near_small->source() == v1::NEAREST);
    CHECK(near_small->tuned_for().norm().m() == 1024);
    CHECK(near_small->config().norm().SerializeAsString() == NormConfigToProto(small_config).SerializeAsString());
    REQUIRE(near_small->recipe().kernels_size() >= 1);
    CHECK_FALSE(near_small->recipe().kernels(0).lowered_name().empty());

    auto near_large = ask(40000, v1::HEURISTIC_ON_MISS, true);
    REQUIRE(near_large.ok());
    CHECK(near_large->source() == v1::NEAREST);
    CHECK(near_large->tuned_for().norm().m() == 65536);

    // Other N: no family, so the heuristic answers. Without the flag, too.
    v1::GetConfigRequest other;
    *other.mutable_problem() = RmsNormProblem(2000, 2048);
    other.set_nearest_on_miss(true);
    auto heuristic = client->GetConfig(other);
    REQUIRE(heuristic.ok());
    CHECK(heuristic->source() == v1::HEURISTIC);
    CHECK(ask(2000, v1::HEURISTIC_ON_MISS, false)->source() == v1::HEURISTIC);
    CHECK_FALSE(heuristic->tune_queued());  // compile-only: nothing to tune on
  }

  SECTION("metrics count the answers, in GetStatus and on the Prometheus endpoint") {
    REQUIRE(ask(1024, v1::CACHED_ONLY, false).ok());
    REQUIRE(ask(3000, v1::HEURISTIC_ON_MISS, true).ok());
    REQUIRE_FALSE(ask(3000, v1::CACHED_ONLY, false).ok());
    auto status = client->GetStatus();
    REQUIRE(status.ok());
    const auto& m = status->metrics();
    CHECK(m.at("ktune_getconfig_total{answer=\"hit\"}") == 1);
    CHECK(m.at("ktune_getconfig_total{answer=\"nearest\"}") == 1);
    CHECK(m.at("ktune_getconfig_total{answer=\"not_found\"}") == 1);
    CHECK(m.at("ktune_entries{op=\"rmsnorm.fwd\"}") == 2);
    CHECK(m.at("ktune_tune_queue_depth") == 0);

    httplib::Client http("127.0.0.1", metrics_port);
    auto scrape = http.Get("/metrics");
    REQUIRE(scrape);
    CHECK(scrape->status == 200);
    CHECK(scrape->body.find("# TYPE ktune_getconfig_total counter") != std::string::npos);
    CHECK(scrape->body.find("ktune_getconfig_total{answer=\"hit\"} 1") != std::string::npos);
    CHECK(scrape->body.find("ktune_entries{op=\"rmsnorm.fwd\"} 2") != std::string::npos);
    CHECK(http.Get("/other")->status == 404);

    auto cli = RunCommand(Cli(daemon) + "status", dir.path());
    REQUIRE(cli.exit_code == 0);
    CHECK(cli.out.find("0 running, 0 queued") != std::string::npos);
    CHECK(cli.out.find("ktune_getconfig_total{answer=\"nearest\"}") != std::string::npos);
  }
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_CASE("entries of an older software fingerprint are kept, listed as stale, never served", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();
  NormProblem shape;
  shape.m = 2048;
  shape.n = 4096;
  const NormConfig config = NormSearchSpace(shape, CompileOnlyTarget()).front();
  v1::Entry current = LocalEntry(2048, 4096, config);
  v1::Entry stale = LocalEntry(8192, 4096, config);
  stale.mutable_software()->set_template_hash(std::string(64, 'b'));  // an older template
  stale.mutable_recipe()->set_template_hash(std::string(64, 'b'));
  REQUIRE(client->ImportBundle(EncodeBundle({current, stale}, "test", 1795000000)).ok());

  auto status = client->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->entries() == 2);
  CHECK(status->stale_entries() == 1);
  v1::ListEntriesRequest only_stale;
  only_stale.set_stale_only(true);
  auto listed = client->ListEntries(only_stale);
  REQUIRE(listed.ok());
  REQUIRE(listed->entries_size() == 1);
  CHECK(listed->entries(0).problem().norm().m() == 8192);

  v1::GetConfigRequest request;
  *request.mutable_problem() = RmsNormProblem(8192, 4096);
  request.set_policy(v1::CACHED_ONLY);
  CHECK(client->GetConfig(request).status().code() == absl::StatusCode::kNotFound);
  *request.mutable_problem() = RmsNormProblem(2048, 4096);
  CHECK(client->GetConfig(request).ok());

  auto cli = RunCommand(Cli(daemon) + "status", dir.path());
  CHECK(cli.out.find("stale        1") != std::string::npos);
  auto ls = RunCommand(Cli(daemon) + "ls --stale", dir.path());
  CHECK(ls.out.find("1 entries") != std::string::npos);
  CHECK(daemon.Stop() == 0);
}

// A GEMM entry keyed as the daemon keys GEMMs (`answer` is one of its own
// answers: its device and GEMM software fingerprint), with `config` (an own
// template's or cuBLASLt's) and the recipe that goes with it.
v1::Entry LocalGemmEntry(const v1::GetConfigResponse& answer, const v1::GemmProblem& p, const v1::GemmConfig& config) {
  v1::Entry e;
  *e.mutable_problem()->mutable_gemm() = p;
  *e.mutable_device() = answer.device();
  *e.mutable_software() = answer.software();
  *e.mutable_config()->mutable_gemm() = config;
  absl::StatusOr<LaunchRecipe> recipe = BuiltinOps().TemplateRecipe(e.problem(), e.config(), CompileOnlyTarget());
  REQUIRE(recipe.ok());
  *e.mutable_recipe() = StoredRecipe(RecipeToProto(*recipe, false));
  SetMeasured(&e, p.m());
  return e;
}

TEST_CASE("a GEMM miss gets the nearest M's own-template config, written for its own M", "[e2e][gemm]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}));
  auto client = daemon.NewClient();
  auto ask = [&](int64_t m, bool nearest) {
    v1::GetConfigRequest request;
    *request.mutable_problem()->mutable_gemm() = LinearGemm(m, 512, 512);
    request.set_policy(v1::HEURISTIC_ON_MISS);
    request.set_nearest_on_miss(nearest);
    return client->GetConfig(request);
  };
  auto untuned = ask(64, false);
  REQUIRE(untuned.ok());
  REQUIRE(untuned->source() == v1::HEURISTIC);
  // Tuned at M = 64: mma.sync split two ways (a config no heuristic answer
  // gives); at M = 4096: a cuBLASLt algorithm.
  v1::GemmConfig mma;
  GemmTileConfig tile;
  tile.block_m = 64;
  tile.block_n = 64;
  tile.split_k = 2;
  *mma.mutable_mma_sync() = GemmTileConfigToProto(tile);
  v1::GemmConfig lt;
  lt.mutable_cublaslt()->set_algo(std::string(64, 'z'));
  lt.mutable_cublaslt()->set_version(130100);
  lt.mutable_cublaslt()->set_workspace_bytes(1 << 20);
  auto imported = client->ImportBundle(EncodeBundle({LocalGemmEntry(*untuned, LinearGemm(64, 512, 512), mma),
                                                     LocalGemmEntry(*untuned, LinearGemm(4096, 512, 512), lt)},
                                                    "test", 1795000000));
  INFO(imported.status().ToString());
  REQUIRE(imported.ok());

  // M = 100 is nearer 64 than 4096: the mma.sync config, its recipe for M = 100.
  auto near = ask(100, true);
  REQUIRE(near.ok());
  CHECK(near->source() == v1::NEAREST);
  CHECK(near->tuned_for().gemm().m() == 64);
  REQUIRE(near->config().gemm().has_mma_sync());
  CHECK(near->config().gemm().mma_sync().split_k() == 2);
  REQUIRE(near->recipe().kernels_size() == 1);
  CHECK_FALSE(near->recipe().kernels(0).lowered_name().empty());
  // ceil(100 / 64) x ceil(512 / 64) tiles, two splits, and their workspace.
  CHECK(near->recipe().kernels(0).grid(0) == 2 * 8);
  CHECK(near->recipe().kernels(0).grid(1) == 2);
  CHECK(near->recipe().workspace_bytes() == uint64_t{16} * 2 * 64 * 64 * 4 + 16 * 4);
  // M = 3000 is nearer the cuBLASLt entry: an algorithm tuned for another M
  // is not handed out (the caller would have to check it), so the heuristic.
  auto far = ask(3000, true);
  REQUIRE(far.ok());
  CHECK(far->source() == v1::HEURISTIC);
  // Without the flag, the heuristic too.
  CHECK(ask(100, false)->source() == v1::HEURISTIC);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
