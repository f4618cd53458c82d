// The fleet store's costs, as a fleet sees them: it starts a PostgreSQL
// server (tests/cache/pg_server.h: Debian's postgresql package) and three
// compile-only ktuned: A and B share the fleet store, C has none. It prints
//   miss      GetConfig CACHED_ONLY of keys stored nowhere, on B (a local
//             miss that asks the fleet store) and on C (a local miss alone):
//             p50 and p99, and B's extra latency;
//   publish   an ImportBundle into A until B serves the entry (B is asked in
//             a loop; it learns of the entry through LISTEN/NOTIFY): p50 and
//             max over --entries entries.
// CPU only; runs anywhere the tests run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "cache/bundle.h"
#include "cache/recipe_check.h"
#include "client/client.h"
#include "tests/cache/pg_server.h"
#include "tests/e2e/daemon_process.h"

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

ktune::v1::GetConfigRequest Request(int64_t m, ktune::v1::Policy policy) {
  ktune::v1::GetConfigRequest r;
  *r.mutable_problem() = ktune::testing::RmsProblem(m, 4096);
  r.set_policy(policy);
  return r;
}

// The entry a daemon would store for its heuristic answer to `request`.
bool EntryOf(ktune::Client& client, const ktune::v1::GetConfigRequest& request, ktune::v1::Entry* entry) {
  ktune::v1::GetConfigRequest heuristic = request;
  heuristic.set_policy(ktune::v1::HEURISTIC_ON_MISS);
  absl::StatusOr<ktune::v1::GetConfigResponse> answer = client.GetConfig(heuristic);
  if (!answer.ok()) return false;
  *entry->mutable_problem() = request.problem();
  *entry->mutable_device() = answer->device();
  *entry->mutable_software() = answer->software();
  *entry->mutable_config() = answer->config();
  *entry->mutable_recipe() = ktune::StoredRecipe(answer->recipe());
  entry->mutable_measurement()->set_time_us(10);
  entry->mutable_measurement()->set_repetitions(30);
  entry->set_tuned_at_unix(1795000000);
  entry->set_candidates_measured(1);
  entry->set_ktune_version("fleet_bench");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ktune_fleet_bench: the fleet store's miss latency and publish-to-serve time"};
  int misses = 300;
  int entries = 30;
  app.add_option("--misses", misses, "CACHED_ONLY misses timed on each daemon")->check(CLI::Range(1, 100000));
  app.add_option("--entries", entries, "entries imported into A and waited for on B")->check(CLI::Range(1, 10000));
  CLI11_PARSE(app, argc, argv);

  ktune::testing::PgServer server;
  if (absl::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "fleet_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const std::vector<std::string> fleet = {"--fleet-store",        server.url(),  "--fleet-store-password-file",
                                          server.password_file(), "--log-level", "warn"};
  ktune::testing::TempDir dir_a, dir_b, dir_c;
  ktune::testing::DaemonProcess a(dir_a.path(), dir_a.path() + "/cache.db");
  ktune::testing::DaemonProcess b(dir_b.path(), dir_b.path() + "/cache.db");
  ktune::testing::DaemonProcess c(dir_c.path(), dir_c.path() + "/cache.db");
  if (!a.Start(fleet) || !b.Start(fleet) || !c.Start({"--log-level", "warn"})) {
    std::fprintf(stderr, "fleet_bench: a ktuned did not start\n");
    return 1;
  }
  auto client_a = a.NewClient(), client_b = b.NewClient(), client_c = c.NewClient();
  // Both fleet daemons connected before anything is timed.
  for (int i = 0; i < 500; ++i) {
    auto s = client_b->GetStatus();
    if (s.ok() && s->fleet_store().reachable()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // Distinct keys, stored nowhere: each is a local miss (and, on B, a fleet miss).
  std::vector<double> with_fleet, without;
  for (int i = 0; i < misses; ++i) {
    for (auto [client, out] : {std::pair{client_b.get(), &with_fleet}, std::pair{client_c.get(), &without}}) {
      const auto start = Clock::now();
      (void)client->GetConfig(Request(100000 + i, ktune::v1::CACHED_ONLY));
      out->push_back(Us(Clock::now() - start));
    }
  }
  std::printf("miss (CACHED_ONLY, NOT_FOUND), %d keys\n", misses);
  std::printf("  %-22s p50 %8.1f us   p99 %8.1f us\n", "fleet store (B)", Percentile(with_fleet, 0.5),
              Percentile(with_fleet, 0.99));
  std::printf("  %-22s p50 %8.1f us   p99 %8.1f us\n", "no fleet store (C)", Percentile(without, 0.5),
              Percentile(without, 0.99));
  std::printf("  %-22s p50 %8.1f us\n", "extra for the fleet", Percentile(with_fleet, 0.5) - Percentile(without, 0.5));

  std::vector<double> served;
  for (int i = 0; i < entries; ++i) {
    const ktune::v1::GetConfigRequest request = Request(200000 + i, ktune::v1::CACHED_ONLY);
    ktune::v1::Entry entry;
    if (!EntryOf(*client_a, request, &entry)) {
      std::fprintf(stderr, "fleet_bench: no heuristic answer to make an entry of\n");
      return 1;
    }
    (void)client_b->GetConfig(request);  // B has missed it: only the NOTIFY brings it now
    const auto start = Clock::now();
    auto imported = client_a->ImportBundle(ktune::EncodeBundle({entry}, "fleet_bench", 1795000000));
    if (!imported.ok() || imported->added() != 1) {
      std::fprintf(stderr, "fleet_bench: import failed: %s\n", std::string(imported.status().message()).c_str());
      return 1;
    }
    bool ok = false;
    while (Clock::now() - start < std::chrono::seconds(10)) {
      auto answer = client_b->GetConfig(request);
      if (answer.ok() && answer->source() == ktune::v1::TUNED) {
        ok = true;
        break;
      }
    }
    if (!ok) {
      std::fprintf(stderr, "fleet_bench: B did not serve entry %d within 10 s\n", i);
      return 1;
    }
    served.push_back(Us(Clock::now() - start) / 1000);
  }
  std::printf("publish (ImportBundle into A) to served by B (NOTIFY), %d entries\n", entries);
  std::printf("  p50 %8.2f ms   max %8.2f ms\n", Percentile(served, 0.5), Percentile(served, 1.0));
  return 0;
}
