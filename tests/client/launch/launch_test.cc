// ktune::Launcher over a fake driver: what reaches the driver for each field
// of a recipe (packed parameter bytes, launch attributes, shared memory
// limits, workspaces, TMA encodings, cuBLASLt descriptors), and the checks
// that keep a bad recipe or binding from reaching it.
#include "client/launch.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "client/launch_args.h"
#include "client/launch_validation.h"
#include "tests/client/launch/fake_launch_driver.h"

namespace ktune {
namespace {

using testing::BlasLog;
using testing::DriverLog;
using testing::NormForwardRecipe;
using testing::Tensor;

template <typename T>
T At(const std::vector<unsigned char>& bytes, size_t offset) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

void* Stream(uintptr_t v) { return reinterpret_cast<void*>(v); }

// x, w, y, rstd bound to distinct 256-byte aligned addresses.
constexpr uint64_t kX = 0x10000, kW = 0x20000, kY = 0x30000, kRstd = 0x40000;

// A recipe with one argument of each kind: tensor, i32, i64, f32, tma, i32.
v1::LaunchRecipe EveryKindRecipe() {
  v1::LaunchRecipe r;
  r.set_cubin("cubin");
  *r.add_tensors() = Tensor("a", v1::ROLE_INPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("b", v1::ROLE_INPUT, v1::BF16, 128);
  v1::KernelLaunch* k = r.add_kernels();
  k->set_lowered_name("_Z4gemmv");
  k->add_grid(132);
  k->add_block(384);
  for (const char* p : {"a", "m", "stride", "alpha", "tma_b", "n"}) k->add_params(p);
  k->add_args()->set_tensor("a");
  k->add_args()->set_i32(-7);
  k->add_args()->set_i64(int64_t{1} << 40);
  k->add_args()->set_f32(0.5f);
  v1::TmaDescriptor* t = k->add_args()->mutable_tma();
  t->set_tensor("b");
  t->set_data_type(9);
  for (uint64_t d : {4096u, 1024u}) t->add_dims(d);
  t->add_strides_bytes(8192);
  for (uint32_t b : {64u, 128u}) t->add_box(b);
  t->set_swizzle(3);
  t->set_l2_promotion(2);
  k->add_args()->set_i32(11);
  return r;
}

TEST_CASE("PackKernelArgs lays every argument kind out at its ABI offset", "[launch]") {
  const v1::LaunchRecipe r = EveryKindRecipe();
  REQUIRE(ValidateLaunchRecipe(r).ok());
  std::vector<std::pair<int, uint64_t>> encoded;
  const uint64_t addresses[] = {0x1000, 0x2000};
  absl::StatusOr<PackedArgs> p =
      PackKernelArgs(r, 0, addresses, [&](int arg, const v1::TmaDescriptor& tma, uint64_t base) {
        encoded.emplace_back(arg, base);
        CHECK(tma.SerializeAsString() == r.kernels(0).args(4).tma().SerializeAsString());
        TensorMapBytes m;
        m.bytes.fill(0x5A);
        return absl::StatusOr<TensorMapBytes>(m);
      });
  REQUIRE(p.ok());
  // pointer @0, i32 @8, i64 @16 (8-aligned), f32 @24, CUtensorMap @64 (64-aligned), i32 @192.
  CHECK(p->offsets == std::vector<uint32_t>{0, 8, 16, 24, 64, 192});
  CHECK(p->sizes == std::vector<uint32_t>{8, 4, 8, 4, 128, 4});
  REQUIRE(p->bytes.size() == 196);
  CHECK(At<uint64_t>(p->bytes, 0) == 0x1000);
  CHECK(At<int32_t>(p->bytes, 8) == -7);
  CHECK(At<uint32_t>(p->bytes, 12) == 0);  // padding is zero
  CHECK(At<int64_t>(p->bytes, 16) == int64_t{1} << 40);
  CHECK(At<float>(p->bytes, 24) == 0.5f);
  for (size_t i = 28; i < 64; ++i) CHECK(p->bytes[i] == 0);
  for (size_t i = 64; i < 192; ++i) CHECK(p->bytes[i] == 0x5A);
  CHECK(At<int32_t>(p->bytes, 192) == 11);
  CHECK(encoded == std::vector<std::pair<int, uint64_t>>{{4, 0x2000}});
  // The layout a launcher checks against the cubin is the one packed.
  const std::vector<ArgSlot> layout = KernelArgLayout(r.kernels(0));
  REQUIRE(layout.size() == p->offsets.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    CHECK(layout[i].offset == p->offsets[i]);
    CHECK(layout[i].size == p->sizes[i]);
  }
}

TEST_CASE("PackKernelArgs: an unbound optional tensor is a null pointer, a TMA descriptor needs an address",
          "[launch]") {
  v1::LaunchRecipe r = NormForwardRecipe();
  auto no_tma = [](int, const v1::TmaDescriptor&, uint64_t) -> absl::StatusOr<TensorMapBytes> {
    FAIL("no TMA argument here");
    return TensorMapBytes{};
  };
  const uint64_t addresses[] = {kX, kW, kY, 0};
  absl::StatusOr<PackedArgs> p = PackKernelArgs(r, 0, addresses, no_tma);
  REQUIRE(p.ok());
  CHECK(p->offsets == std::vector<uint32_t>{0, 8, 16, 24, 32, 36, 40});
  CHECK(At<uint64_t>(p->bytes, 16) == kY);
  CHECK(At<uint64_t>(p->bytes, 24) == 0);
  CHECK(At<int32_t>(p->bytes, 32) == 1000);
  CHECK(At<int32_t>(p->bytes, 36) == 4096);
  CHECK(At<float>(p->bytes, 40) == 1e-6f);

  v1::LaunchRecipe tma = EveryKindRecipe();
  tma.mutable_tensors(1)->set_optional(true);
  const uint64_t unbound[] = {0x1000, 0};
  absl::StatusOr<PackedArgs> q = PackKernelArgs(tma, 0, unbound, no_tma);
  CHECK(q.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(q.status().message()), Catch::Contains("kernels[0].args[4].tma") && Catch::Contains("\"b\""));
}

TEST_CASE("CheckBindings refuses a null required tensor, a misaligned address and a wrong count", "[launch]") {
  const v1::LaunchRecipe r = NormForwardRecipe();
  const uint64_t ok[] = {kX, kW, kY, kRstd};
  CHECK(CheckBindings(r, ok).ok());
  const uint64_t null_rstd[] = {kX, kW, kY, 0};
  CHECK(CheckBindings(r, null_rstd).ok());
  const uint64_t null_y[] = {kX, kW, 0, kRstd};
  absl::Status s = CheckBindings(r, null_y);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("tensors[2] (\"y\") is required"));
  const uint64_t misaligned[] = {kX, kW + 8, kY, kRstd};
  s = CheckBindings(r, misaligned);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("tensors[1] (\"w\") must be 16-byte aligned"));
  const uint64_t rstd_at_4[] = {kX, kW, kY, kRstd + 4};  // fp32: 4-byte alignment is enough
  CHECK(CheckBindings(r, rstd_at_4).ok());
  const uint64_t three[] = {kX, kW, kY};
  s = CheckBindings(r, three);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("3 addresses for the recipe's 4 tensors"));
}

