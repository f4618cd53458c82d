// The on-disk compiled-kernel cache: keys, round trips, LRU bound, damage.
#include "tuner/compile/kernel_cache.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

LaunchRecipe Compiled(const std::string& expression, size_t cubin_bytes) {
  LaunchRecipe r;
  r.template_id = "norm/rmsnorm_fwd";
  r.template_hash = std::string(64, 'a');
  r.nvrtc_options = {"--gpu-architecture=sm_90", "-std=c++17"};
  r.arch = "sm_90";
  KernelLaunch k;
  k.name_expression = expression;
  k.lowered_name = "_Z" + expression;
  r.kernels.push_back(k);
  r.cubin = std::string(cubin_bytes, 'c');
  return r;
}

LaunchRecipe Uncompiled(LaunchRecipe r) {
  r.cubin.clear();
  for (KernelLaunch& k : r.kernels) k.lowered_name.clear();
  return r;
}

void Tick() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

TEST_CASE("KernelCache keys cover everything that determines the cubin", "[tuner][kernel_cache]") {
  const LaunchRecipe base = Compiled("k<1>", 10);
  const std::string key = KernelCache::KeyOf(base, 13000);
  CHECK(key.size() == 64);
  CHECK(KernelCache::KeyOf(Uncompiled(base), 13000) == key);  // the outputs are not part of it
  CHECK(KernelCache::KeyOf(base, 13010) != key);
  LaunchRecipe r = base;
  r.template_hash[0] = 'b';
  CHECK(KernelCache::KeyOf(r, 13000) != key);
  r = base;
  r.arch = "sm_90a";
  CHECK(KernelCache::KeyOf(r, 13000) != key);
  r = base;
  r.nvrtc_options.push_back("-lineinfo");
  CHECK(KernelCache::KeyOf(r, 13000) != key);
  r = base;
  r.kernels[0].name_expression = "k<2>";
  CHECK(KernelCache::KeyOf(r, 13000) != key);
  r = base;
  r.kernels[0].grid = {7, 1, 1};  // launch geometry does not change the cubin
  CHECK(KernelCache::KeyOf(r, 13000) == key);
}

TEST_CASE("KernelCache returns what was stored, across reopening", "[tuner][kernel_cache]") {
  testing::TempDir dir;
  const std::string path = dir.path() + "/kernels";
  {
    auto cache = KernelCache::Open(path, 1 << 20);
    REQUIRE(cache.ok());
    LaunchRecipe miss = Uncompiled(Compiled("k<1>", 100));
    CHECK_FALSE((*cache)->Lookup(&miss, 13000));
    (*cache)->Store(Compiled("k<1>", 100), 13000);
    LaunchRecipe hit = Uncompiled(Compiled("k<1>", 100));
    REQUIRE((*cache)->Lookup(&hit, 13000));
    CHECK(hit.cubin == std::string(100, 'c'));
    CHECK(hit.kernels[0].lowered_name == "_Zk<1>");
    LaunchRecipe other_version = Uncompiled(Compiled("k<1>", 100));
    CHECK_FALSE((*cache)->Lookup(&other_version, 13010));
    const KernelCache::Stats s = (*cache)->stats();
    CHECK(s.hits == 1);
    CHECK(s.misses == 2);
    CHECK(s.files == 1);
  }
  auto reopened = KernelCache::Open(path, 1 << 20);
  REQUIRE(reopened.ok());
  CHECK((*reopened)->stats().files == 1);
  CHECK((*reopened)->stats().bytes > 100);
  LaunchRecipe hit = Uncompiled(Compiled("k<1>", 100));
  CHECK((*reopened)->Lookup(&hit, 13000));
}

TEST_CASE("KernelCache evicts the least recently used beyond its bound", "[tuner][kernel_cache]") {
  testing::TempDir dir;
  auto cache = KernelCache::Open(dir.path(), 2500);  // room for two 1000-byte cubins
  REQUIRE(cache.ok());
  (*cache)->Store(Compiled("a", 1000), 13000);
  Tick();
  (*cache)->Store(Compiled("b", 1000), 13000);
  Tick();
  LaunchRecipe a = Uncompiled(Compiled("a", 1000));
  REQUIRE((*cache)->Lookup(&a, 13000));  // a is now the most recently used
  Tick();
  (*cache)->Store(Compiled("c", 1000), 13000);
  LaunchRecipe b = Uncompiled(Compiled("b", 1000)), c = Uncompiled(Compiled("c", 1000));
  a = Uncompiled(Compiled("a", 1000));
  CHECK((*cache)->Lookup(&a, 13000));
  CHECK_FALSE((*cache)->Lookup(&b, 13000));
  CHECK((*cache)->Lookup(&c, 13000));
  const KernelCache::Stats s = (*cache)->stats();
  CHECK(s.evictions == 1);
  CHECK(s.files == 2);
  CHECK(s.bytes <= 2500);
}

TEST_CASE("KernelCache removes damaged files and refuses bad settings", "[tuner][kernel_cache]") {
  testing::TempDir dir;
  auto cache = KernelCache::Open(dir.path(), 1 << 20);
  REQUIRE(cache.ok());
  const LaunchRecipe r = Compiled("k<3>", 64);
  (*cache)->Store(r, 13000);
  const std::string key = KernelCache::KeyOf(r, 13000);
  const std::string file = dir.path() + "/" + key.substr(0, 2) + "/" + key + ".kcubin";
  REQUIRE(std::filesystem::exists(file));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "garbage";
  }
  LaunchRecipe lookup = Uncompiled(r);
  CHECK_FALSE((*cache)->Lookup(&lookup, 13000));
  CHECK(lookup.cubin.empty());
  CHECK_FALSE(std::filesystem::exists(file));

  CHECK(KernelCache::Open(dir.path(), 0).status().code() == absl::StatusCode::kInvalidArgument);
  const std::string not_a_dir = dir.path() + "/file";
  std::ofstream(not_a_dir) << "x";
  CHECK(KernelCache::Open(not_a_dir, 100).status().code() == absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ktune
