// FleetStore against a real PostgreSQL server (tests/cache/pg_server.h): the
// schema, the round trip, keep-faster under concurrent publishers, the tune
// lock, LISTEN/NOTIFY, rows the import check refuses, and the server stopped
// and restarted under a running store.
#include "cache/fleet_store.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "cache/bundle_merge.h"
#include "tests/cache/current_entries.h"
#include "tests/cache/pg_server.h"

namespace ktune {
namespace {

using testing::PgServer;
using testutil::CurrentEntry;
using testutil::HeuristicConfig;
using testutil::NormProblemOf;

FleetStoreOptions OptionsFor(const PgServer& server, const std::string& publisher) {
  FleetStoreOptions o;
  o.url = server.url();
  o.password_file = server.password_file();
  o.publisher = publisher;
  o.retry_min = absl::Milliseconds(20);
  o.retry_max = absl::Milliseconds(200);
  o.connect_timeout = absl::Seconds(2);
  return o;
}

// Waits up to 10 s for `what`.
template <typename F>
bool Eventually(F what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (what()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return what();
}

std::unique_ptr<FleetStore> Connected(const PgServer& server, const std::string& publisher,
                                      std::function<void(const EntryKey&)> on_published = nullptr) {
  FleetStoreOptions o = OptionsFor(server, publisher);
  o.on_published = std::move(on_published);
  absl::StatusOr<std::unique_ptr<FleetStore>> store = FleetStore::Open(o);
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  // Ready once every session is up: a lookup answers, and a lock.
  const EntryKey probe{"rmsnorm.fwd", "probe", "d", "s"};
  REQUIRE(Eventually([&] {
    return (*store)->Lookup(probe, absl::Milliseconds(200)).ok() &&
           (*store)->TryLock(probe, absl::Milliseconds(200)).ok();
  }));
  (*store)->Unlock(probe);
  return *std::move(store);
}

v1::Entry EntryOf(int64_t m, double time_us) {
  const v1::Problem p = NormProblemOf(NormOp::kRMSNorm, NormPass::kForward, m, 4096);
  v1::Entry e = CurrentEntry(p, HeuristicConfig(p));
  e.mutable_measurement()->set_time_us(time_us);
  return e;
}

EntryKey KeyOfEntry(const v1::Entry& e) {
  absl::StatusOr<EntryKey> key = KeyOf(BuiltinOps(), e);
  REQUIRE(key.ok());
  return *key;
}

PgServer& StartedServer(PgServer& server) {
  absl::Status s = server.Start();
  INFO(s.ToString());
  REQUIRE(s.ok());
  return server;
}

TEST_CASE("fleet store: flags are checked before anything connects", "[cache][fleet]") {
  CHECK(CheckFleetUrl("postgresql://ktune@db.example:5432/ktune?sslmode=verify-full").ok());
  const absl::Status with_password = CheckFleetUrl("postgresql://ktune:hunter2@db.example/ktune");
  CHECK(absl::IsInvalidArgument(with_password));
  CHECK_THAT(std::string(with_password.message()), Catch::Contains("--fleet-store-password-file"));
  CHECK_THAT(std::string(with_password.message()), !Catch::Contains("hunter2"));
  CHECK(absl::IsInvalidArgument(CheckFleetUrl("postgresql://db/ktune?password=hunter2")));
  CHECK_THAT(std::string(CheckFleetUrl("mysql://db/ktune").message()), Catch::Contains("postgresql://"));
  CHECK(absl::IsInvalidArgument(CheckFleetUrl("postgresql://" + std::string(5000, 'a'))));

  PgServer scratch;  // for its directory
  CHECK(absl::IsNotFound(ReadFleetPasswordFile(scratch.dir() + "/missing").status()));
  std::ofstream(scratch.dir() + "/empty") << "\n";
  CHECK_THAT(std::string(ReadFleetPasswordFile(scratch.dir() + "/empty").status().message()), Catch::Contains("empty"));
  absl::StatusOr<std::string> read = ReadFleetPasswordFile(scratch.password_file());
  REQUIRE(read.ok());
  CHECK(*read == PgServer::kPassword);
  FleetStoreOptions o;
  o.url = "postgresql://ktune@127.0.0.1:1/postgres";
  o.password_file = scratch.dir() + "/missing";
  CHECK_THAT(std::string(FleetStore::Open(o).status().message()), Catch::Contains("--fleet-store-password-file"));
}

TEST_CASE("fleet store: schema, round trip, keep-faster, tune lock and NOTIFY on a real server", "[cache][fleet]") {
  PgServer server;
  StartedServer(server);
  std::atomic<int> notified{0};
  EntryKey last_notified;
  absl::Mutex notified_mu;
  std::unique_ptr<FleetStore> a = Connected(server, "host-a/1");
  std::unique_ptr<FleetStore> b = Connected(server, "host-b/1", [&](const EntryKey& key) {
    absl::MutexLock lock(&notified_mu);
    last_notified = key;
    ++notified;
  });

  // The schema is at its version.
  CHECK(server.Psql(absl::StrCat("DO $$ BEGIN IF (SELECT version FROM ktune_fleet_schema) <> ", kFleetSchemaVersion,
                                 " THEN RAISE EXCEPTION 'version'; END IF; END $$;")) == 0);

  const v1::Entry entry = EntryOf(4096, 12.5);
  const EntryKey key = KeyOfEntry(entry);
  auto none = a->Lookup(key, absl::Milliseconds(500));
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());

  a->Publish(key, entry);
  REQUIRE(a->WaitForPublished(absl::Seconds(5)));
  auto found = b->Lookup(key, absl::Milliseconds(500));
  REQUIRE(found.ok());
  REQUIRE(found->has_value());
  CHECK((*found)->SerializeAsString() == entry.SerializeAsString());
  // B heard of it (LISTEN/NOTIFY), with the key.
  REQUIRE(Eventually([&] { return notified.load() >= 1; }));
  {
    absl::MutexLock lock(&notified_mu);
    CHECK(last_notified == key);
  }

  SECTION("concurrent publishers of one key end with the faster, never a mix") {
    const v1::Entry other = EntryOf(8192, 40);
    const EntryKey other_key = KeyOfEntry(other);
    std::thread ta([&] {
      for (int i = 0; i < 40; ++i) {
        v1::Entry e = other;
        e.mutable_measurement()->set_time_us(40 - i * 0.5);  // down to 20.5
        e.set_ktune_version("a");
        a->Publish(other_key, e);
      }
    });
    std::thread tb([&] {
      for (int i = 0; i < 40; ++i) {
        v1::Entry e = other;
        e.mutable_measurement()->set_time_us(39.75 - i * 0.5);  // down to 20.25: b's last is the fastest
        e.set_ktune_version("b");
        b->Publish(other_key, e);
      }
    });
    ta.join();
    tb.join();
    REQUIRE(a->WaitForPublished(absl::Seconds(10)));
    REQUIRE(b->WaitForPublished(absl::Seconds(10)));
    auto won = a->Lookup(other_key, absl::Milliseconds(500));
    REQUIRE(won.ok());
    REQUIRE(won->has_value());
    CHECK((*won)->measurement().time_us() == 20.25);
    CHECK((*won)->ktune_version() == "b");  // the whole entry of the faster publish
    // A slower publish later changes nothing.
    v1::Entry slow = other;
    slow.mutable_measurement()->set_time_us(30);
    a->Publish(other_key, slow);
    REQUIRE(a->WaitForPublished(absl::Seconds(5)));
    CHECK((*a->Lookup(other_key, absl::Milliseconds(500)))->measurement().time_us() == 20.25);

    auto counts = a->Counts(absl::Seconds(1));
    REQUIRE(counts.ok());
    int64_t total = 0;
    for (const FleetCount& c : *counts) {
      CHECK(c.device_name == entry.device().name());
      total += c.entries;
    }
    CHECK(total == 2);
  }

  SECTION("a tune lock held by one session is refused to another until released") {
    auto first = a->TryLock(key, absl::Milliseconds(500));
    REQUIRE(first.ok());
    CHECK(*first == FleetLock::kAcquired);
    auto second = b->TryLock(key, absl::Milliseconds(500));
    REQUIRE(second.ok());
    CHECK(*second == FleetLock::kHeldElsewhere);
    a->Unlock(key);
    auto third = b->TryLock(key, absl::Milliseconds(500));
    REQUIRE(third.ok());
    CHECK(*third == FleetLock::kAcquired);
    b->Unlock(key);
  }

  SECTION("rows the import check refuses: bad bytes, and a recipe that is not the template's") {
    // Bytes that are no entry: refused by the fleet store itself.
    REQUIRE(server.Psql("UPDATE ktune_fleet_entries SET entry = '\\xdeadbeef'::bytea") == 0);
    CHECK(absl::IsDataLoss(a->Lookup(key, absl::Milliseconds(500)).status()));

    // A parseable entry whose recipe's grid was changed: the import check
    // (PlanMerge runs ValidateEntry, and so VerifyStoredRecipe) rejects it.
    v1::Entry tampered = entry;
    tampered.mutable_recipe()->mutable_kernels(0)->set_grid(0, tampered.recipe().kernels(0).grid(0) + 1);
    tampered.mutable_measurement()->set_time_us(1);  // faster, so the upsert takes it
    a->Publish(key, tampered);
    REQUIRE(a->WaitForPublished(absl::Seconds(5)));
    auto row = b->Lookup(key, absl::Milliseconds(500));
    REQUIRE(row.ok());
    REQUIRE(row->has_value());
    absl::StatusOr<MergePlan> plan =
        PlanMerge(BuiltinOps(), {**row}, v1::KEEP_FASTER, MergeTarget{}, [](const EntryKey&) { return std::nullopt; });
    REQUIRE_FALSE(plan.ok());
    CHECK_THAT(std::string(plan.status().message()), Catch::Contains("grid"));
  }
}

TEST_CASE("fleet store: a stopped server fails lookups fast, queues publishes, and drains them on restart",
          "[cache][fleet]") {
  PgServer server;
  StartedServer(server);
  std::unique_ptr<FleetStore> store = Connected(server, "host-a/1");
  server.Stop(/*immediate=*/true);

  // Lookups fail fast and say why; nothing throws.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    auto r = store->Lookup(KeyOfEntry(EntryOf(64, 1)), absl::Milliseconds(50));
    CHECK(absl::IsUnavailable(r.status()));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1000));
  CHECK(absl::IsUnavailable(store->TryLock(KeyOfEntry(EntryOf(64, 1)), absl::Milliseconds(50)).status()));
  REQUIRE(Eventually([&] { return !store->status().reachable; }));
  CHECK_FALSE(store->status().last_error.empty());