TEST_CASE("ValidateLaunchRecipe names the field of every defect", "[launch]") {
  struct Case {
    const char* what;
    std::function<void(v1::LaunchRecipe*)> mutate;
    const char* field;
  };
  auto tma_arg = [](v1::LaunchRecipe* r) { return r->mutable_kernels(0)->mutable_args(4)->mutable_tma(); };
  const Case cases[] = {
      {"no cubin", [](v1::LaunchRecipe* r) { r->clear_cubin(); }, "cubin: missing"},
      {"no lowered name", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->clear_lowered_name(); },
       "kernels[0].lowered_name: missing"},
      {"no kernels", [](v1::LaunchRecipe* r) { r->clear_kernels(); }, "kernels: none"},
      {"args without params", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->clear_params(); },
       "kernels[0].args: 6 arguments for 0 params"},
      {"params without args", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->clear_args(); },
       "kernels[0].args: 0 arguments for 6 params"},
      {"arg named unlike its param", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->mutable_args(1)->set_name("k"); },
       "kernels[0].args[1].name"},
      {"arg naming an unknown tensor",
       [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->mutable_args(0)->set_tensor("q"); },
       "kernels[0].args[0].tensor: no tensor \"q\""},
      {"arg without a value", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->mutable_args(3)->clear_f32(); },
       "kernels[0].args[3]: no value"},
      {"TMA of rank 6",
       [&](v1::LaunchRecipe* r) {
         for (int i = 0; i < 4; ++i) tma_arg(r)->add_dims(2);
       },
       "kernels[0].args[4].tma.dims: rank 6"},
      {"TMA of rank 0", [&](v1::LaunchRecipe* r) { tma_arg(r)->clear_dims(); }, "kernels[0].args[4].tma.dims: rank 0"},
      {"TMA strides for another rank", [&](v1::LaunchRecipe* r) { tma_arg(r)->add_strides_bytes(64); },
       "kernels[0].args[4].tma.strides_bytes"},
      {"TMA box for another rank", [&](v1::LaunchRecipe* r) { tma_arg(r)->add_box(1); }, "kernels[0].args[4].tma.box"},
      {"TMA on an unknown tensor", [&](v1::LaunchRecipe* r) { tma_arg(r)->set_tensor("zz"); },
       "kernels[0].args[4].tma.tensor"},
      {"TMA stride not a multiple of 16", [&](v1::LaunchRecipe* r) { tma_arg(r)->set_strides_bytes(0, 8200); },
       "kernels[0].args[4].tma.strides_bytes[0]"},
      {"block of 2048 threads", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_block(0, 2048); },
       "kernels[0].block: 2048 in all"},
      {"zero grid", [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_grid(0, 0); }, "kernels[0].grid[0]"},
      {"four grid dims",
       [](v1::LaunchRecipe* r) {
         for (int i = 0; i < 3; ++i) r->mutable_kernels(0)->add_grid(1);
       },
       "kernels[0].grid: needs 1 to 3"},
      {"two tensors of one name", [](v1::LaunchRecipe* r) { r->mutable_tensors(1)->set_name("a"); },
       "tensors[1].name: \"a\" names two tensors"},
      {"alignment of 3", [](v1::LaunchRecipe* r) { r->mutable_tensors(0)->set_alignment_bytes(3); },
       "tensors[0].alignment_bytes"},
      {"two workspaces",
       [](v1::LaunchRecipe* r) {
         *r->add_tensors() = Tensor("ws1", v1::ROLE_WORKSPACE, v1::FP32, 16);
         *r->add_tensors() = Tensor("ws2", v1::ROLE_WORKSPACE, v1::FP32, 16);
       },
       "tensors[3].role: a second workspace"},
      {"workspace bigger than workspace_bytes",
       [](v1::LaunchRecipe* r) {
         v1::TensorSpec* t = r->add_tensors();
         *t = Tensor("ws", v1::ROLE_WORKSPACE, v1::FP32, 16);
         t->set_bytes(4096);
         r->set_workspace_bytes(1024);
       },
       "tensors[2].bytes"},
      {"16 TiB of workspace", [](v1::LaunchRecipe* r) { r->set_workspace_bytes(uint64_t{1} << 44); },
       "workspace_bytes"},
      {"too much dynamic shared memory",
       [](v1::LaunchRecipe* r) { r->mutable_kernels(0)->set_dynamic_smem_bytes(2u << 20); },
       "kernels[0].dynamic_smem_bytes"},
      {"a cuBLASLt algorithm of 63 bytes", [](v1::LaunchRecipe* r) { r->set_cublaslt_algo(std::string(63, 'a')); },
       "cublaslt_algo: a cuBLASLt algorithm is 64 bytes, got 63"},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      v1::LaunchRecipe r = EveryKindRecipe();
      c.mutate(&r);
      const absl::Status s = ValidateLaunchRecipe(r);
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(s.message()), Catch::Contains(c.field));

      // A Launcher refuses it before the driver sees anything.
      auto log = std::make_shared<DriverLog>();
      std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
      absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(r);
      CHECK(loaded.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(log->modules_loaded.empty());
    }
  }
}

