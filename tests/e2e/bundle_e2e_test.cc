// Bundles end to end: export filters, import policies, dry run and the
// compatibility classes through a real ktuned (a fake-device GPU daemon and a
// compile-only one), ktuned --import-bundle at start, and the offline
// `ktune bundle inspect` / `ktune bundle merge`, all through the real binaries.
#include <catch2/catch.hpp>

#include "cache/bundle.h"
#include "cache/recipe_check.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_space.h"
#include "tuner/run/worker.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;

constexpr char kFake[] = "KTUNE_WORKER_FAKE_DEVICE=1";

// An entry for [m, 4096] RMSNorm forward as a daemon on `device` with the
// current software would store it, measured at `time_us`.
v1::Entry EntryOn(const DeviceInfo& device, int64_t m, double time_us, int64_t tuned_at = 1795000000) {
  NormProblem p;
  p.m = m;
  p.n = 4096;
  v1::Entry e;
  *e.mutable_problem()->mutable_norm() = NormProblemToProto(p);
  *e.mutable_device() = DeviceToProto(device);
  auto source = FindKernelSource(NormTemplateId(p));
  REQUIRE(source.ok());
  *e.mutable_software() = SoftwareToProto({(*source)->hash, NvrtcVersion(), kSchemaVersion});
  const NormConfig config = NormSearchSpace(p, device).front();
  *e.mutable_config()->mutable_norm() = NormConfigToProto(config);
  auto recipe = NormLaunchRecipe(p, config, device);
  REQUIRE(recipe.ok());
  *e.mutable_recipe() = StoredRecipe(RecipeToProto(*recipe, false));
  e.mutable_measurement()->set_time_us(time_us);
  e.mutable_measurement()->set_spread(0.01);
  e.mutable_measurement()->set_repetitions(30);
  e.set_tuned_at_unix(tuned_at);
  e.set_candidates_measured(10);
  e.set_ktune_version("test");
  return e;
}

std::vector<v1::Entry> ListAll(DaemonProcess& daemon) {
  auto r = daemon.NewClient()->ListEntries({});
  REQUIRE(r.ok());
  return {r->entries().begin(), r->entries().end()};
}

void WriteBundle(const std::string& path, const std::vector<v1::Entry>& entries) {
  std::ofstream out(path, std::ios::binary);
  out << EncodeBundle(entries, "test", 1795000000);
}

v1::ImportBundleRequest Request(const std::vector<v1::Entry>& entries, v1::MergePolicy policy, bool dry_run = false) {
  v1::ImportBundleRequest r;
  r.set_bundle(EncodeBundle(entries, "test", 1795000000));
  r.set_policy(policy);
  r.set_dry_run(dry_run);
  return r;
}

std::string Cli(const DaemonProcess& daemon) {
  return std::string(KTUNE_CLI_PATH) + " --server " + daemon.address() + " ";
}