  std::vector<v1::Entry> entries;
  for (int m = 1; m <= 20; ++m) {
    entries.push_back(EntryOf(m * 128, 10 + m));
    store->Publish(KeyOfEntry(entries.back()), entries.back());
  }
  CHECK(store->status().queued_publishes == 20);
  CHECK_FALSE(store->WaitForPublished(absl::Milliseconds(300)));

  REQUIRE(server.Start().ok());
  REQUIRE(store->WaitForPublished(absl::Seconds(15)));
  REQUIRE(Eventually([&] { return store->status().reachable; }));
  CHECK(store->status().published == 20);
  CHECK(store->status().dropped == 0);
  for (const v1::Entry& e : entries) {
    absl::StatusOr<std::optional<v1::Entry>> found;
    REQUIRE(Eventually([&] { return (found = store->Lookup(KeyOfEntry(e), absl::Milliseconds(500))).ok(); }));
    REQUIRE(found->has_value());
    CHECK((*found)->measurement().time_us() == e.measurement().time_us());
  }
}

TEST_CASE("fleet store: a wrong password, and a schema newer than this build's, are refused and change nothing",
          "[cache][fleet]") {
  PgServer server;
  StartedServer(server);
  {
    std::ofstream(server.dir() + "/wrong-password") << "not-the-password\n";
    FleetStoreOptions wrong = OptionsFor(server, "host-x/1");
    wrong.password_file = server.dir() + "/wrong-password";
    absl::StatusOr<std::unique_ptr<FleetStore>> store = FleetStore::Open(wrong);
    REQUIRE(store.ok());
    REQUIRE(Eventually([&] { return absl::StrContains((*store)->status().last_error, "password authentication"); }));
    CHECK_FALSE((*store)->status().reachable);
    CHECK_THAT((*store)->status().last_error, !Catch::Contains("not-the-password"));
    // The secret rotated in place: the next reconnect reads it.
    std::ofstream(server.dir() + "/wrong-password") << PgServer::kPassword << "\n";
    REQUIRE(Eventually([&] { return (*store)->status().reachable; }));
  }
  { Connected(server, "host-a/1"); }  // creates the tables at kFleetSchemaVersion
  REQUIRE(server.Psql("UPDATE ktune_fleet_schema SET version = 99") == 0);
  absl::StatusOr<std::unique_ptr<FleetStore>> store = FleetStore::Open(OptionsFor(server, "host-b/1"));
  REQUIRE(store.ok());
  REQUIRE(Eventually([&] { return absl::StrContains((*store)->status().last_error, "newer"); }));
  CHECK_FALSE((*store)->status().reachable);
  CHECK(absl::IsUnavailable((*store)->Lookup(KeyOfEntry(EntryOf(64, 1)), absl::Milliseconds(50)).status()));
  CHECK(server.Psql("DO $$ BEGIN IF (SELECT version FROM ktune_fleet_schema) <> 99 THEN RAISE EXCEPTION 'changed'; "
                    "END IF; END $$;") == 0);
}

}  // namespace
}  // namespace ktune