TEST_CASE("Launcher: a load raises the shared memory limit and a launch passes what the recipe says", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  v1::LaunchRecipe r = NormForwardRecipe();
  // A second kernel, as a backward recipe's reduction: dynamic shared
  // memory, not programmatic, one argument.
  v1::KernelLaunch* k = r.add_kernels();
  k->set_lowered_name("_Z6reducev");
  for (uint32_t g : {16u, 4u, 1u}) k->add_grid(g);
  for (uint32_t b : {32u, 8u}) k->add_block(b);  // two dims: z is 1
  k->set_dynamic_smem_bytes(100 * 1024);
  testing::AddTensorArg(k, "y");

  absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(r);
  REQUIRE(loaded.ok());
  REQUIRE(log->modules_loaded == std::vector<std::string>{r.cubin()});
  CHECK(log->functions == std::vector<std::string>{"_Z11rmsnorm_fwdv", "_Z6reducev"});
  // Only the kernel with dynamic shared memory, to exactly its bytes.
  REQUIRE(log->smem_limits.size() == 1);
  CHECK(log->smem_limits[0].first == reinterpret_cast<void*>(0x9002));
  CHECK(log->smem_limits[0].second == 100 * 1024);

  const uint64_t addresses[] = {kX, kW, kY, kRstd};
  REQUIRE(launcher->Launch(**loaded, addresses, Stream(0x77)).ok());
  REQUIRE(log->launches.size() == 2);
  const DriverLog::Launch& norm = log->launches[0];
  CHECK(norm.function == reinterpret_cast<void*>(0x9001));
  CHECK(norm.grid == std::array<uint32_t, 3>{64, 1, 1});
  CHECK(norm.block == std::array<uint32_t, 3>{256, 1, 1});
  CHECK(norm.smem == 0);
  CHECK(norm.stream == Stream(0x77));
  CHECK(norm.programmatic);
  CHECK(At<uint64_t>(norm.bytes, 0) == kX);
  CHECK(At<uint64_t>(norm.bytes, 24) == kRstd);
  const DriverLog::Launch& reduce = log->launches[1];
  CHECK(reduce.function == reinterpret_cast<void*>(0x9002));
  CHECK(reduce.grid == std::array<uint32_t, 3>{16, 4, 1});
  CHECK(reduce.block == std::array<uint32_t, 3>{32, 8, 1});
  CHECK(reduce.smem == 100 * 1024);
  CHECK_FALSE(reduce.programmatic);
  CHECK(reduce.bytes.size() == 8);
  CHECK(At<uint64_t>(reduce.bytes, 0) == kY);
  // Every driver call ran in the entered context, and each entry was left.
  CHECK(log->outside_context == 0);
  CHECK(log->depth == 0);

  SECTION("a refused binding launches nothing") {
    const uint64_t null_x[] = {0, kW, kY, kRstd};
    absl::Status s = launcher->Launch(**loaded, null_x, nullptr);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(log->launches.size() == 2);
  }
}

