// End-to-end: a store too large to answer in one message. Listing pages,
// exports stream, entries are bounded and can be deleted, and status counts
// without reading entries. Stores are filled directly (Store::PutAll) before
// the daemon starts: thousands of entries in well under a second.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/escaping.h"
#include "cache/bundle.h"
#include "cache/recipe_check.h"
#include "cache/store.h"
#include "tests/cache/test_entries.h"
#include "tests/e2e/daemon_process.h"
#include "tuner/builtin_ops.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::RunCommand;
using testing::TempDir;
using testutil::MakeTestEntry;

// `count` distinct valid entries (RMSNorm forward, M = 1..count, two widths).
std::vector<v1::Entry> SyntheticEntries(int count) {
  std::vector<v1::Entry> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) out.push_back(MakeTestEntry(i / 2 + 1, i % 2 == 0 ? 4096 : 2048));
  return out;
}

void Fill(const std::string& db_path, const std::vector<v1::Entry>& entries) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(BuiltinOps(), db_path);
  REQUIRE(store.ok());
  absl::StatusOr<PutAllStats> stats = (*store)->PutAll(entries);
  INFO(stats.status().ToString());
  REQUIRE(stats.ok());
  REQUIRE(stats->added == static_cast<int>(entries.size()));
}

std::string KeyText(const v1::Entry& e) {
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), e);
  REQUIRE(key.ok());
  return FlatKey(*key);
}

std::string Cli(const DaemonProcess& daemon) {
  return std::string(KTUNE_CLI_PATH) + " --server " + daemon.address() + " ";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("ListEntries pages: every entry exactly once in a stable order, bad tokens refused", "[e2e][scale]") {
  TempDir dir;
  const std::vector<v1::Entry> entries = SyntheticEntries(2500);
  Fill(dir.path() + "/cache.db", entries);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();

  std::vector<std::string> expected;
  for (const v1::Entry& e : entries) expected.push_back(KeyText(e));
  std::sort(expected.begin(), expected.end());

  auto page_through = [&](int page_size) {
    std::vector<std::string> got;
    v1::ListEntriesRequest request;
    request.set_page_size(page_size);
    int pages = 0;
    while (true) {
      auto r = client->ListEntries(request);
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      REQUIRE(++pages <= 100);
      for (const v1::Entry& e : r->entries()) got.push_back(KeyText(e));
      if (r->next_page_token().empty()) break;
      request.set_page_token(r->next_page_token());
    }
    return std::make_pair(got, pages);
  };
  auto [by_300, pages_300] = page_through(300);
  CHECK(by_300 == expected);  // sorted, so each exactly once and in key order
  CHECK(pages_300 == 9);
  auto [by_default, pages_default] = page_through(0);  // the server's page size (1000)
  CHECK(by_default == expected);
  CHECK(pages_default == 3);

  // A token is opaque and checked: garbage, a forged key, another filter's.
  v1::ListEntriesRequest bad;
  for (const std::string& token :
       {std::string("not base64 !!"), absl::WebSafeBase64Escape("ktp1\x1e|all\x1eonly-one-part"),
        absl::WebSafeBase64Escape("junk"), std::string(5000, 'A')}) {
    bad.set_page_token(token);
    auto r = client->ListEntries(bad);
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(r.status().message().find("page_token") != std::string::npos);
  }
  v1::ListEntriesRequest first;
  first.set_page_size(10);
  auto page = client->ListEntries(first);
  REQUIRE(page.ok());
  REQUIRE_FALSE(page->next_page_token().empty());
  bad.set_page_token(page->next_page_token());
  bad.set_op("layernorm.fwd");
  CHECK(client->ListEntries(bad).status().code() == absl::StatusCode::kInvalidArgument);
  v1::ListEntriesRequest negative;
  negative.set_page_size(-1);
  CHECK(client->ListEntries(negative).status().code() == absl::StatusCode::kInvalidArgument);

  // The CLI: --limit cuts and says how to go on; without it, everything.
  auto ls = RunCommand(Cli(daemon) + "ls --limit 100", dir.path());
  CHECK(ls.exit_code == 0);
  CHECK(ls.out.find("\n100 entries\n") != std::string::npos);
  CHECK(ls.out.find("--page-token") != std::string::npos);
  auto all = RunCommand(Cli(daemon) + "ls", dir.path());
  CHECK(all.exit_code == 0);
  CHECK(all.out.find("\n2500 entries\n") != std::string::npos);
  CHECK(daemon.Stop() == 0);
}

TEST_CASE("a streamed export of 20000 entries round-trips through import", "[e2e][scale]") {
  TempDir dir;
  const std::vector<v1::Entry> entries = SyntheticEntries(20000);
  Fill(dir.path() + "/a.db", entries);
  DaemonProcess a(dir.path(), dir.path() + "/a.db");
  REQUIRE(a.Start());

  const std::string file = dir.path() + "/all.ktb";
  auto exported = RunCommand(Cli(a) + "export -o " + file, dir.path());
  INFO(exported.err);
  REQUIRE(exported.exit_code == 0);
  CHECK(exported.out.find("exported 20000 entries") != std::string::npos);
  const std::string bytes = Slurp(file);
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(BuiltinOps(), bytes);  // the checksum holds, every entry valid
  INFO(bundle.status().ToString());
  REQUIRE(bundle.ok());
  REQUIRE(bundle->entries_size() == 20000);
  // The unary export writes the same entries (small enough for one message).
  auto unary = a.NewClient()->ExportBundle();
  REQUIRE(unary.ok());
  absl::StatusOr<v1::Bundle> unary_bundle = DecodeBundle(BuiltinOps(), unary->bundle());
  REQUIRE(unary_bundle.ok());
  CHECK(unary_bundle->entries_size() == 20000);
  CHECK(a.Stop() == 0);

  DaemonProcess b(dir.path() + "/b", dir.path() + "/b.db");
  std::filesystem::create_directories(dir.path() + "/b");
  REQUIRE(b.Start());
  auto imported = RunCommand(Cli(b) + "import " + file, dir.path());
  INFO(imported.err);
  REQUIRE(imported.exit_code == 0);
  auto status = b.NewClient()->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->entries() == 20000);
  std::set<std::string> want, got;
  for (const v1::Entry& e : entries) want.insert(KeyText(e));
  for (const v1::Entry& e : bundle->entries()) got.insert(KeyText(e));
  CHECK(got == want);
  CHECK(b.Stop() == 0);
}

