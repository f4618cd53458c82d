// The metrics registry: handles, histograms, zero-initialised label values
// and the Prometheus text it renders.
#include "daemon/metrics.h"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace ktune {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST_CASE("a histogram renders cumulative buckets, +Inf, _sum and _count per label set", "[daemon][metrics]") {
  Metrics m;
  m.DeclareHistogram("lat_seconds", "latency", {0.001, 0.01, 0.1});
  Metrics::Histogram* hit = m.GetHistogram("lat_seconds", {{"answer", "hit"}});
  Metrics::Histogram* miss = m.GetHistogram("lat_seconds", {{"answer", "miss"}});
  hit->Observe(0.0005);
  hit->Observe(0.001);  // on a bound: counted as le that bound
  hit->Observe(0.05);
  hit->Observe(5);  // above every bound: +Inf only
  const std::string text = m.RenderPrometheus();
  CHECK(Has(text, "# TYPE lat_seconds histogram"));
  CHECK(Has(text, "lat_seconds_bucket{answer=\"hit\",le=\"0.001\"} 2"));
  CHECK(Has(text, "lat_seconds_bucket{answer=\"hit\",le=\"0.01\"} 2"));
  CHECK(Has(text, "lat_seconds_bucket{answer=\"hit\",le=\"0.1\"} 3"));
  CHECK(Has(text, "lat_seconds_bucket{answer=\"hit\",le=\"+Inf\"} 4"));
  CHECK(Has(text, "lat_seconds_count{answer=\"hit\"} 4"));
  CHECK(Has(text, "lat_seconds_sum{answer=\"hit\"} 5.0515"));
  // Resolved but never observed: exported, at zero.
  CHECK(Has(text, "lat_seconds_bucket{answer=\"miss\",le=\"+Inf\"} 0"));
  CHECK(Has(text, "lat_seconds_count{answer=\"miss\"} 0"));
  (void)miss;
  const auto snapshot = m.Snapshot();
  CHECK(snapshot.at("lat_seconds_count{answer=\"hit\"}") == 4);
  CHECK(snapshot.at("lat_seconds_sum{answer=\"hit\"}") == Approx(5.0515));
}

TEST_CASE("a resolved sample is exported at zero and counts exactly under concurrent updates", "[daemon][metrics]") {
  Metrics m;
  m.Declare("calls_total", Metrics::Kind::kCounter, "calls");
  m.Declare("info", Metrics::Kind::kGauge, "build");
  Metrics::Sample* a = m.Get("calls_total", {{"answer", "a"}});
  m.Get("calls_total", {{"answer", "b"}});
  m.Get("info", {{"version", "1.2"}, {"nvrtc", "13.0"}})->Set(1);
  CHECK(Has(m.RenderPrometheus(), "calls_total{answer=\"b\"} 0"));
  CHECK(Has(m.RenderPrometheus(), "info{version=\"1.2\",nvrtc=\"13.0\"} 1"));
  // The same labels resolve to the same sample, by name or by handle.
  CHECK(m.Get("calls_total", {{"answer", "a"}}) == a);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) a->Add(1);
    });
  }
  for (auto& t : threads) t.join();
  m.Add("calls_total", 1, "answer", "a");
  CHECK(m.Snapshot().at("calls_total{answer=\"a\"}") == 80001);
  CHECK(m.Snapshot().at("calls_total{answer=\"b\"}") == 0);
}

TEST_CASE("label values are escaped in the exposition format", "[daemon][metrics]") {
  Metrics m;
  m.Declare("x_total", Metrics::Kind::kCounter, "x");
  m.Add("x_total", 1, "name", "a\"b\\c\nd");
  CHECK(Has(m.RenderPrometheus(), "x_total{name=\"a\\\"b\\\\c\\nd\"} 1"));
}

}  // namespace
}  // namespace ktune
