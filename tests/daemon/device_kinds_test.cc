// GroupByKind and SelectKind (daemon/device_kinds.h): which answers a request
// on a node of several GPU kinds gets.
#include "daemon/device_kinds.h"

#include <catch2/catch.hpp>
#include <string>

#include "tuner/run/worker.h"

namespace ktune {
namespace {

DeviceInfo Named(const std::string& name) {
  DeviceInfo d = FakeWorkerDevice();
  d.name = name;
  return d;
}

v1::DeviceSelector Gpu(int ordinal) {
  v1::DeviceSelector s;
  s.set_gpu(ordinal);
  return s;
}

v1::DeviceSelector Name(const std::string& name) {
  v1::DeviceSelector s;
  s.set_name(name);
  return s;
}

TEST_CASE("GPUs group by kind in the order of each kind's first GPU", "[daemon][kinds]") {
  const auto kinds = GroupByKind({{0, Named("H200")}, {1, Named("H100")}, {3, Named("H200")}, {5, Named("H100")}});
  REQUIRE(kinds.size() == 2);
  CHECK(kinds[0].index == 0);
  CHECK(kinds[0].device.name == "H200");
  CHECK(kinds[0].ordinals == std::vector<int>{0, 3});
  CHECK(kinds[1].index == 1);
  CHECK(kinds[1].ordinals == std::vector<int>{1, 5});
  CHECK(kinds[0].key == DeviceKey(kinds[0].device));
  CHECK(kinds[0].key != kinds[1].key);
}

TEST_CASE("GPUs of one name but another driver or memory are different kinds", "[daemon][kinds]") {
  DeviceInfo other = Named("H200");
  other.memory_bytes += 1;
  const auto kinds = GroupByKind({{0, Named("H200")}, {1, other}});
  REQUIRE(kinds.size() == 2);
  // A name two kinds share picks neither: an ordinal does.
  auto by_name = SelectKind(kinds, Name("H200"));
  REQUIRE_FALSE(by_name.ok());
  CHECK(by_name.status().code() == absl::StatusCode::kInvalidArgument);
  auto by_gpu = SelectKind(kinds, Gpu(1));
  REQUIRE(by_gpu.ok());
  CHECK((*by_gpu)->index == 1);
}

TEST_CASE("a selector picks the kind it names, the first when unset, and names what is wrong otherwise",
          "[daemon][kinds]") {
  const auto kinds = GroupByKind({{0, Named("H200")}, {2, Named("H100")}});
  auto unset = SelectKind(kinds, v1::DeviceSelector());
  REQUIRE(unset.ok());
  CHECK((*unset)->device.name == "H200");
  auto gpu2 = SelectKind(kinds, Gpu(2));
  REQUIRE(gpu2.ok());
  CHECK((*gpu2)->device.name == "H100");
  auto named = SelectKind(kinds, Name("H100"));
  REQUIRE(named.ok());
  CHECK((*named)->index == 1);

  auto no_gpu = SelectKind(kinds, Gpu(1));
  REQUIRE_FALSE(no_gpu.ok());
  CHECK(no_gpu.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(no_gpu.status().message()).find("1") != std::string::npos);
  auto no_name = SelectKind(kinds, Name("B200"));
  REQUIRE_FALSE(no_name.ok());
  CHECK(no_name.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string message(no_name.status().message());
  CHECK(message.find("B200") != std::string::npos);
  CHECK(message.find("H200") != std::string::npos);
  CHECK(message.find("H100") != std::string::npos);
}

TEST_CASE("a daemon without a GPU has the compile-only target and refuses any selector", "[daemon][kinds]") {
  const auto kinds = GroupByKind({});
  REQUIRE(kinds.size() == 1);
  CHECK(kinds[0].ordinals.empty());
  CHECK(kinds[0].device.name == CompileOnlyTarget().name);
  CHECK(SelectKind(kinds, v1::DeviceSelector()).ok());
  CHECK(SelectKind(kinds, Gpu(0)).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(SelectKind(kinds, Name(CompileOnlyTarget().name)).status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ktune