TEST_CASE("the unary export is bounded and points to the stream", "[e2e][scale]") {
  TempDir dir;
  // Entries of about 14 KB (long parameter lists): 6000 make a bundle past 64 MiB.
  std::vector<v1::Entry> entries = SyntheticEntries(6000);
  for (v1::Entry& e : entries) {
    v1::KernelLaunch* k = e.mutable_recipe()->mutable_kernels(0);
    k->clear_params();
    for (int i = 0; i < 60; ++i) k->add_params(absl::StrCat("param_", i, "_", std::string(220, 'p')));
  }
  Fill(dir.path() + "/cache.db", entries);
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto unary = daemon.NewClient()->ExportBundle();
  CHECK(unary.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(unary.status().message().find("ExportBundleStream") != std::string::npos);
  auto streamed = RunCommand(Cli(daemon) + "export -o " + dir.path() + "/big.ktb", dir.path());
  CHECK(streamed.exit_code == 0);
  CHECK(streamed.out.find("exported 6000 entries") != std::string::npos);
  CHECK(std::filesystem::file_size(dir.path() + "/big.ktb") > (uint64_t{64} << 20));
  CHECK(daemon.Stop() == 0);
}

// An entry's serialization with an unknown field (number 1000) of `bytes` bytes.
v1::Entry WithUnknownField(const v1::Entry& e, size_t bytes) {
  std::string wire = e.SerializeAsString();
  wire.append("\xc2\x3e");  // field 1000, length-delimited
  for (uint64_t n = bytes;; n >>= 7) {
    wire.push_back(static_cast<char>(n < 0x80 ? n : (n & 0x7f) | 0x80));
    if (n < 0x80) break;
  }
  wire.append(bytes, 'u');
  v1::Entry out;
  REQUIRE(out.ParseFromString(wire));
  return out;
}

TEST_CASE("imports drop unknown fields and refuse an entry over the size cap", "[e2e][scale]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  auto client = daemon.NewClient();
  const v1::Entry clean = MakeTestEntry(512, 4096);

  auto imported = client->ImportBundle(EncodeBundle({WithUnknownField(clean, 1 << 20)}, "test", 1795000000));
  INFO(imported.status().ToString());
  REQUIRE(imported.ok());
  CHECK(imported->added() == 1);
  auto listed = client->ListEntries(v1::ListEntriesRequest());
  REQUIRE(listed.ok());
  REQUIRE(listed->entries_size() == 1);
  CHECK(listed->entries(0).ByteSizeLong() == clean.ByteSizeLong());
  auto exported = client->ExportBundle();
  REQUIRE(exported.ok());
  CHECK(exported->bundle().size() < 4096);

  // Known fields past the cap: 16 kernels of 60 long parameters each.
  v1::Entry huge = MakeTestEntry(1024, 4096);
  v1::KernelLaunch kernel = huge.recipe().kernels(0);
  kernel.clear_params();
  for (int i = 0; i < 60; ++i) kernel.add_params(absl::StrCat("param_", i, "_", std::string(200, 'p')));
  huge.mutable_recipe()->clear_kernels();
  for (int i = 0; i < 16; ++i) *huge.mutable_recipe()->add_kernels() = kernel;
  auto refused = client->ImportBundle(EncodeBundle({MakeTestEntry(2048, 4096), huge}, "test", 1795000000));
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("entry 1: size:") != std::string::npos);
  CHECK(refused.status().message().find("65536-byte cap") != std::string::npos);
  CHECK(client->GetStatus()->entries() == 1);  // nothing of the refused bundle
  CHECK(daemon.Stop() == 0);
}

constexpr char kAdminToken[] = "admin-token-0123456789abcdef";

