// --gpus: its syntax, the GPUs it selects on a node, and the
// CUDA_VISIBLE_DEVICES each GPU's worker is given.
#include "daemon/gpus.h"

#include <catch2/catch.hpp>

namespace ktune {
namespace {

std::vector<int> Select(const std::string& flag, int device_count) {
  absl::StatusOr<GpuSelection> parsed = ParseGpuFlag(flag);
  REQUIRE(parsed.ok());
  absl::StatusOr<std::vector<int>> selected = SelectGpus(*parsed, device_count);
  REQUIRE(selected.ok());
  return *selected;
}

std::string ParseError(const std::string& flag) {
  absl::StatusOr<GpuSelection> parsed = ParseGpuFlag(flag);
  REQUIRE_FALSE(parsed.ok());
  CHECK(absl::IsInvalidArgument(parsed.status()));
  return std::string(parsed.status().message());
}

std::string SelectError(const std::string& flag, int device_count) {
  absl::StatusOr<GpuSelection> parsed = ParseGpuFlag(flag);
  REQUIRE(parsed.ok());
  absl::StatusOr<std::vector<int>> selected = SelectGpus(*parsed, device_count);
  REQUIRE_FALSE(selected.ok());
  CHECK(absl::IsInvalidArgument(selected.status()));
  return std::string(selected.status().message());
}

TEST_CASE("ktuned --gpus: all, a count or ordinals select GPUs of the node", "[daemon][gpus]") {
  CHECK(Select("all", 8) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(Select("all", 1) == std::vector<int>{0});
  CHECK(Select("2", 8) == std::vector<int>{0, 1});
  CHECK(Select("8", 8).size() == 8);
  CHECK(Select("5,0,2", 8) == std::vector<int>{0, 2, 5});  // ascending, as the workers are numbered
  CHECK(Select("3,", 8) == std::vector<int>{3});           // one ordinal: a list of one
}

TEST_CASE("ktuned --gpus: errors name the flag and what is wrong", "[daemon][gpus]") {
  CHECK(ParseError("") == "--gpus : expected all, a count (4) or GPU ordinals (0,2,5)");
  CHECK(ParseError("many") == "--gpus many: expected all, a count (4) or GPU ordinals (0,2,5)");
  CHECK(ParseError("0").find("--gpus 0: a count of GPUs is 1 to 64") == 0);
  CHECK(ParseError("-1").find("a count of GPUs is 1 to 64") != std::string::npos);
  CHECK(ParseError("0,x") == "--gpus 0,x: 'x' is not a GPU ordinal (0 to 63)");
  CHECK(ParseError("0,-2") == "--gpus 0,-2: '-2' is not a GPU ordinal (0 to 63)");
  CHECK(ParseError("1,1") == "--gpus 1,1: GPU 1 is named twice");
  CHECK(ParseError(",") == "--gpus ,: expected all, a count (4) or GPU ordinals (0,2,5)");
  CHECK(SelectError("3", 2) == "--gpus 3: this node has 2 GPU(s) (ordinals 0 to 1)");
  CHECK(SelectError("0,5", 2) == "--gpus 0,5: no GPU 5 on this node, which has 2 GPU(s) (ordinals 0 to 1)");
}

TEST_CASE("each GPU's worker sees its GPU alone, under the daemon's CUDA_VISIBLE_DEVICES", "[daemon][gpus]") {
  CHECK(VisibleDeviceFor(3, nullptr) == "3");
  CHECK(VisibleDeviceFor(3, "") == "3");
  CHECK(VisibleDeviceFor(1, "4,6") == "6");
  CHECK(VisibleDeviceFor(0, "GPU-8f6a,GPU-77b1") == "GPU-8f6a");
}

}  // namespace
}  // namespace ktune