TEST_CASE("Launcher: the same serialized bytes give the same handle, other bytes another", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  const v1::LaunchRecipe r = NormForwardRecipe();
  absl::StatusOr<const LoadedRecipe*> a = launcher->Load(r);
  absl::StatusOr<const LoadedRecipe*> b = launcher->LoadSerialized(r.SerializeAsString());
  absl::StatusOr<const LoadedRecipe*> c = launcher->Load(r);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(*a == *b);
  CHECK(*a == *c);
  CHECK(log->modules_loaded.size() == 1);
  v1::LaunchRecipe other = r;
  other.mutable_kernels(0)->mutable_args(6)->set_f32(1e-5f);  // another eps
  absl::StatusOr<const LoadedRecipe*> d = launcher->Load(other);
  REQUIRE(d.ok());
  CHECK(*d != *a);
  CHECK(log->modules_loaded.size() == 2);
  CHECK(launcher->LoadSerialized("not a recipe \xff\xff").status().code() == absl::StatusCode::kInvalidArgument);
  launcher.reset();
  CHECK(log->modules_unloaded == 2);
}

TEST_CASE("Launcher: a kernel missing from the cubin fails the load and leaves nothing loaded", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  log->fail_function = "_Z11rmsnorm_fwdv";
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(NormForwardRecipe());
  CHECK(loaded.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(loaded.status().message()), Catch::Contains("kernels[0].lowered_name \"_Z11rmsnorm_fwdv\""));
  CHECK(log->modules_unloaded == 1);
  // Not cached as a failure: the next load tries again.
  log->fail_function.clear();
  CHECK(launcher->Load(NormForwardRecipe()).ok());
  CHECK(log->modules_loaded.size() == 2);
}

