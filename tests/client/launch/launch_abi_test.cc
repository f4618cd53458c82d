// The launcher's C ABI (client/ktune_launch.h): codes and thread-local
// messages on every error path, and loads and launches reaching the C++
// Launcher (here over a fake driver, wrapped as the ABI's handle).
#include "client/internal/launch_abi.h"

#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "client/ktune_launch.h"
#include "tests/client/launch/fake_launch_driver.h"

namespace ktune {
namespace {

using testing::BlasLog;
using testing::DriverLog;

TEST_CASE("C ABI: the version is the header's", "[launch][abi]") {
  CHECK(ktune_launch_abi_version() == KTUNE_LAUNCH_ABI_VERSION);
  CHECK(KTUNE_LAUNCH_ABI_VERSION == 1);
}

TEST_CASE("C ABI: a launcher without a driver is a failed precondition with the reason", "[launch][abi]") {
  ktune_launcher* launcher = reinterpret_cast<ktune_launcher*>(0x1);
  const int rc = ktune_launcher_create(0, &launcher);
  if (rc == 0) {
    // A machine with a driver and a GPU: the launcher is real.
    REQUIRE(launcher != nullptr);
    ktune_launcher_destroy(launcher);
    return;
  }
  CHECK(rc == 9);
  CHECK(launcher == nullptr);
  CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("libcuda.so.1") || Catch::Contains("CUDA device"));
  CHECK(ktune_launcher_create(0, nullptr) == 3);
  CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("out is NULL"));
  ktune_launcher_destroy(nullptr);  // a no-op
}

TEST_CASE("C ABI: load and launch through the handle, errors with codes and messages", "[launch][abi]") {
  auto log = std::make_shared<DriverLog>();
  ktune_launcher* launcher = internal::WrapLauncher(testing::FakeLauncher(log, std::make_shared<BlasLog>()));
  const std::string bytes = testing::NormForwardRecipe().SerializeAsString();

  ktune_recipe* recipe = nullptr;
  REQUIRE(ktune_recipe_load(launcher, bytes.data(), bytes.size(), &recipe) == 0);
  REQUIRE(recipe != nullptr);
  ktune_recipe* again = nullptr;
  REQUIRE(ktune_recipe_load(launcher, bytes.data(), bytes.size(), &again) == 0);
  CHECK(again == recipe);
  CHECK(log->modules_loaded.size() == 1);

  const uint64_t addresses[] = {0x10000, 0x20000, 0x30000, 0};
  REQUIRE(ktune_recipe_launch(recipe, addresses, 4, reinterpret_cast<void*>(0x42)) == 0);
  REQUIRE(log->launches.size() == 1);
  CHECK(log->launches[0].stream == reinterpret_cast<void*>(0x42));
  CHECK(log->launches[0].grid == std::array<uint32_t, 3>{64, 1, 1});

  SECTION("bytes that are no recipe") {
    ktune_recipe* r = reinterpret_cast<ktune_recipe*>(0x1);
    CHECK(ktune_recipe_load(launcher, "\xff\xff\xff", 3, &r) == 3);
    CHECK(r == nullptr);
    CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("not a serialized ktune.v1.LaunchRecipe"));
  }
  SECTION("a recipe that fails validation names the field") {
    v1::LaunchRecipe bad = testing::NormForwardRecipe();
    bad.clear_cubin();
    const std::string b = bad.SerializeAsString();
    ktune_recipe* r = nullptr;
    CHECK(ktune_recipe_load(launcher, b.data(), b.size(), &r) == 3);
    CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("cubin: missing"));
  }
  SECTION("null arguments") {
    ktune_recipe* r = nullptr;
    CHECK(ktune_recipe_load(nullptr, bytes.data(), bytes.size(), &r) == 3);
    CHECK(ktune_recipe_load(launcher, bytes.data(), bytes.size(), nullptr) == 3);
    CHECK(ktune_recipe_load(launcher, nullptr, 10, &r) == 3);
    CHECK(ktune_recipe_launch(nullptr, addresses, 4, nullptr) == 3);
    CHECK(ktune_recipe_launch(recipe, nullptr, 4, nullptr) == 3);
    CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("addresses is NULL"));
  }
  SECTION("a binding count or null required tensor") {
    CHECK(ktune_recipe_launch(recipe, addresses, 3, nullptr) == 3);
    CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("3 addresses for the recipe's 4 tensors"));
    const uint64_t null_x[] = {0, 0x20000, 0x30000, 0};
    CHECK(ktune_recipe_launch(recipe, null_x, 4, nullptr) == 3);
    CHECK_THAT(std::string(ktune_last_error()), Catch::Contains("tensors[0] (\"x\") is required"));
    CHECK(log->launches.size() == 1);
  }
  SECTION("the last error is per thread") {
    CHECK(ktune_recipe_launch(recipe, addresses, 3, nullptr) == 3);
    const std::string mine = ktune_last_error();
    std::string theirs;
    std::thread([&] {
      theirs = ktune_last_error();  // nothing failed on this thread yet
      CHECK(ktune_recipe_load(launcher, "\xff", 1, nullptr) == 3);
    }).join();
    CHECK(theirs.empty());
    CHECK(std::string(ktune_last_error()) == mine);
  }
  ktune_launcher_destroy(launcher);
  CHECK(log->modules_unloaded == 1);
}

}  // namespace
}  // namespace ktune
