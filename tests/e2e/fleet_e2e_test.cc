// ktuned with a fleet store (--fleet-store), end to end: real ktuned
// processes sharing a real PostgreSQL server (tests/cache/pg_server.h). An
// import into one daemon is served by another as a cache hit; a row the
// import check refuses is never stored or served; the store down changes no
// answer and loses no publish; a key locked by another daemon is answered
// heuristically and picked up once published; bad fleet flags are refused.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "cache/bundle.h"
#include "cache/fleet_store.h"
#include "tests/cache/current_entries.h"
#include "tests/cache/pg_server.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/tls_certs.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/norm/norm_space.h"
#include "tuner/run/worker.h"

namespace ktune {
namespace {

using testing::CommandResult;
using testing::DaemonProcess;
using testing::PgServer;
using testing::RunCommand;
using testing::TempDir;

template <typename F>
bool Eventually(F what, std::chrono::milliseconds within = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (what()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return what();
}

// The fleet flags of a daemon on `server`. A miss waits up to `lookup_ms` for
// the store: tests that are not about that deadline give it one a loaded CI
// machine keeps (the default, 50 ms, was missed there once).
std::vector<std::string> FleetFlags(const PgServer& server, int lookup_ms = 2000) {
  return {"--fleet-store",        server.url(),        "--fleet-store-password-file",
          server.password_file(), "--fleet-lookup-ms", std::to_string(lookup_ms)};
}

// An RMSNorm forward entry of m rows as a compile-only daemon serves it.
v1::Entry CompileOnlyEntry(int64_t m, double time_us = 12.5) {
  const v1::Problem p = testutil::NormProblemOf(NormOp::kRMSNorm, NormPass::kForward, m, 4096);
  v1::Entry e = testutil::CurrentEntry(p, testutil::HeuristicConfig(p));
  e.mutable_measurement()->set_time_us(time_us);
  return e;
}

v1::GetConfigRequest CachedOnly(const v1::Problem& problem) {
  v1::GetConfigRequest r;
  *r.mutable_problem() = problem;
  r.set_policy(v1::CACHED_ONLY);
  return r;
}

v1::FleetStoreStatus FleetStatusOf(const DaemonProcess& d) {
  absl::StatusOr<v1::GetStatusResponse> s = d.NewClient()->GetStatus();
  REQUIRE(s.ok());
  return s->fleet_store();
}

bool Lists(const DaemonProcess& d, const v1::Entry& e) {
  auto r = d.NewClient()->ListEntries({});
  if (!r.ok()) return false;
  for (const v1::Entry& listed : r->entries()) {
    if (listed.problem().SerializeAsString() == e.problem().SerializeAsString()) return true;
  }
  return false;
}

// A store of the test's own on `server`, as another daemon would open it.
std::unique_ptr<FleetStore> OpenStore(const PgServer& server, const std::string& publisher = "test/1") {
  FleetStoreOptions o;
  o.url = server.url();
  o.password_file = server.password_file();
  o.publisher = publisher;
  absl::StatusOr<std::unique_ptr<FleetStore>> store = FleetStore::Open(o);
  REQUIRE(store.ok());
  return *std::move(store);
}

// The fleet store's row of `entry`'s key (which must be there).
v1::Entry FleetRow(const PgServer& server, const v1::Entry& entry) {
  std::unique_ptr<FleetStore> reader = OpenStore(server);
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), entry);
  REQUIRE(key.ok());
  absl::StatusOr<std::optional<v1::Entry>> row;
  REQUIRE(Eventually([&] { return (row = reader->Lookup(*key, absl::Milliseconds(500))).ok(); }));
  REQUIRE(row->has_value());
  return **row;
}

void Import(const DaemonProcess& d, const std::vector<v1::Entry>& entries) {
  auto r = d.NewClient()->ImportBundle(EncodeBundle(entries, "test", 1795000000));
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->rejected() == 0);
}

TEST_CASE("fleet: ktuned refuses fleet flags it cannot use, naming the flag, before touching the database",
          "[e2e][fleet]") {
  TempDir dir;
  const std::string base = testing::KtunedPath() + " --listen unix:" + dir.path() + "/s.sock --db " + dir.path() +
                           "/cache.db --kernel-cache-dir " + dir.path() + "/kernels ";
  struct Case {
    std::string flags;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"--fleet-store postgresql://ktune:hunter2@127.0.0.1:5432/ktune", "--fleet-store-password-file"},
      {"--fleet-store postgresql://ktune@127.0.0.1:5432/ktune --fleet-store-password-file " + dir.path() + "/none",
       dir.path() + "/none"},
      {"--fleet-store-password-file " + dir.path() + "/none", "needs --fleet-store"},
      {"--fleet-store mysql://127.0.0.1/ktune", "postgresql://"},
  };
  for (const Case& c : cases) {
    CommandResult r = RunCommand(base + c.flags, dir.path());
    INFO(c.flags << "\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
    CHECK_THAT(r.err, !Catch::Contains("hunter2"));
    CHECK_FALSE(std::filesystem::exists(dir.path() + "/cache.db"));
  }
}