TEST_CASE("Launcher: arguments that disagree with the kernel's parameters in the cubin fail the load", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  // rmsnorm_fwd(const T* x, const T* w, T* y, float* rstd, int M, int N, float eps)
  const std::vector<ArgSlot> kernel = {{0, 8}, {8, 8}, {16, 8}, {24, 8}, {32, 4}, {36, 4}, {40, 4}};
  SECTION("the same layout loads") {
    log->param_layouts["_Z11rmsnorm_fwdv"] = kernel;
    CHECK(launcher->Load(NormForwardRecipe()).ok());
  }
  SECTION("the same sizes at a bank offset load: sm_90 kernels may start their parameters past 0") {
    std::vector<ArgSlot> shifted = kernel;
    for (ArgSlot& a : shifted) a.offset += 48;
    log->param_layouts["_Z11rmsnorm_fwdv"] = shifted;
    CHECK(launcher->Load(NormForwardRecipe()).ok());
  }
  SECTION("a kernel taking N as a 64-bit integer") {
    std::vector<ArgSlot> wide = kernel;
    wide[5] = {40, 8};
    wide[6] = {48, 4};
    log->param_layouts["_Z11rmsnorm_fwdv"] = wide;
    absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(NormForwardRecipe());
    CHECK(loaded.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(loaded.status().message()),
               Catch::Contains("kernels[0].args[5] (\"N\"): 4 bytes, but the kernel's parameter 5 is 8 bytes"));
    CHECK(log->modules_unloaded == 1);
  }
  SECTION("a kernel taking one parameter fewer") {
    log->param_layouts["_Z11rmsnorm_fwdv"] = std::vector<ArgSlot>(kernel.begin(), kernel.end() - 1);
    absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(NormForwardRecipe());
    CHECK(loaded.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(loaded.status().message()),
               Catch::Contains("kernels[0].args: 7 arguments, but _Z11rmsnorm_fwdv in the cubin takes 6"));
  }
}

// A split-K-shaped recipe: a zeroed workspace the kernel takes as "counters".
v1::LaunchRecipe WorkspaceRecipe(bool zeroed) {
  v1::LaunchRecipe r = NormForwardRecipe();
  v1::TensorSpec* ws = r.add_tensors();
  *ws = Tensor("counters", v1::ROLE_WORKSPACE, v1::FP32, 256);
  ws->set_bytes(4096);
  r.set_workspace_bytes(8192);
  r.set_workspace_zeroed(zeroed);
  testing::AddTensorArg(r.mutable_kernels(0), "counters");
  return r;
}

TEST_CASE("Launcher: a released recipe is unloaded with its workspaces and loads anew", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  const v1::LaunchRecipe r = WorkspaceRecipe(true);
  absl::StatusOr<const LoadedRecipe*> a = launcher->Load(r);
  REQUIRE(a.ok());
  const uint64_t addresses[] = {kX, kW, kY, 0, 0};
  REQUIRE(launcher->Launch(**a, addresses, Stream(1)).ok());
  REQUIRE(log->allocs.size() == 1);
  launcher->Release(*a);
  CHECK(log->modules_unloaded == 1);
  CHECK(log->frees.size() == 1);
  absl::StatusOr<const LoadedRecipe*> b = launcher->Load(r);
  REQUIRE(b.ok());
  CHECK(log->modules_loaded.size() == 2);
  launcher->Release(nullptr);  // ignored
  launcher.reset();
  CHECK(log->modules_unloaded == 2);  // b, once: a is not unloaded twice
}