// An entry as this compile-only daemon keys it: built from its own heuristic
// answer for the problem.
v1::Entry LocalEntry(Client& client, int64_t m) {
  v1::GetConfigRequest request;
  v1::NormProblem* p = request.mutable_problem()->mutable_norm();
  p->set_op(v1::RMSNORM);
  p->set_norm_pass(v1::FWD);
  p->set_m(m);
  p->set_n(4096);
  p->set_input_dtype(v1::BF16);
  p->set_has_weight(true);
  auto answer = client.GetConfig(request);
  REQUIRE(answer.ok());
  v1::Entry e = MakeTestEntry(m, 4096);
  *e.mutable_device() = answer->device();
  *e.mutable_software() = answer->software();
  *e.mutable_config() = answer->config();
  // The recipe as the template writes it for this problem (not the answer's:
  // heuristic answers' geometry is another item of issue 29).
  absl::StatusOr<NormProblem> problem = NormProblemFromProto(e.problem().norm());
  REQUIRE(problem.ok());
  absl::StatusOr<NormConfig> config = NormConfigFromProto(answer->config().norm());
  REQUIRE(config.ok());
  absl::StatusOr<LaunchRecipe> recipe = NormLaunchRecipe(*problem, *config, CompileOnlyTarget());
  REQUIRE(recipe.ok());
  *e.mutable_recipe() = StoredRecipe(RecipeToProto(*recipe, /*include_cubin=*/false));
  return e;
}

TEST_CASE("rm and prune --stale delete entries, need the admin token, and status counts follow", "[e2e][scale]") {
  TempDir dir;
  const std::string admin = dir.path() + "/admin";
  std::ofstream(admin) << kAdminToken << "\n";
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start({"--admin-token-file", admin}));
  setenv("KTUNE_TOKEN", kAdminToken, 1);
  auto as_admin = daemon.NewClient();
  unsetenv("KTUNE_TOKEN");
  auto as_user = daemon.NewClient();

  std::vector<v1::Entry> entries = {LocalEntry(*as_user, 256), LocalEntry(*as_user, 512)};
  for (int64_t m : {1024, 2048, 4096}) {
    v1::Entry stale = LocalEntry(*as_user, m);
    stale.mutable_software()->set_template_hash(std::string(64, 'b'));  // an older template
    stale.mutable_recipe()->set_template_hash(std::string(64, 'b'));
    entries.push_back(stale);
  }
  entries.push_back(MakeTestEntry(256, 4096));  // another GPU's: never stale here
  auto imported = as_admin->ImportBundle(EncodeBundle(entries, "test", 1795000000));
  INFO(imported.status().ToString());
  REQUIRE(imported.ok());
  auto status = as_user->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->entries() == 6);
  CHECK(status->stale_entries() == 3);

  // Without the admin token nothing is deleted.
  v1::DeleteEntriesRequest prune;
  prune.set_stale(true);
  CHECK(as_user->DeleteEntries(prune).status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(RunCommand(Cli(daemon) + "prune --stale", dir.path()).exit_code != 0);
  CHECK(as_user->GetStatus()->entries() == 6);

  // A dry run reports and keeps.
  const std::string admin_cli = Cli(daemon) + "--token-file " + admin + " ";
  auto dry = RunCommand(admin_cli + "prune --stale --dry-run", dir.path());
  CHECK(dry.exit_code == 0);
  CHECK(dry.out.find("would delete 3 entries") != std::string::npos);
  CHECK(as_user->GetStatus()->stale_entries() == 3);

  auto pruned = RunCommand(admin_cli + "prune --stale", dir.path());
  INFO(pruned.err);
  CHECK(pruned.exit_code == 0);
  CHECK(pruned.out.find("deleted 3 entries") != std::string::npos);
  status = as_user->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->entries() == 3);
  CHECK(status->stale_entries() == 0);

  // rm: every stored entry of the problem (this GPU's and the other's), and a
  // hit stops being one at once (the memory cache forgets it too).
  v1::GetConfigRequest cached;
  *cached.mutable_problem() = entries[0].problem();
  cached.set_policy(v1::CACHED_ONLY);
  REQUIRE(as_user->GetConfig(cached).ok());
  CHECK(RunCommand(Cli(daemon) + "rm rmsnorm.fwd --m 256 --n 4096", dir.path()).exit_code != 0);
  auto rm = RunCommand(admin_cli + "rm rmsnorm.fwd --m 256 --n 4096", dir.path());
  INFO(rm.err);
  CHECK(rm.exit_code == 0);
  CHECK(rm.out.find("deleted 2 entries") != std::string::npos);
  CHECK(as_user->GetConfig(cached).status().code() == absl::StatusCode::kNotFound);
  status = as_user->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->entries() == 1);
  CHECK(status->entries_by_op().at("rmsnorm.fwd") == 1);

  // A bad request is refused whole.
  v1::DeleteEntriesRequest nothing;
  CHECK(as_admin->DeleteEntries(nothing).status().code() == absl::StatusCode::kInvalidArgument);
  v1::DeleteEntriesRequest bad_problem;
  bad_problem.add_problems()->mutable_norm()->set_m(-1);
  CHECK(as_admin->DeleteEntries(bad_problem).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