TEST_CASE("fleet: TLS options pass through the URL to libpq (sslmode=verify-full)", "[e2e][fleet]") {
  TempDir certs;
  const testing::TestCa ca = testing::MakeTestCa(certs.path(), "fleet-ca");
  const testing::TestCa other_ca = testing::MakeTestCa(certs.path(), "other-ca");
  testing::MakeServerCert(certs.path(), ca, certs.path() + "/server.pem", certs.path() + "/server.key");
  PgServer server;
  const int port = testing::FreeTcpPort();
  server.ListenTcp(port, certs.path() + "/server.pem", certs.path() + "/server.key");
  REQUIRE(server.Start().ok());
  auto open = [&](const std::string& root) {
    FleetStoreOptions o;
    o.url = absl::StrCat("postgresql://", PgServer::kUser, "@localhost:", port,
                         "/postgres?sslmode=verify-full&sslrootcert=", root);
    o.password_file = server.password_file();
    o.retry_max = absl::Milliseconds(200);
    absl::StatusOr<std::unique_ptr<FleetStore>> store = FleetStore::Open(o);
    REQUIRE(store.ok());
    return *std::move(store);
  };
  // The server's CA: connected, over TLS, with SCRAM.
  std::unique_ptr<FleetStore> trusted = open(ca.cert);
  const v1::Entry entry = CompileOnlyEntry(512);
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), entry);
  REQUIRE(key.ok());
  REQUIRE(Eventually([&] { return trusted->Lookup(*key, absl::Milliseconds(500)).ok(); }));
  // Its sessions (the listener's and the lookups') are TLS ones, and none is not.
  CHECK(server.Psql("DO $$ BEGIN IF (SELECT count(*) FILTER (WHERE ssl) < 2 OR count(*) FILTER (WHERE NOT ssl) > 0 "
                    "FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE application_name = 'ktuned') "
                    "THEN RAISE EXCEPTION 'not TLS'; END IF; END $$;") == 0);
  // Another CA: refused by libpq, and said so.
  std::unique_ptr<FleetStore> untrusted = open(other_ca.cert);
  REQUIRE(Eventually([&] { return absl::StrContains(untrusted->status().last_error, "certificate"); }));
  CHECK(absl::IsUnavailable(untrusted->Lookup(*key, absl::Milliseconds(50)).status()));
}

TEST_CASE("fleet: two daemons share one store, and an import into one is served by the other as a cache hit",
          "[e2e][fleet]") {
  PgServer server;
  REQUIRE(server.Start().ok());
  TempDir dir_a, dir_b;
  DaemonProcess a(dir_a.path(), dir_a.path() + "/cache.db");
  REQUIRE(a.Start(FleetFlags(server)));
  const v1::Entry first = CompileOnlyEntry(4096);
  Import(a, {first});
  REQUIRE(Eventually([&] { return FleetStatusOf(a).published() >= 1; }));

  // B starts after the publish: its miss finds the entry in the fleet store.
  DaemonProcess b(dir_b.path(), dir_b.path() + "/cache.db");
  REQUIRE(b.Start(FleetFlags(server)));
  REQUIRE(Eventually([&] { return FleetStatusOf(b).reachable(); }));
  auto answer = b.NewClient()->GetConfig(CachedOnly(first.problem()));
  INFO(answer.status().ToString() << "\n" << b.Log());
  REQUIRE(answer.ok());
  CHECK(answer->source() == v1::TUNED);
  CHECK(answer->measurement().time_us() == 12.5);
  CHECK(Lists(b, first));  // stored in B's SQLite
  auto status = b.NewClient()->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->metrics().at("ktune_fleet_lookups_total{result=\"hit\"}") == 1);
  CHECK(status->metrics().at("ktune_fleet_store_reachable") == 1);
  // A key the fleet does not have is asked for once, not on every miss.
  const v1::Entry absent = CompileOnlyEntry(777);
  for (int i = 0; i < 3; ++i) CHECK(absl::IsNotFound(b.NewClient()->GetConfig(CachedOnly(absent.problem())).status()));
  status = b.NewClient()->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->metrics().at("ktune_fleet_lookups_total{result=\"miss\"}") == 1);

  // With both running, a later import into A reaches B through NOTIFY, with
  // no request to B.
  const v1::Entry second = CompileOnlyEntry(8192, 20);
  Import(a, {second});
  CHECK(Eventually([&] { return Lists(b, second); }));

  // `ktune status` and `ktune fleet status` say so.
  const std::string cli = std::string(KTUNE_CLI_PATH) + " --server " + b.address();
  CommandResult st = RunCommand(cli + " status", dir_b.path());
  CHECK(st.exit_code == 0);
  CHECK_THAT(st.out, Catch::Contains("fleet store  reachable, 0 publishes queued"));
  CommandResult fleet = RunCommand(cli + " fleet status", dir_b.path());
  INFO(fleet.out << fleet.err);
  CHECK(fleet.exit_code == 0);
  CHECK_THAT(fleet.out, Catch::Contains(first.device().name()));
  CHECK_THAT(fleet.out, Catch::Contains("/ktuned-"));

  SECTION("a fleet row the import check refuses is neither stored nor served") {
    // Published straight into the store, as a buggy or hostile writer would:
    // an entry whose recipe is not the one the template writes.
    v1::Entry tampered = CompileOnlyEntry(2048);
    tampered.mutable_recipe()->mutable_kernels(0)->set_block(0, tampered.recipe().kernels(0).block(0) * 2);
    std::unique_ptr<FleetStore> writer = OpenStore(server, "rogue/1");
    absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), CompileOnlyEntry(2048));
    REQUIRE(key.ok());
    writer->Publish(*key, tampered);
    REQUIRE(writer->WaitForPublished(absl::Seconds(10)));

    auto refused = b.NewClient()->GetConfig(CachedOnly(tampered.problem()));
    CHECK(absl::IsNotFound(refused.status()));
    CHECK_FALSE(Lists(b, tampered));
    CHECK_THAT(b.Log(), Catch::Contains("event=fleet_entry_refused"));
    auto after = b.NewClient()->GetStatus();
    REQUIRE(after.ok());
    CHECK(after->metrics().at("ktune_fleet_lookups_total{result=\"refused\"}") >= 1);
  }
}