TEST_CASE("a GPU daemon judges each bundled entry against its device and software", "[e2e][bundle]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({}, {kFake}));
  const DeviceInfo here = FakeWorkerDevice();
  DeviceInfo other_driver = here;
  other_driver.driver_version = 12040;
  DeviceInfo other_kind = here;
  other_kind.name = "NVIDIA B200";
  v1::Entry other_software = EntryOn(here, 4096, 30);
  other_software.mutable_software()->set_template_hash(std::string(64, 'c'));
  other_software.mutable_recipe()->set_template_hash(std::string(64, 'c'));

  auto r = daemon.NewClient()->ImportBundle(
      Request({EntryOn(here, 1024, 10), EntryOn(other_driver, 2048, 20), EntryOn(other_kind, 8192, 40), other_software},
              v1::KEEP_FASTER));
  REQUIRE(r.ok());
  REQUIRE(r->decisions_size() == 4);
  CHECK(r->decisions(0).compatibility() == "exact");
  CHECK(r->decisions(0).action() == "added");
  CHECK(r->decisions(1).compatibility() == "compatible");
  CHECK(r->decisions(1).action() == "added");
  CHECK(r->decisions(1).reason().find("driver 12040 in bundle, 13000 here") != std::string::npos);
  CHECK(r->decisions(2).compatibility() == "incompatible");
  CHECK(r->decisions(2).action() == "rejected");
  CHECK(r->decisions(2).reason().find("another GPU kind") != std::string::npos);
  CHECK(r->decisions(3).action() == "rejected");
  CHECK(r->decisions(3).reason().find("another software fingerprint") != std::string::npos);
  CHECK(r->added() == 2);
  CHECK(r->rejected() == 2);

  const std::vector<v1::Entry> stored = ListAll(daemon);
  REQUIRE(stored.size() == 2);
  for (const v1::Entry& e : stored) {
    INFO(e.problem().norm().m());
    CHECK(e.device().SerializeAsString() == DeviceToProto(here).SerializeAsString());
    CHECK(e.needs_revalidation() == (e.problem().norm().m() == 2048));
  }
  // The compatible entry now answers under this daemon's key.
  v1::GetConfigRequest get;
  *get.mutable_problem() = stored[0].problem();
  get.set_policy(v1::CACHED_ONLY);
  CHECK(daemon.NewClient()->GetConfig(get).ok());
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("import policies, dry run and the report through the daemon and the CLI", "[e2e][bundle]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());  // compile-only: entries stored as bundled
  const DeviceInfo target = CompileOnlyTarget();
  REQUIRE(daemon.NewClient()
              ->ImportBundle(Request({EntryOn(target, 1024, 10), EntryOn(target, 2048, 20)}, v1::KEEP_FASTER))
              .ok());
  const std::vector<v1::Entry> before = ListAll(daemon);
  REQUIRE(before.size() == 2);
  const std::vector<v1::Entry> incoming = {EntryOn(target, 1024, 5), EntryOn(target, 2048, 25),
                                           EntryOn(target, 4096, 40)};

  SECTION("a dry run reports what would happen and changes nothing") {
    auto r = daemon.NewClient()->ImportBundle(Request(incoming, v1::KEEP_FASTER, true));
    REQUIRE(r.ok());
    CHECK(r->dry_run());
    CHECK(r->replaced() == 1);
    CHECK(r->kept() == 1);
    CHECK(r->added() == 1);
    CHECK(r->decisions(0).compatibility() == "not_judged");
    CHECK(r->decisions(0).reason().find("compile-only daemon") != std::string::npos);
    const std::vector<v1::Entry> after = ListAll(daemon);
    REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i) CHECK(after[i].SerializeAsString() == before[i].SerializeAsString());
  }
  SECTION("each policy through the CLI") {
    const std::string bundle = dir.path() + "/in.ktb";
    WriteBundle(bundle, incoming);
    struct Case {
      std::string policy;
      double t1024, t2048;
    };
    for (const Case& c :
         {Case{"prefer-existing", 10, 20}, Case{"keep-faster", 5, 20}, Case{"prefer-incoming", 5, 25}}) {
      INFO(c.policy);
      auto out = RunCommand(Cli(daemon) + "import " + bundle + " --policy " + c.policy, dir.path());
      REQUIRE(out.exit_code == 0);
      CHECK(out.out.find("action") != std::string::npos);  // the table
      std::map<int64_t, double> times;
      for (const v1::Entry& e : ListAll(daemon)) times[e.problem().norm().m()] = e.measurement().time_us();
      CHECK(times[1024] == c.t1024);
      CHECK(times[2048] == c.t2048);
      CHECK(times[4096] == 40);
    }
    auto json = RunCommand(Cli(daemon) + "import " + bundle + " --dry-run --json", dir.path());
    REQUIRE(json.exit_code == 0);
    CHECK(json.out.find("\"dry_run\": true") != std::string::npos);
    CHECK(json.out.find("\"unchanged\": 3") != std::string::npos);
    CHECK(json.out.find("\"decisions\"") != std::string::npos);
    auto bad = RunCommand(Cli(daemon) + "import " + bundle + " --policy fastest", dir.path());
    CHECK(bad.exit_code != 0);
  }
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("export filters by op, GPU kind and date", "[e2e][bundle]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  DeviceInfo h100 = CompileOnlyTarget();
  h100.name = "NVIDIA H100 80GB HBM3";
  const int64_t jan_2027 = 1798761600;  // 2027-01-01 UTC
  REQUIRE(daemon.NewClient()
              ->ImportBundle(
                  Request({EntryOn(CompileOnlyTarget(), 1024, 10, jan_2027 - 86400),
                           EntryOn(CompileOnlyTarget(), 2048, 20, jan_2027), EntryOn(h100, 4096, 40, jan_2027 + 86400)},
                          v1::KEEP_FASTER))
              .ok());
  auto count = [&](const std::string& flags) {
    const std::string out = dir.path() + "/out.ktb";
    auto r = RunCommand(Cli(daemon) + "export -o " + out + " " + flags, dir.path());
    REQUIRE(r.exit_code == 0);
    auto inspect = RunCommand(std::string(KTUNE_CLI_PATH) + " bundle inspect " + out + " --json", dir.path());
    REQUIRE(inspect.exit_code == 0);
    int n = 0;
    for (size_t pos = 0; (pos = inspect.out.find("\"tuned_at_unix\"", pos)) != std::string::npos; ++pos) ++n;
    return n;
  };
  CHECK(count("") == 3);
  CHECK(count("--op rmsnorm.fwd") == 3);
  CHECK(count("--op layernorm.fwd") == 0);
  CHECK(count("--gpu 'NVIDIA H100 80GB HBM3'") == 1);
  CHECK(count("--since 2027-01-01") == 2);
  CHECK(count("--since 2027-01-02 --gpu 'NVIDIA H100 80GB HBM3'") == 1);
  auto bad_date = RunCommand(Cli(daemon) + "export -o " + dir.path() + "/x.ktb --since 01/02/2027", dir.path());
  CHECK(bad_date.exit_code == 2);  // a usage error
  CHECK(bad_date.err.find("--since") != std::string::npos);
  auto bad_op = RunCommand(Cli(daemon) + "export -o " + dir.path() + "/x.ktb --op softmax", dir.path());
  CHECK(bad_op.exit_code == 1);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/x.ktb"));
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("bundle inspect and merge work offline, and bad files change nothing", "[e2e][bundle]") {
  TempDir dir;
  const std::string cli = std::string(KTUNE_CLI_PATH) + " --server unix:" + dir.path() + "/none.sock ";
  const DeviceInfo d = CompileOnlyTarget();
  const std::string a = dir.path() + "/a.ktb", b = dir.path() + "/b.ktb", c = dir.path() + "/c.ktb";
  WriteBundle(a, {EntryOn(d, 1024, 10), EntryOn(d, 2048, 20)});
  WriteBundle(b, {EntryOn(d, 2048, 15), EntryOn(d, 4096, 40)});
  WriteBundle(c, {EntryOn(d, 1024, 12)});

  auto inspect = RunCommand(cli + "bundle inspect " + a, dir.path());
  REQUIRE(inspect.exit_code == 0);
  CHECK(inspect.out.find("entries      2") != std::string::npos);
  CHECK(inspect.out.find("created by   test") != std::string::npos);
  CHECK(inspect.out.find("rmsnorm.fwd 1024x4096") != std::string::npos);

  const std::string out = dir.path() + "/merged.ktb";
  auto merge = RunCommand(cli + "bundle merge " + a + " " + b + " " + c + " -o " + out + " --json", dir.path());
  REQUIRE(merge.exit_code == 0);
  CHECK(merge.out.find("\"replaced\": 1") != std::string::npos);
  CHECK(merge.out.find("\"kept\": 1") != std::string::npos);
  auto merged = RunCommand(cli + "bundle inspect " + out + " --json", dir.path());
  REQUIRE(merged.exit_code == 0);
  CHECK(merged.out.find("\"time_us\": 15") != std::string::npos);
  CHECK(merged.out.find("\"time_us\": 10") != std::string::npos);
  CHECK(merged.out.find("\"time_us\": 20") == std::string::npos);

  auto prefer_incoming =
      RunCommand(cli + "bundle merge " + a + " " + c + " -o " + out + " --policy prefer-incoming", dir.path());
  REQUIRE(prefer_incoming.exit_code == 0);
  CHECK(prefer_incoming.out.find("1 replaced") != std::string::npos);

  // A bad input: the decoder's error, naming the file, and no output written.
  const std::string broken = dir.path() + "/broken.ktb";
  {
    std::string bytes = EncodeBundle({EntryOn(d, 1024, 10)}, "test", 1795000000);
    bytes[bytes.size() / 2 + 30] ^= 0x40;
    std::ofstream(broken, std::ios::binary) << bytes;
  }
  auto bad_inspect = RunCommand(cli + "bundle inspect " + broken, dir.path());
  CHECK(bad_inspect.exit_code == 1);
  CHECK(bad_inspect.err.find(broken + ": checksum mismatch") != std::string::npos);
  const std::string never = dir.path() + "/never.ktb";
  auto bad_merge = RunCommand(cli + "bundle merge " + a + " " + broken + " -o " + never, dir.path());
  CHECK(bad_merge.exit_code == 1);
  CHECK(bad_merge.err.find("checksum mismatch") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(never));
  auto one_input = RunCommand(cli + "bundle merge " + a + " -o " + never, dir.path());
  CHECK(one_input.exit_code != 0);
}

TEST_CASE("ktuned --import-bundle merges a bundle before it serves", "[e2e][bundle]") {
  TempDir dir;
  const std::string bundle = dir.path() + "/fleet.ktb";
  WriteBundle(bundle, {EntryOn(CompileOnlyTarget(), 1024, 10), EntryOn(CompileOnlyTarget(), 2048, 20)});
  SECTION("a good bundle is in the store once the daemon answers") {
    DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
    REQUIRE(daemon.Start({"--import-bundle", bundle, "--import-policy", "prefer-incoming"}));
    CHECK(ListAll(daemon).size() == 2);
    CHECK(daemon.Log().find("event=import_bundle ") != std::string::npos);
    CHECK(daemon.Stop() == 0);
  }
  SECTION("a missing bundle (first roll-out) is skipped with a warning") {
    DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
    REQUIRE(daemon.Start({"--import-bundle", dir.path() + "/not-yet.ktb"}));
    CHECK(ListAll(daemon).empty());
    CHECK(daemon.Log().find("event=import_bundle_missing") != std::string::npos);
    CHECK(daemon.Stop() == 0);
  }
  SECTION("a bad bundle stops the start, writing nothing") {
    std::ofstream(dir.path() + "/bad.ktb") << "not a bundle";
    DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
    CHECK_FALSE(daemon.Start({"--import-bundle", dir.path() + "/bad.ktb"}));
    CHECK(daemon.Log().find("event=import_bundle_failed") != std::string::npos);
    CHECK(daemon.Log().find("nothing imported") != std::string::npos);
  }
}

}  // namespace
}  // namespace ktune
