// GetConfig latency on a cache hit, as a compiler frontend sees it: one
// client, one channel, sequential calls. Prints p50/p90/p99/max in
// microseconds. The entry must already be stored (CACHED_ONLY is asked).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/client.h"
#include "tuner/core/paths.h"

int main(int argc, char** argv) {
  CLI::App app{"ktune_get_latency: GetConfig round trips on a cache hit"};
  std::string server = ktune::DefaultServerAddress();
  int64_t m = 4096, n = 4096;
  int calls = 20000, warmup = 500;
  bool heuristic = false;
  app.add_option("--server", server)->capture_default_str();
  app.add_option("--m", m)->capture_default_str();
  app.add_option("--n", n)->capture_default_str();
  app.add_option("--calls", calls)->check(CLI::Range(1, 10000000))->capture_default_str();
  app.add_flag("--heuristic", heuristic,
               "time HEURISTIC_ON_MISS answers (served from the daemon's compiled memo) instead of hits");
  CLI11_PARSE(app, argc, argv);

  auto client = ktune::Client::Create(server, 10);
  ktune::v1::GetConfigRequest request;
  ktune::v1::NormProblem* p = request.mutable_problem()->mutable_norm();
  p->set_op(ktune::v1::RMSNORM);
  p->set_norm_pass(ktune::v1::FWD);
  p->set_m(m);
  p->set_n(n);
  p->set_input_dtype(ktune::v1::BF16);
  p->set_has_weight(true);
  request.set_policy(heuristic ? ktune::v1::HEURISTIC_ON_MISS : ktune::v1::CACHED_ONLY);

  std::vector<double> us;
  us.reserve(calls);
  for (int i = 0; i < warmup + calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = client->GetConfig(request);
    const auto t1 = std::chrono::steady_clock::now();
    if (!r.ok()) {
      std::fprintf(stderr, "ktune_get_latency: error: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (!heuristic && r->source() != ktune::v1::TUNED) {
      std::fprintf(stderr, "ktune_get_latency: error: not a cache hit\n");
      return 1;
    }
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double q) { return us[static_cast<size_t>(q * (us.size() - 1))]; };
  std::printf("GetConfig %s over %s, %d calls: p50 %.1f us  p90 %.1f us  p99 %.1f us  max %.1f us\n",
              heuristic ? "heuristic answer" : "cache hit", server.c_str(), calls, pct(0.5), pct(0.9), pct(0.99),
              us.back());
  return 0;
}