TEST_CASE("fleet: two daemons importing one key at once both end with the faster entry", "[e2e][fleet]") {
  PgServer server;
  REQUIRE(server.Start().ok());
  TempDir dir_a, dir_b;
  DaemonProcess a(dir_a.path(), dir_a.path() + "/cache.db"), b(dir_b.path(), dir_b.path() + "/cache.db");
  REQUIRE(a.Start(FleetFlags(server)));
  REQUIRE(b.Start(FleetFlags(server)));
  REQUIRE(Eventually([&] { return FleetStatusOf(a).reachable() && FleetStatusOf(b).reachable(); }));
  const v1::Entry slow = CompileOnlyEntry(6144, 20), fast = CompileOnlyEntry(6144, 10);
  std::thread ta([&] { Import(a, {slow}); });
  Import(b, {fast});
  ta.join();
  // A learns of B's faster entry (its upsert changed the row: NOTIFY) and
  // keeps it over its own; B keeps its own over A's.
  for (const DaemonProcess* d : {&a, &b}) {
    CHECK(Eventually([&] {
      auto r = d->NewClient()->GetConfig(CachedOnly(fast.problem()));
      return r.ok() && r->measurement().time_us() == 10;
    }));
  }
  CHECK(FleetRow(server, fast).measurement().time_us() == 10);
}