TEST_CASE("Launcher: one workspace per stream, allocated and zeroed once", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(WorkspaceRecipe(true));
  REQUIRE(loaded.ok());
  const uint64_t addresses[] = {kX, kW, kY, 0, 0};  // the workspace unbound: the launcher's
  for (void* stream : {Stream(1), Stream(1), Stream(2), Stream(1), Stream(2)}) {
    REQUIRE(launcher->Launch(**loaded, addresses, stream).ok());
  }
  REQUIRE(log->allocs == std::vector<uint64_t>{8192, 8192});
  REQUIRE(log->memsets.size() == 2);
  const uint64_t first = log->memsets[0].address, second = log->memsets[1].address;
  CHECK(first != second);
  CHECK(log->memsets[0].stream == Stream(1));
  CHECK(log->memsets[1].stream == Stream(2));
  for (const DriverLog::Memset& m : log->memsets) {
    CHECK(m.value == 0);
    CHECK(m.bytes == 8192);
  }
  REQUIRE(log->launches.size() == 5);
  const size_t counters = log->launches[0].offsets[7];
  const uint64_t expected[] = {first, first, second, first, second};
  for (size_t i = 0; i < 5; ++i) CHECK(At<uint64_t>(log->launches[i].bytes, counters) == expected[i]);
  launcher.reset();
  CHECK(log->frees.size() == 2);

  SECTION("a workspace the caller binds is used as it is: no allocation, no zeroing") {
    auto log3 = std::make_shared<DriverLog>();
    std::unique_ptr<Launcher> l3 = testing::FakeLauncher(log3, std::make_shared<BlasLog>());
    absl::StatusOr<const LoadedRecipe*> r3 = l3->Load(WorkspaceRecipe(true));
    REQUIRE(r3.ok());
    const uint64_t own[] = {kX, kW, kY, 0, 0xcafe00};
    REQUIRE(l3->Launch(**r3, own, Stream(1)).ok());
    CHECK(log3->allocs.empty());
    CHECK(log3->memsets.empty());
    REQUIRE(log3->launches.size() == 1);
    CHECK(At<uint64_t>(log3->launches[0].bytes, log3->launches[0].offsets[7]) == 0xcafe00);
    const uint64_t misaligned[] = {kX, kW, kY, 0, 0xcafe01};
    CHECK(l3->Launch(**r3, misaligned, Stream(1)).code() == absl::StatusCode::kInvalidArgument);
  }

  SECTION("not zeroed when the recipe does not ask") {
    auto log2 = std::make_shared<DriverLog>();
    std::unique_ptr<Launcher> l2 = testing::FakeLauncher(log2, std::make_shared<BlasLog>());
    absl::StatusOr<const LoadedRecipe*> r2 = l2->Load(WorkspaceRecipe(false));
    REQUIRE(r2.ok());
    REQUIRE(l2->Launch(**r2, addresses, Stream(1)).ok());
    CHECK(log2->allocs.size() == 1);
    CHECK(log2->memsets.empty());
  }
}

TEST_CASE("Launcher: TMA descriptors are encoded from the recipe's fields, once per base address", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  const v1::LaunchRecipe r = EveryKindRecipe();
  absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(r);
  REQUIRE(loaded.ok());
  const uint64_t one[] = {0x1000, 0x80000};
  const uint64_t other[] = {0x1000, 0x90000};
  for (const uint64_t* a : {one, one, other, one}) {
    REQUIRE(launcher->Launch(**loaded, absl::MakeConstSpan(a, 2), nullptr).ok());
  }
  REQUIRE(log->encodes.size() == 2);
  CHECK(log->encodes[0].base == 0x80000);
  CHECK(log->encodes[1].base == 0x90000);
  const v1::TmaDescriptor& t = log->encodes[0].tma;
  CHECK(t.data_type() == 9);
  CHECK(std::vector<uint64_t>(t.dims().begin(), t.dims().end()) == std::vector<uint64_t>{4096, 1024});
  CHECK(std::vector<uint64_t>(t.strides_bytes().begin(), t.strides_bytes().end()) == std::vector<uint64_t>{8192});
  CHECK(std::vector<uint32_t>(t.box().begin(), t.box().end()) == std::vector<uint32_t>{64, 128});
  CHECK(t.swizzle() == 3);
  CHECK(t.l2_promotion() == 2);
  // Each launch carries the descriptor of its own base, at offset 64.
  REQUIRE(log->launches.size() == 4);
  const uint64_t bases[] = {0x80000, 0x80000, 0x90000, 0x80000};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(log->launches[i].offsets[4] == 64);
    CHECK(At<uint64_t>(log->launches[i].bytes, 64) == bases[i]);
    CHECK(At<uint64_t>(log->launches[i].bytes, 72) == 4096);
  }
}

TEST_CASE("Launcher: a recipe runs only on the launcher that loaded it", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> a = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  std::unique_ptr<Launcher> b = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  absl::StatusOr<const LoadedRecipe*> loaded = a->Load(NormForwardRecipe());
  REQUIRE(loaded.ok());
  const uint64_t addresses[] = {kX, kW, kY, kRstd};
  CHECK(b->Launch(**loaded, addresses, nullptr).code() == absl::StatusCode::kInvalidArgument);
  CHECK(log->launches.empty());
}

