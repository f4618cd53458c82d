// Invariants of the recipes' interface (tuner/core/launch_recipe.h) over every
// family's real recipe writers: each argument is typed as its kernel
// parameter is declared in the embedded template, valued as the problem says,
// and names a tensor whose layout contract is self-consistent; TMA
// descriptors and cuBLASLt calls agree with the tensors they name. What a
// generic launcher (client/launch.h) relies on to launch a recipe from its
// fields alone.
#include "tuner/core/recipe_interface.h"

#include <cublasLt.h>
#include <cuda.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/cache/current_entries.h"
#include "tests/tuner/gemm_test_problems.h"
#include "tuner/builtin_ops.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/norm/norm_space.h"

namespace ktune {
namespace {

// One parameter of a kernel entry point as the template declares it.
struct DeclaredParam {
  enum Kind { kPointer, kInt, kLongLong, kFloat, kTma } kind;
  bool is_const = false;  // pointers: to const
  std::string name;
};

// The parameters of the __global__ function `kernel` in the template's text
// (the top-level file or one it includes). Empty if not found.
std::vector<DeclaredParam> DeclaredParams(const std::string& template_id, const std::string& kernel) {
  absl::StatusOr<const KernelSource*> source = FindKernelSource(template_id);
  REQUIRE(source.ok());
  std::vector<const std::string*> texts = {&(*source)->text};
  for (const std::string& t : (*source)->header_texts) texts.push_back(&t);
  const std::regex name_open("\\b" + kernel + "\\s*\\(");
  for (const std::string* text : texts) {
    for (size_t at = text->find("__global__"); at != std::string::npos; at = text->find("__global__", at + 1)) {
      const size_t body = text->find('{', at);
      const std::string head = text->substr(at, body - at);
      std::smatch m;
      if (!std::regex_search(head, m, name_open)) continue;
      const size_t open = m.position(0) + m.length(0);
      const std::string list = head.substr(open, head.rfind(')') - open);
      std::vector<DeclaredParam> out;
      for (const std::string& piece : std::vector<std::string>(absl::StrSplit(list, ','))) {
        std::string p = piece;
        p = std::regex_replace(p, std::regex("\\s+"), " ");
        DeclaredParam d;
        d.name = std::regex_replace(p, std::regex("^.*[ *](\\w+) ?$"), "$1");
        if (p.find('*') != std::string::npos) {
          d.kind = DeclaredParam::kPointer;
          d.is_const = p.find("const ") != std::string::npos;
        } else if (p.find("TmaDescriptor") != std::string::npos) {
          d.kind = DeclaredParam::kTma;
        } else if (p.find("long long") != std::string::npos || p.find("int64_t") != std::string::npos) {
          d.kind = DeclaredParam::kLongLong;
        } else if (std::regex_search(p, std::regex("\\bint\\b"))) {
          d.kind = DeclaredParam::kInt;
        } else if (std::regex_search(p, std::regex("\\bfloat\\b"))) {
          d.kind = DeclaredParam::kFloat;
        } else {
          FAIL("parameter of unknown type: " << p);
        }
        out.push_back(d);
      }
      return out;
    }
  }
  return {};
}

// "ktune::rmsnorm_fwd<ktune::bf16, ...>" -> "rmsnorm_fwd".
std::string KernelName(const std::string& name_expression) {
  const std::string head = name_expression.substr(0, name_expression.find('<'));
  return head.substr(head.rfind(':') + 1);
}

const v1::TensorSpec* FindSpec(const LaunchRecipe& r, const std::string& name) {
  for (const v1::TensorSpec& t : r.tensors) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

int64_t Elements(const v1::TensorSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  return n;
}

// What the problem says each scalar is.
struct Expected {
  std::map<std::string, int32_t> i32;
  std::map<std::string, float> f32;
  bool swapped = false;  // wgmma's swap_ab: the kernel's M and N are the problem's N and M
};

// Every invariant of one recipe's interface that needs no GPU.
void CheckInterface(const LaunchRecipe& r, const Expected& want) {
  INFO(r.template_id << " " << (r.kernels.empty() ? std::string("cublaslt") : r.kernels[0].name_expression));
  // Tensor specs: unique names, contiguous strides, bytes from the shape,
  // absent ones optional and empty; exactly one workspace iff one is needed.
  std::set<std::string> names;
  int workspaces = 0;
  for (const v1::TensorSpec& t : r.tensors) {
    INFO("tensor " << t.ShortDebugString());
    CHECK(names.insert(t.name()).second);
    CHECK(t.role() != v1::ROLE_UNSPECIFIED);
    REQUIRE(t.strides_size() == t.shape_size());
    int64_t step = 1;
    for (int i = t.shape_size() - 1; i >= 0; --i) {
      CHECK(t.strides(i) == step);
      step *= t.shape(i);
    }
    CHECK(t.bytes() == static_cast<uint64_t>(Elements(t) * ElementBytes(t.dtype())));
    CHECK(t.alignment_bytes() >= 1);
    CHECK((t.alignment_bytes() & (t.alignment_bytes() - 1)) == 0);
    if (t.bytes() == 0) CHECK(t.optional());
    if (t.role() == v1::ROLE_WORKSPACE) {
      ++workspaces;
      CHECK(t.bytes() == r.workspace_bytes);
      CHECK_FALSE(t.optional());
    }
  }
  CHECK(workspaces == (r.workspace_bytes > 0 ? 1 : 0));

  std::set<std::string> used;
  for (const KernelLaunch& k : r.kernels) {
    INFO(k.name_expression);
    REQUIRE(k.args.size() == k.params.size());
    // Parsed once per entry point: the texts are long and the recipes many.
    static std::map<std::pair<std::string, std::string>, std::vector<DeclaredParam>> parsed;
    const std::pair<std::string, std::string> key{r.template_id, KernelName(k.name_expression)};
    if (parsed.count(key) == 0) parsed[key] = DeclaredParams(key.first, key.second);
    const std::vector<DeclaredParam>& declared = parsed[key];
    REQUIRE(declared.size() == k.params.size());
    for (size_t i = 0; i < k.args.size(); ++i) {
      const v1::KernelArg& a = k.args[i];
      const DeclaredParam& d = declared[i];
      INFO("arg " << i << ": " << a.ShortDebugString() << " declared " << d.name);
      CHECK(a.name() == k.params[i]);
      const std::string param = k.params[i].substr(0, k.params[i].find(':'));
      if (!want.swapped) CHECK(d.name == param);
      switch (a.value_case()) {
        case v1::KernelArg::kTensor: {
          REQUIRE(d.kind == DeclaredParam::kPointer);
          const v1::TensorSpec* t = FindSpec(r, a.tensor());
          REQUIRE(t != nullptr);
          used.insert(t->name());
          // A const pointer is only read; the rest are written (the
          // workspace: written by one kernel, read by the next).
          const bool read_only = t->role() == v1::ROLE_INPUT || t->role() == v1::ROLE_SCALE;
          if (t->role() != v1::ROLE_WORKSPACE) CHECK(d.is_const == read_only);
          break;
        }
        case v1::KernelArg::kI32:
          CHECK(d.kind == DeclaredParam::kInt);
          REQUIRE(want.i32.count(a.name()) == 1);
          CHECK(a.i32() == want.i32.at(a.name()));
          break;
        case v1::KernelArg::kI64:
          CHECK(d.kind == DeclaredParam::kLongLong);
          break;
        case v1::KernelArg::kF32:
          CHECK(d.kind == DeclaredParam::kFloat);
          REQUIRE(want.f32.count(a.name()) == 1);
          CHECK(a.f32() == want.f32.at(a.name()));
          break;
        case v1::KernelArg::kTma: {
          CHECK(d.kind == DeclaredParam::kTma);
          const v1::TmaDescriptor& m = a.tma();
          const v1::TensorSpec* t = FindSpec(r, m.tensor());
          REQUIRE(t != nullptr);
          used.insert(t->name());
          CHECK(a.name().rfind(absl::StrCat("tma_", m.tensor(), ":"), 0) == 0);
          CHECK_FALSE(t->optional());
          CHECK(t->role() == v1::ROLE_INPUT);
          // Dims innermost first, a batch of one where the tensor has none.
          const int rank = t->shape_size();
          REQUIRE((rank == 2 || rank == 3));
          const int64_t e = ElementBytes(t->dtype());
          CHECK(m.data_type() ==
                (t->dtype() == v1::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8));
          CHECK((t->dtype() == v1::BF16 || t->dtype() == v1::FP8_E4M3));
          REQUIRE(m.dims_size() == 3);
          CHECK(m.dims(0) == static_cast<uint64_t>(t->shape(rank - 1)));
          CHECK(m.dims(1) == static_cast<uint64_t>(t->shape(rank - 2)));
          CHECK(m.dims(2) == static_cast<uint64_t>(rank == 3 ? t->shape(0) : 1));
          REQUIRE(m.strides_bytes_size() == 2);
          CHECK(m.strides_bytes(0) == static_cast<uint64_t>(t->strides(rank - 2) * e));
          CHECK(m.strides_bytes(1) == static_cast<uint64_t>(t->shape(rank - 2) * t->strides(rank - 2) * e));
          REQUIRE(m.box_size() == 3);
          CHECK(m.box(0) * e == 128);  // one 128-byte swizzled row
          CHECK(m.box(1) >= 1);
          CHECK(m.box(1) <= 256);
          CHECK(m.box(2) == 1);
          CHECK(std::vector<uint32_t>(m.element_strides().begin(), m.element_strides().end()) ==
                std::vector<uint32_t>{1, 1, 1});
          CHECK(m.swizzle() == CU_TENSOR_MAP_SWIZZLE_128B);
          CHECK(m.l2_promotion() == CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
          CHECK(m.interleave() == CU_TENSOR_MAP_INTERLEAVE_NONE);
          CHECK(m.oob_fill() == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
          CHECK(t->alignment_bytes() % 16 == 0);  // TMA's global address rule
          break;
        }
        case v1::KernelArg::VALUE_NOT_SET:
          FAIL("an argument without a value");
      }
    }
  }
  if (r.is_cublaslt_call()) {
    const v1::CublasLtCall& c = r.cublaslt_call;
    for (const v1::CublasLtCall::Matrix* m : {&c.a(), &c.b(), &c.c(), &c.d()}) {
      if (m->tensor().empty()) continue;
      const v1::TensorSpec* t = FindSpec(r, m->tensor());
      REQUIRE(t != nullptr);
      used.insert(t->name());
      CHECK(m->rows() * m->cols() * static_cast<uint64_t>(m->batch()) == static_cast<uint64_t>(Elements(*t)));
      CHECK(m->ld() == static_cast<int64_t>(m->rows()));
      CHECK(m->batch_stride() == static_cast<int64_t>(m->rows() * m->cols()));
      const cudaDataType_t type = t->dtype() == v1::FP32       ? CUDA_R_32F
                                  : t->dtype() == v1::FP8_E4M3 ? CUDA_R_8F_E4M3
                                                               : CUDA_R_16BF;
      CHECK(m->data_type() == static_cast<uint32_t>(type));
      CHECK(t->alignment_bytes() == 256);
    }
    for (const std::string& name : {c.bias(), c.a_scale(), c.b_scale()}) {
      if (name.empty()) continue;
      REQUIRE(FindSpec(r, name) != nullptr);
      used.insert(name);
    }
    if (r.workspace_bytes > 0) used.insert("ws");
  }
  // Nothing listed that nothing takes.
  for (const v1::TensorSpec& t : r.tensors) CHECK(used.count(t.name()) == 1);
}

Expected NormExpected(const NormProblem& p, const NormConfig& c) {
  Expected e;
  e.i32 = {{"M", static_cast<int32_t>(p.m)}, {"N", static_cast<int32_t>(p.n)}};
  if (c.split_size > 0) {
    const int64_t ctas = (p.m + c.split_size - 1) / c.split_size;
    const int cluster = std::max(c.cluster, 1);
    e.i32["P"] = static_cast<int32_t>((ctas + cluster - 1) / cluster);
  }
  e.f32 = {{"eps", p.eps}};
  return e;
}

TEST_CASE("every norm recipe describes its arguments and tensors", "[tuner][norm][recipe]") {
  const DeviceInfo d = CompileOnlyTarget();
  int recipes = 0, with_workspace = 0, clusters = 0, optional_stats = 0;
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) {
      for (DType dtype : {DType::kBF16, DType::kFP16, DType::kFP32}) {
        for (int variant = 0; variant < 4; ++variant) {
          NormProblem p;
          p.op = op;
          p.pass = pass;
          p.input_dtype = p.output_dtype = p.weight_dtype = dtype;
          p.has_weight = variant != 1;
          p.has_bias = op == NormOp::kLayerNorm && variant >= 2;
          if (variant == 3) p.weight_dtype = DType::kFP32;
          p.eps = 1e-5f;
          for (auto [m, n] : {std::pair<int64_t, int64_t>{4096, 4096}, {5000, 2048}, {3, 1000}, {1024, 16384}}) {
            p.m = m;
            p.n = n;
            INFO(CanonicalKey(p));
            std::vector<NormConfig> space = NormSearchSpace(p, d);
            if (pass == NormPass::kBackward && m == 5000) {
              // Clusters are in the unpruned space only.
              for (const NormConfig& c : NormSearchSpace(p, d, SpaceOptions{false})) {
                if (c.cluster > 1) space.push_back(c);
              }
            }
            for (const NormConfig& c : space) {
              INFO(ToString(c));
              absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, d);
              REQUIRE(r.ok());
              CheckInterface(*r, NormExpected(p, c));
              ++recipes;
              with_workspace += r->workspace_bytes > 0;
              clusters += c.cluster > 1;
              for (const v1::TensorSpec& t : r->tensors) optional_stats += t.name() == "rstd" && t.optional();
            }
          }
        }
      }
    }
  }
  std::printf("checked the interface of %d norm recipes\n", recipes);
  CHECK(with_workspace > 0);
  CHECK(clusters > 0);
  CHECK(optional_stats > 0);
}

TEST_CASE("a norm recipe's tensors say what the problem has", "[tuner][norm][recipe]") {
  const DeviceInfo d = CompileOnlyTarget();
  NormProblem p;
  p.op = NormOp::kLayerNorm;
  p.pass = NormPass::kBackward;
  p.m = 5000;
  p.n = 2048;
  p.input_dtype = DType::kFP16;
  p.output_dtype = DType::kBF16;
  p.weight_dtype = DType::kFP32;
  p.has_weight = false;
  p.has_bias = true;
  const NormConfig c = HeuristicNormConfig(p, d);
  absl::StatusOr<LaunchRecipe> r = NormLaunchRecipe(p, c, d);
  REQUIRE(r.ok());
  REQUIRE(r->kernels.size() == 2);
  auto spec = [&](const char* name) {
    const v1::TensorSpec* t = FindSpec(*r, name);
    REQUIRE(t != nullptr);
    return *t;
  };
  CHECK(spec("x").dtype() == v1::FP16);
  const v1::TensorSpec x = spec("x");
  CHECK(std::vector<int64_t>(x.shape().begin(), x.shape().end()) == std::vector<int64_t>{5000, 2048});
  CHECK(spec("dx").dtype() == v1::BF16);
  CHECK(spec("dx").role() == v1::ROLE_OUTPUT);
  CHECK(spec("mean").role() == v1::ROLE_INPUT);  // the forward's statistics, required
  CHECK_FALSE(spec("mean").optional());
  CHECK(spec("w").optional());  // no weight: absent
  CHECK(spec("w").bytes() == 0);
  CHECK(spec("dw").optional());
  CHECK(spec("db").dtype() == v1::FP32);  // the weight dtype
  CHECK_FALSE(spec("db").optional());
  // One part (db) of P partial rows.
  const v1::TensorSpec ws = spec("ws");
  CHECK(ws.role() == v1::ROLE_WORKSPACE);
  CHECK(ws.shape(0) == 1);
  CHECK(ws.shape(2) == 2048);
  CHECK(r->kernels[1].args[3].i32() == ws.shape(1));  // the reduce kernel's P
}

// Every GEMM recipe of every source for `p`, each checked; counts what it saw.
struct GemmCounts {
  int recipes = 0, split = 0, swapped = 0, tail = 0, fp8 = 0, tma = 0, cublaslt = 0, skinny = 0, mma = 0;
};

void CheckGemmProblem(const v1::GemmProblem& p, GemmCounts* n) {
  INFO(GemmCanonicalKey(p));
  const DeviceInfo d = CompileOnlyTarget();
  Expected e;
  e.i32 = {{"M", static_cast<int32_t>(p.m())}, {"N", static_cast<int32_t>(p.n())}, {"K", static_cast<int32_t>(p.k())}};
  e.f32 = {{"alpha", 1.0f}, {"beta", 1.0f}};
  auto count = [&](const LaunchRecipe& r) {
    ++n->recipes;
    n->split += r.workspace_bytes > 0;
    n->fp8 += GemmIsFp8(p);
    for (const v1::KernelArg& a : r.kernels.empty() ? std::vector<v1::KernelArg>{} : r.kernels[0].args) {
      n->tma += a.has_tma();
    }
  };
  for (const GemmTileConfig& c : GemmSearchSpace(p, d)) {
    absl::StatusOr<LaunchRecipe> r = GemmLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    CheckInterface(*r, e);
    count(*r);
    ++n->mma;
  }
  for (const WgmmaTileConfig& c : WgmmaSearchSpace(p, d)) {
    INFO(ToString(c));
    absl::StatusOr<LaunchRecipe> r = WgmmaLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    Expected swapped = e;
    swapped.swapped = c.swap_ab;
    CheckInterface(*r, swapped);
    count(*r);
    n->swapped += c.swap_ab;
    n->tail += c.tail_split > 1;
  }
  for (const SkinnyConfig& c : SkinnySearchSpace(p, d)) {
    absl::StatusOr<LaunchRecipe> r = SkinnyLaunchRecipe(p, c, d);
    REQUIRE(r.ok());
    CheckInterface(*r, e);
    count(*r);
    ++n->skinny;
  }
  if (CublasLtCanServe(p).ok()) {
    for (uint64_t workspace : {uint64_t{0}, uint64_t{1} << 20}) {
      absl::StatusOr<LaunchRecipe> r =
          BuiltinOps().TemplateRecipe(testutil::GemmProblemOf(p), testutil::CublasLtConfig(workspace), d);
      REQUIRE(r.ok());
      CheckInterface(*r, e);
      count(*r);
      ++n->cublaslt;
    }
  }
}

TEST_CASE("every GEMM recipe describes its arguments and tensors", "[tuner][gemm][recipe]") {
  GemmCounts n;
  for (const v1::GemmProblem& p :
       {LinearGemm(2048, 4096, 4096), LinearGemm(16, 4096, 4096), LinearGemm(1, 4096, 4096), LinearGemm(512, 512, 512),
        LinearGemm(4096, 4096, 4096, v1::EPILOGUE_BIAS),
        LinearGemm(1000, 2048, 1024, v1::EPILOGUE_RESIDUAL_ADD, v1::BF16),
        LinearGemm(256, 1024, 4096, v1::EPILOGUE_BIAS_GELU, v1::DTYPE_UNSPECIFIED, v1::FP32),
        LinearGemm(128, 1024, 512, v1::EPILOGUE_NONE, v1::DTYPE_UNSPECIFIED, v1::BF16, 3),
        TestGemm(1024, 2048, 1024, v1::ROW_MAJOR), TestGemm(8, 2048, 1024, v1::ROW_MAJOR, v1::EPILOGUE_BIAS_SILU),
        Fp8Gemm(128, 4096, 14336), Fp8Gemm(2048, 4096, 14336), Fp8Gemm(4096, 4096, 4096, v1::EPILOGUE_BIAS),
        Fp8Gemm(4, 4096, 4096)}) {
    CheckGemmProblem(p, &n);
  }
  std::printf("checked the interface of %d GEMM recipes\n", n.recipes);
  CHECK(n.mma > 0);
  CHECK(n.skinny > 0);
  CHECK(n.cublaslt > 0);
  CHECK(n.split > 0);
  CHECK(n.swapped > 0);
  CHECK(n.tail > 0);
  CHECK(n.fp8 > 0);
  CHECK(n.tma > 0);
}

TEST_CASE("a cuBLASLt recipe's call is the runner's: B first, scales swapped, D as C without one",
          "[tuner][gemm][recipe][cublaslt]") {
  const DeviceInfo d = CompileOnlyTarget();
  const v1::GemmProblem fp8 = Fp8Gemm(128, 4096, 2048, v1::EPILOGUE_BIAS);
  absl::StatusOr<LaunchRecipe> r =
      BuiltinOps().TemplateRecipe(testutil::GemmProblemOf(fp8), testutil::CublasLtConfig(1 << 20), d);
  REQUIRE(r.ok());
  const v1::CublasLtCall& c = r->cublaslt_call;
  CHECK(c.a().tensor() == "b");
  CHECK(c.trans_a() == CUBLAS_OP_T);  // ktune's B is [N, K]
  CHECK(c.a().rows() == 2048);        // column-major K x N
  CHECK(c.a().cols() == 4096);
  CHECK(c.b().tensor() == "a");
  CHECK(c.b().cols() == 128);
  CHECK(c.a_scale() == "b_scale");
  CHECK(c.b_scale() == "a_scale");
  CHECK(c.bias() == "bias");
  CHECK(c.epilogue() == CUBLASLT_EPILOGUE_BIAS);
  CHECK_FALSE(c.has_c());
  CHECK(c.beta() == 0.0f);
  CHECK(FindSpec(*r, "c") == nullptr);
  CHECK(FindSpec(*r, "a_scale")->role() == v1::ROLE_SCALE);
  CHECK(FindSpec(*r, "ws")->bytes() == (1u << 20));

  const v1::GemmProblem residual =
      TestGemm(64, 256, 128, v1::ROW_MAJOR, v1::EPILOGUE_RESIDUAL_ADD, v1::FP32, v1::FP32, 2);
  r = BuiltinOps().TemplateRecipe(testutil::GemmProblemOf(residual), testutil::CublasLtConfig(0), d);
  REQUIRE(r.ok());
  CHECK(r->cublaslt_call.trans_a() == CUBLAS_OP_N);  // [K, N] is column-major N x K
  CHECK(r->cublaslt_call.a().rows() == 256);
  CHECK(r->cublaslt_call.c().tensor() == "c");
  CHECK(r->cublaslt_call.beta() == 1.0f);
  CHECK(r->cublaslt_call.d().batch() == 2);
  CHECK(r->cublaslt_call.d().data_type() == CUDA_R_32F);
  CHECK(FindSpec(*r, "ws") == nullptr);
  CHECK(r->cublaslt_call.a_scale().empty());
}

}  // namespace
}  // namespace ktune