TEST_CASE("fleet: the store down changes no answer, status says so, and the queued publish is sent once it is back",
          "[e2e][fleet]") {
  PgServer server;
  REQUIRE(server.Start().ok());
  TempDir dir;
  DaemonProcess d(dir.path(), dir.path() + "/cache.db");
  REQUIRE(d.Start(FleetFlags(server, /*lookup_ms=*/50)));  // the default: a heuristic answer well inside 1 s
  REQUIRE(Eventually([&] { return FleetStatusOf(d).reachable(); }));
  // Callers all along, through the kill and the restart: none sees an error.
  std::atomic<bool> done{false};
  std::atomic<int> calls{0}, failures{0};
  std::vector<v1::GetConfigRequest> requests(200);  // made here: Catch's macros are for this thread only
  for (size_t i = 0; i < requests.size(); ++i) {
    *requests[i].mutable_problem() = testutil::NormProblemOf(NormOp::kRMSNorm, NormPass::kForward, 2 * i + 2, 4096);
    requests[i].set_policy(v1::HEURISTIC_ON_MISS);
  }
  std::thread callers([&] {
    auto client = d.NewClient();
    for (size_t i = 0; !done; i = (i + 1) % requests.size()) {
      if (!client->GetConfig(requests[i]).ok()) ++failures;
      ++calls;
    }
  });
  server.Stop(/*immediate=*/true);

  const v1::Entry entry = CompileOnlyEntry(1024);
  v1::GetConfigRequest heuristic;
  *heuristic.mutable_problem() = CompileOnlyEntry(3072).problem();
  heuristic.set_policy(v1::HEURISTIC_ON_MISS);
  const auto start = std::chrono::steady_clock::now();
  auto answer = d.NewClient()->GetConfig(heuristic);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  REQUIRE(answer.ok());
  CHECK(answer->source() == v1::HEURISTIC);
  Import(d, {entry});
  auto cached = d.NewClient()->GetConfig(CachedOnly(entry.problem()));
  REQUIRE(cached.ok());
  CHECK(cached->source() == v1::TUNED);
  REQUIRE(Eventually([&] { return !FleetStatusOf(d).reachable(); }));
  CHECK(FleetStatusOf(d).queued_publishes() == 1);
  CommandResult st = RunCommand(std::string(KTUNE_CLI_PATH) + " --server " + d.address() + " status", dir.path());
  CHECK_THAT(st.out, Catch::Contains("fleet store  UNREACHABLE, 1 publishes queued"));

  REQUIRE(server.Start().ok());
  REQUIRE(Eventually([&] {
    const v1::FleetStoreStatus s = FleetStatusOf(d);
    return s.reachable() && s.queued_publishes() == 0 && s.published() == 1;
  }));
  done = true;
  callers.join();
  CHECK(calls > 10);
  CHECK(failures == 0);
  CHECK(FleetRow(server, entry).measurement().time_us() == entry.measurement().time_us());
  CHECK(d.Stop() == 0);
}

TEST_CASE("fleet: a key another daemon is tuning is answered heuristically here, then picked up when published",
          "[e2e][fleet]") {
  PgServer server;
  REQUIRE(server.Start().ok());
  TempDir dir;
  DaemonProcess d(dir.path(), dir.path() + "/cache.db");
  REQUIRE(d.Start(FleetFlags(server), {testing::kFakeDeviceEnv}));
  REQUIRE(Eventually([&] { return FleetStatusOf(d).reachable(); }));

  // The entry another daemon on this GPU kind will publish.
  const DeviceInfo device = FakeWorkerDevice();
  const v1::Problem problem = testutil::NormProblemOf(NormOp::kRMSNorm, NormPass::kForward, 2048, 4096);
  absl::StatusOr<const Op*> op = BuiltinOps().ForProblem(problem);
  REQUIRE(op.ok());
  absl::StatusOr<v1::Config> config = (*op)->HeuristicConfig(problem, device);
  REQUIRE(config.ok());
  v1::Entry theirs = testutil::CurrentEntryOn(device, problem, *config);
  theirs.mutable_measurement()->set_time_us(7.25);
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), theirs);
  REQUIRE(key.ok());

  // "The other daemon": holds the key's tune lock, as a daemon tuning it does.
  std::unique_ptr<FleetStore> other = OpenStore(server, "other-host/ktuned-1");
  absl::StatusOr<FleetLock> held;
  REQUIRE(Eventually([&] { return (held = other->TryLock(*key, absl::Milliseconds(500))).ok(); }));
  REQUIRE(*held == FleetLock::kAcquired);

  v1::GetConfigRequest request;
  *request.mutable_problem() = problem;
  request.set_policy(v1::HEURISTIC_ON_MISS);
  auto first = d.NewClient()->GetConfig(request);
  REQUIRE(first.ok());
  CHECK(first->source() == v1::HEURISTIC);
  // Its background tune leaves the key to the lock's holder.
  REQUIRE(Eventually([&] { return d.Log().find("event=tune_left_to_fleet") != std::string::npos; }));

  // A TUNE_ON_MISS caller waits for the holder's result instead of tuning.
  request.set_policy(v1::TUNE_ON_MISS);
  absl::StatusOr<v1::GetConfigResponse> waited = absl::UnknownError("not answered");
  std::thread caller([&] { waited = d.NewClient()->GetConfig(request); });
  REQUIRE(Eventually([&] { return d.Log().find("event=tune_waits_for_fleet") != std::string::npos; }));
  other->Publish(*key, theirs);
  REQUIRE(other->WaitForPublished(absl::Seconds(5)));
  other->Unlock(*key);
  caller.join();
  INFO(waited.status().ToString() << "\n" << d.Log());
  REQUIRE(waited.ok());
  CHECK(waited->source() == v1::TUNED);
  CHECK(waited->measurement().time_us() == 7.25);  // theirs, not a tune of this daemon
  CHECK(d.Log().find("event=tune_start") == std::string::npos);
  request.set_policy(v1::CACHED_ONLY);
  auto later = d.NewClient()->GetConfig(request);
  REQUIRE(later.ok());
  CHECK(later->measurement().time_us() == 7.25);
}

}  // namespace
}  // namespace ktune