TEST_CASE("Launcher: concurrent launches on distinct streams get a workspace each", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, std::make_shared<BlasLog>());
  absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(WorkspaceRecipe(true));
  REQUIRE(loaded.ok());
  const uint64_t addresses[] = {kX, kW, kY, kRstd, 0};
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (uintptr_t t = 1; t <= 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        if (!launcher->Launch(**loaded, addresses, Stream(t)).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(log->launches.size() == 200);
  CHECK(log->allocs.size() == 4);
  CHECK(log->memsets.size() == 4);
  CHECK(log->depth == 0);
}

// D[M, N] = A[M, K] x B[N, K]^T + bias as one cuBLASLt call, in cuBLASLt's
// column-major terms: its first operand is B (K x N, transposed), its second
// A (K x M); C is optional.
v1::LaunchRecipe CublasLtRecipe() {
  constexpr uint64_t m = 128, n = 256, k = 64;
  v1::LaunchRecipe r;
  r.set_template_id("cublaslt");
  std::string algo(64, '\0');
  for (int i = 0; i < 64; ++i) algo[i] = static_cast<char>(i * 3);
  r.set_cublaslt_algo(algo);
  r.set_workspace_bytes(1 << 20);
  *r.add_tensors() = Tensor("a", v1::ROLE_INPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("b", v1::ROLE_INPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("c", v1::ROLE_INPUT, v1::BF16, 16, /*optional=*/true);
  *r.add_tensors() = Tensor("d", v1::ROLE_OUTPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("bias", v1::ROLE_INPUT, v1::BF16, 16);
  *r.add_tensors() = Tensor("workspace", v1::ROLE_WORKSPACE, v1::DTYPE_UNSPECIFIED, 256);
  v1::CublasLtCall* c = r.mutable_cublaslt_call();
  c->set_compute_type(68);  // CUBLAS_COMPUTE_32F
  c->set_scale_type(0);     // CUDA_R_32F
  c->set_trans_a(1);        // CUBLAS_OP_T
  c->set_trans_b(0);
  c->set_epilogue(4);  // CUBLASLT_EPILOGUE_BIAS
  auto matrix = [](v1::CublasLtCall::Matrix* x, const char* tensor, uint64_t rows, uint64_t cols) {
    x->set_tensor(tensor);
    x->set_data_type(14);  // CUDA_R_16BF
    x->set_rows(rows);
    x->set_cols(cols);
    x->set_ld(static_cast<int64_t>(rows));
  };
  matrix(c->mutable_a(), "b", k, n);
  matrix(c->mutable_b(), "a", k, m);
  matrix(c->mutable_c(), "c", n, m);
  matrix(c->mutable_d(), "d", n, m);
  c->set_alpha(1.5f);
  c->set_beta(1.0f);
  c->set_bias("bias");
  return r;
}

TEST_CASE("Launcher: a cuBLASLt recipe is one cublasLtMatmul with the layouts its call describes", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  auto blas = std::make_shared<BlasLog>();
  std::unique_ptr<Launcher> launcher = testing::FakeLauncher(log, blas);
  const v1::LaunchRecipe r = CublasLtRecipe();
  absl::StatusOr<const LoadedRecipe*> loaded = launcher->Load(r);
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  CHECK(blas->opened == 1);
  CHECK(log->modules_loaded.empty());
  REQUIRE(blas->descs == std::vector<std::pair<uint32_t, uint32_t>>{{68, 0}});
  CHECK(blas->DescAttribute<int32_t>(3) == 1);    // CUBLASLT_MATMUL_DESC_TRANSA: CUBLAS_OP_T
  CHECK(blas->DescAttribute<int32_t>(4) == 0);    // TRANSB
  CHECK(blas->DescAttribute<uint32_t>(7) == 4);   // EPILOGUE: BIAS
  CHECK(blas->DescAttribute<int32_t>(26) == 14);  // BIAS_DATA_TYPE: the bias tensor's bf16
  REQUIRE(blas->layouts.size() == 4);             // a, b, c, d
  const uint64_t rows[] = {64, 64, 256, 256}, cols[] = {256, 128, 128, 128};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(blas->layouts[i].type == 14);
    CHECK(blas->layouts[i].rows == rows[i]);
    CHECK(blas->layouts[i].cols == cols[i]);
    CHECK(blas->layouts[i].ld == static_cast<int64_t>(rows[i]));
  }
  CHECK(blas->layout_attributes.empty());  // batch 0: no batch attributes

  constexpr uint64_t kA = 0x100000, kB = 0x200000, kC = 0x300000, kD = 0x400000, kBias = 0x500000;
  const uint64_t with_c[] = {kA, kB, kC, kD, kBias, 0};
  REQUIRE(launcher->Launch(**loaded, with_c, Stream(5)).ok());
  const uint64_t without_c[] = {kA, kB, 0, kD, kBias, 0};
  REQUIRE(launcher->Launch(**loaded, without_c, Stream(5)).ok());
  REQUIRE(blas->matmuls.size() == 2);
  const MatmulCall& m = blas->matmuls[0];
  CHECK(m.a == kB);  // cuBLASLt's first operand is the tensor its call names: ktune's B
  CHECK(m.b == kA);
  CHECK(m.c == kC);
  CHECK(m.d == kD);
  CHECK(m.a_layout == blas->layouts[0].handle);
  CHECK(m.b_layout == blas->layouts[1].handle);
  CHECK(m.c_layout == blas->layouts[2].handle);
  CHECK(m.d_layout == blas->layouts[3].handle);
  CHECK(m.alpha == 1.5f);
  CHECK(m.beta == 1.0f);
  CHECK(m.stream == Stream(5));
  CHECK(m.workspace_bytes == 1 << 20);
  REQUIRE(log->allocs == std::vector<uint64_t>{1 << 20});  // one workspace for the stream
  CHECK(m.workspace != 0);
  CHECK(blas->matmul_algos[0] == r.cublaslt_algo());
  CHECK(blas->DescAttribute<uint64_t>(8) == kBias);  // BIAS_POINTER, set at the launch
  // Without C: D doubles as C, with beta 0.
  const MatmulCall& n = blas->matmuls[1];
  CHECK(n.c == kD);
  CHECK(n.c_layout == blas->layouts[3].handle);
  CHECK(n.beta == 0.0f);
  CHECK(n.workspace == m.workspace);
  CHECK(log->outside_context == 0);

  SECTION("batched matrices carry their count and stride; a second recipe reuses the library") {
    v1::LaunchRecipe batched = CublasLtRecipe();
    for (v1::CublasLtCall::Matrix* x :
         {batched.mutable_cublaslt_call()->mutable_a(), batched.mutable_cublaslt_call()->mutable_d()}) {
      x->set_batch(3);
      x->set_batch_stride(1 << 16);
    }
    REQUIRE(launcher->Load(batched).ok());
    CHECK(blas->opened == 1);
    REQUIRE(blas->layout_attributes.size() == 4);  // count and stride of a and d
    CHECK(blas->layout_attributes[0].object == blas->layouts[4].handle);
    CHECK(blas->layout_attributes[0].attribute == 5);  // BATCH_COUNT
    CHECK(At<int32_t>(blas->layout_attributes[0].value, 0) == 3);
    CHECK(blas->layout_attributes[1].attribute == 6);  // STRIDED_BATCH_OFFSET
    CHECK(At<int64_t>(blas->layout_attributes[1].value, 0) == 1 << 16);
    CHECK(blas->layout_attributes[2].object == blas->layouts[7].handle);
  }
  SECTION("fp8 scales are set as pointers at each launch") {
    v1::LaunchRecipe fp8 = CublasLtRecipe();
    *fp8.add_tensors() = Tensor("a_scale", v1::ROLE_SCALE, v1::FP32, 4);
    fp8.mutable_cublaslt_call()->set_a_scale("a_scale");
    absl::StatusOr<const LoadedRecipe*> f = launcher->Load(fp8);
    REQUIRE(f.ok());
    const uint64_t addresses[] = {kA, kB, 0, kD, kBias, 0, 0x600000};
    REQUIRE(launcher->Launch(**f, addresses, nullptr).ok());
    CHECK(blas->DescAttribute<uint64_t>(17) == 0x600000);  // A_SCALE_POINTER
    CHECK_FALSE(blas->HasDescAttribute(18));               // no B scale named
  }
  launcher.reset();
  CHECK(blas->destroyed >= 5);  // the descriptor and its four layouts
}

TEST_CASE("Launcher: without cuBLASLt a cuBLASLt recipe fails to load, kernel recipes still do", "[launch]") {
  auto log = std::make_shared<DriverLog>();
  std::unique_ptr<Launcher> launcher = Launcher::Create(
      std::make_unique<testing::FakeLaunchDriver>(log), []() -> absl::StatusOr<std::unique_ptr<CublasLtApi>> {
        return absl::FailedPreconditionError("cuBLASLt recipes need libcublasLt.so.13");
      });
  CHECK(launcher->Load(CublasLtRecipe()).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(launcher->Load(NormForwardRecipe()).ok());
}

}  // namespace
}  // namespace ktune
