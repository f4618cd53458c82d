#include "tuner/gpu/cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/sha256.h"

namespace ktune {

// Entry points, resolved by name from the library (the header supplies only
// their types: ktune never links libcublasLt).
#define KTUNE_LT_FUNCTIONS(X)             \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusName)                \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)     \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulAlgoCheck)              \
  X(cublasLtMatmulAlgoCapGetAttribute)    \
  X(cublasLtMatmulAlgoConfigGetAttribute) \
  X(cublasLtMatmulAlgoConfigSetAttribute) \
  X(cublasLtMatmul)

struct CublasLt::Api {
#define KTUNE_LT_MEMBER(f) decltype(&::f) f = nullptr;
  KTUNE_LT_FUNCTIONS(KTUNE_LT_MEMBER)
#undef KTUNE_LT_MEMBER
};

namespace {

constexpr const char* kLibraries[] = {"libcublasLt.so.13", "libcublasLt.so"};
static_assert(sizeof(cublasLtMatmulAlgo_t) == 64, "the stored algorithm is 64 bytes");

cudaDataType_t CudaType(v1::DType d) {
  switch (d) {
    case v1::FP32:
      return CUDA_R_32F;
    case v1::FP8_E4M3:
      return CUDA_R_8F_E4M3;
    default:
      return CUDA_R_16BF;
  }
}

}  // namespace

// The descriptors of one problem, destroyed together.
class CublasLt::Descriptors {
 public:
  explicit Descriptors(const CublasLt::Api* api) : api_(api) {}
  ~Descriptors() {
    if (op_ != nullptr) api_->cublasLtMatmulDescDestroy(op_);
    for (cublasLtMatrixLayout_t l : {a_, b_, c_, d_}) {
      if (l != nullptr) api_->cublasLtMatrixLayoutDestroy(l);
    }
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cublasLtMatmulDesc_t op_ = nullptr;
  // cuBLASLt's operands: its A is ktune's B, its B is ktune's A (see the header).
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr, d_ = nullptr;

 private:
  const CublasLt::Api* api_;
};

LaunchRecipe CublasLtRecipe(const CublasLtAlgo& algo, uint64_t version) {
  LaunchRecipe r;
  r.template_id = kCublasLtTemplateId;
  r.template_hash = Sha256Hex(absl::StrCat("cublaslt-", version));
  r.cublaslt_algo = algo.data;
  r.workspace_bytes = algo.workspace_bytes;
  return r;
}

v1::CublasLtCall CublasLtCallFor(const v1::GemmProblem& p) {
  v1::CublasLtCall call;
  call.set_compute_type(CUBLAS_COMPUTE_32F);
  call.set_scale_type(CUDA_R_32F);
  call.set_trans_a(GemmBIsNK(p) ? CUBLAS_OP_T : CUBLAS_OP_N);  // ktune's B
  call.set_trans_b(CUBLAS_OP_N);                               // ktune's A
  call.set_epilogue(p.epilogue() == v1::EPILOGUE_BIAS ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  const int64_t m = p.m(), n = p.n(), k = p.k(), batch = GemmBatch(p);
  auto matrix = [&](v1::CublasLtCall::Matrix* out, const char* tensor, v1::DType dtype, int64_t rows, int64_t cols) {
    out->set_tensor(tensor);
    out->set_data_type(CudaType(dtype));
    out->set_rows(static_cast<uint64_t>(rows));
    out->set_cols(static_cast<uint64_t>(cols));
    out->set_ld(rows);  // dense: the leading dimension is the column's length
    out->set_batch(static_cast<int32_t>(batch));
    out->set_batch_stride(rows * cols);
  };
  // ktune's B: [N, K] row-major is column-major K x N (transposed by op);
  // [K, N] row-major is column-major N x K.
  if (GemmBIsNK(p)) {
    matrix(call.mutable_a(), "b", p.b_dtype(), k, n);
  } else {
    matrix(call.mutable_a(), "b", p.b_dtype(), n, k);
  }
  // ktune's A [M, K] row-major is column-major K x M; D [M, N] is N x M, C
  // likewise (D's type).
  matrix(call.mutable_b(), "a", p.a_dtype(), k, m);
  if (GemmHasC(p)) matrix(call.mutable_c(), "c", GemmDType(p), n, m);
  matrix(call.mutable_d(), "d", GemmDType(p), n, m);
  call.set_alpha(1.0f);
  call.set_beta(GemmHasC(p) ? 1.0f : 0.0f);  // a residual add is C with beta 1
  if (p.epilogue() == v1::EPILOGUE_BIAS) call.set_bias("bias");
  if (GemmIsFp8(p)) {
    call.set_a_scale("b_scale");  // cuBLASLt's A is ktune's B
    call.set_b_scale("a_scale");
  }
  return call;
}

uint64_t CublasLtLibraryVersion() {
  // Loading the library is not cheap and its version cannot change under a
  // running process: read it once.
  static const uint64_t version = [] {
    for (const char* name : kLibraries) {
      void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (library == nullptr) continue;
      auto get_version = reinterpret_cast<decltype(&::cublasLtGetVersion)>(dlsym(library, "cublasLtGetVersion"));
      // Left loaded for the life of the process (this runs once): unloading
      // cuBLASLt strands the memory its own static runtime allocated at load
      // (LeakSanitizer reports 72 KiB from an unknown module under the
      // bundle fuzzer), and a tune loads the library again anyway.
      return get_version != nullptr ? get_version() : uint64_t{0};
    }
    return uint64_t{0};
  }();
  return version;
}

CublasLtAlgo CublasLtAlgoOf(const LaunchRecipe& recipe) {
  CublasLtAlgo a;
  a.data = recipe.cublaslt_algo;
  a.workspace_bytes = recipe.workspace_bytes;
  return a;
}

absl::Status CublasLtCanServe(const v1::GemmProblem& p) {
  auto no = [](const std::string& why) { return absl::FailedPreconditionError(absl::StrCat("cuBLASLt: ", why)); };
  if (GemmIsFp8(p) && !GemmBIsNK(p)) return no("fp8 needs B as [N, K] (the TN layout)");
  if (GemmIsFp8(p) && GemmDType(p) != v1::BF16) return no("fp8 is served with a bf16 D");
  if (p.epilogue() == v1::EPILOGUE_BIAS_GELU || p.epilogue() == v1::EPILOGUE_BIAS_SILU) {
    return no("no erf-GELU or SiLU epilogue (its GELU is the tanh approximation)");
  }
  return absl::OkStatus();
}

CublasLt::CublasLt(void* library, std::unique_ptr<Api> api, void* handle, uint64_t version)
    : library_(library), api_(std::move(api)), handle_(handle), version_(version) {}

CublasLt::~CublasLt() {
  run_descriptors_.reset();  // before the library they were made by
  if (handle_ != nullptr) api_->cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  if (library_ != nullptr) dlclose(library_);
}

absl::StatusOr<std::unique_ptr<CublasLt>> CublasLt::Open() {
  void* library = nullptr;
  std::string errors;
  for (const char* name : kLibraries) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", dlerror());
  }
  if (library == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cuBLASLt is not available: ", errors));
  }
  auto api = std::make_unique<Api>();
#define KTUNE_LT_RESOLVE(f)                                                       \
  api->f = reinterpret_cast<decltype(api->f)>(dlsym(library, #f));                \
  if (api->f == nullptr) {                                                        \
    dlclose(library);                                                             \
    return absl::FailedPreconditionError("cuBLASLt is not usable: it lacks " #f); \
  }
  KTUNE_LT_FUNCTIONS(KTUNE_LT_RESOLVE)
#undef KTUNE_LT_RESOLVE
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t s = api->cublasLtCreate(&handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    const std::string name = api->cublasLtGetStatusName(s);
    dlclose(library);
    return absl::FailedPreconditionError(absl::StrCat("cublasLtCreate failed: ", name));
  }
  const uint64_t version = api->cublasLtGetVersion();
  return std::unique_ptr<CublasLt>(new CublasLt(library, std::move(api), handle, version));
}

namespace {

absl::Status LtStatus(const CublasLt::Api& api, cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: ", api.cublasLtGetStatusName(s)));
}

#define KTUNE_LT(call, what)                                                        \
  do {                                                                              \
    if (absl::Status lt_status_ = LtStatus(*api, (call), what); !lt_status_.ok()) { \
      return lt_status_;                                                            \
    }                                                                               \
  } while (0)

// The layout of one matrix of the call: column-major, batched.
absl::Status Layout(const CublasLt::Api* api, const v1::CublasLtCall::Matrix& m, cublasLtMatrixLayout_t* out) {
  KTUNE_LT(api->cublasLtMatrixLayoutCreate(out, static_cast<cudaDataType_t>(m.data_type()), m.rows(), m.cols(), m.ld()),
           "cublasLtMatrixLayoutCreate");
  if (m.batch() > 1) {
    const int32_t count = m.batch();
    const int64_t stride = m.batch_stride();
    KTUNE_LT(api->cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
             "batch count");
    KTUNE_LT(api->cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                   sizeof(stride)),
             "batch stride");
  }
  return absl::OkStatus();
}

// The device pointer `operands` binds to the call's tensor named `tensor`
// (CublasLtCallFor's names; "" is none).
uint64_t Operand(const GemmOperands& o, const std::string& tensor) {
  const std::pair<const char*, uint64_t> named[] = {
      {"a", o.a}, {"b", o.b}, {"c", o.c}, {"d", o.d}, {"bias", o.bias}, {"a_scale", o.a_scale}, {"b_scale", o.b_scale}};
  for (const auto& [name, pointer] : named) {
    if (tensor == name) return pointer;
  }
  return 0;
}

// The matmul and layout descriptors of `p`, as CublasLtCallFor states them;
// with `operands`, the pointers the descriptor carries (bias, fp8 scales)
// are set too.
absl::Status Describe(const CublasLt::Api* api, const v1::GemmProblem& p, const GemmOperands* operands,
                      CublasLt::Descriptors* d) {
  const v1::CublasLtCall call = CublasLtCallFor(p);
  KTUNE_LT(api->cublasLtMatmulDescCreate(&d->op_, static_cast<cublasComputeType_t>(call.compute_type()),
                                         static_cast<cudaDataType_t>(call.scale_type())),
           "cublasLtMatmulDescCreate");
  const auto trans_a = static_cast<cublasOperation_t>(call.trans_a());
  const auto trans_b = static_cast<cublasOperation_t>(call.trans_b());
  KTUNE_LT(api->cublasLtMatmulDescSetAttribute(d->op_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
           "transa");
  KTUNE_LT(api->cublasLtMatmulDescSetAttribute(d->op_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
           "transb");
  if (call.epilogue() != CUBLASLT_EPILOGUE_DEFAULT) {
    const auto epilogue = static_cast<cublasLtEpilogue_t>(call.epilogue());
    KTUNE_LT(api->cublasLtMatmulDescSetAttribute(d->op_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
             "epilogue");
  }
  if (!call.bias().empty()) {
    const cudaDataType_t bias_type = CUDA_R_16BF;  // the problem's bias is bf16 (CublasLtCallFor's tensors)
    KTUNE_LT(
        api->cublasLtMatmulDescSetAttribute(d->op_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)),
        "bias type");
  }
  if (operands != nullptr) {
    const struct {
      const std::string& tensor;
      cublasLtMatmulDescAttributes_t attribute;
      const char* what;
    } pointers[] = {{call.bias(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, "bias pointer"},
                    {call.a_scale(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, "A scale"},
                    {call.b_scale(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, "B scale"}};
    for (const auto& ptr : pointers) {
      if (ptr.tensor.empty()) continue;
      const void* value = reinterpret_cast<const void*>(Operand(*operands, ptr.tensor));
      KTUNE_LT(api->cublasLtMatmulDescSetAttribute(d->op_, ptr.attribute, &value, sizeof(value)), ptr.what);
    }
  }
  if (absl::Status s = Layout(api, call.a(), &d->a_); !s.ok()) return s;
  if (absl::Status s = Layout(api, call.b(), &d->b_); !s.ok()) return s;
  // Without C, D doubles as C (beta 0): C's layout is D's.
  if (absl::Status s = Layout(api, call.has_c() ? call.c() : call.d(), &d->c_); !s.ok()) return s;
  return Layout(api, call.d(), &d->d_);
}

}  // namespace

std::vector<CublasLtAlgo> MergeCublasLtAlgos(std::vector<CublasLtAlgo> first, const std::vector<CublasLtAlgo>& more,
                                             size_t max) {
  if (first.size() > max) first.resize(max);
  for (const CublasLtAlgo& a : more) {
    if (first.size() >= max) break;
    const bool known = std::any_of(first.begin(), first.end(), [&](const CublasLtAlgo& f) { return f.data == a.data; });
    if (!known) first.push_back(a);
  }
  return first;
}

std::vector<CublasLtConfig> NeighbourConfigs(const CublasLtConfig& seed, const CublasLtCaps& caps) {
  constexpr uint32_t kMaxCustomOptions = 4;  // beyond the seed's; some algorithms allow hundreds
  // Hopper's useful shapes: pairs and quads of CTAs sharing operand tiles by
  // TMA multicast, along either dimension.
  constexpr uint16_t kClusterShapes[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                                         CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_2x2x1,
                                         CUBLASLT_CLUSTER_SHAPE_4x1x1, CUBLASLT_CLUSTER_SHAPE_1x4x1};
  std::vector<CublasLtConfig> out;
  auto add = [&](CublasLtConfig c) {
    if (!(c == seed) && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  if (caps.clusters) {
    for (uint16_t shape : kClusterShapes) {
      CublasLtConfig c = seed;
      c.cluster = shape;
      add(c);
    }
  }
  if (caps.swizzle) {
    CublasLtConfig c = seed;
    c.swizzle = seed.swizzle == 0 ? 1 : 0;
    add(c);
  }
  for (uint32_t stages : caps.stages) {
    CublasLtConfig c = seed;
    c.stages = stages;
    add(c);
  }
  for (uint32_t option = 0, added = 0; option <= caps.custom_max && added < kMaxCustomOptions; ++option) {
    if (option == seed.custom) continue;
    CublasLtConfig c = seed;
    c.custom = option;
    add(c);
    ++added;
  }
  return out;
}

absl::StatusOr<std::vector<CublasLtAlgo>> CublasLt::Heuristic(const v1::GemmProblem& p, int max_algos,
                                                              uint64_t max_workspace_bytes) {
  if (absl::Status s = CublasLtCanServe(p); !s.ok()) return s;
  const Api* api = api_.get();
  Descriptors d(api);
  if (absl::Status s = Describe(api, p, nullptr, &d); !s.ok()) return s;
  cublasLtMatmulPreference_t pref = nullptr;
  KTUNE_LT(api->cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const size_t workspace = max_workspace_bytes;
  cublasStatus_t st = api->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                &workspace, sizeof(workspace));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(max_algos, 1)));
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = api->cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), d.op_, d.a_, d.b_, d.c_, d.d_,
                                             pref, static_cast<int>(results.size()), results.data(), &returned);
  }
  api->cublasLtMatmulPreferenceDestroy(pref);
  KTUNE_LT(st, "cublasLtMatmulAlgoGetHeuristic");
  std::vector<CublasLtAlgo> algos;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    CublasLtAlgo a;
    a.data.assign(reinterpret_cast<const char*>(&results[i].algo), sizeof(results[i].algo));
    a.workspace_bytes = results[i].workspaceSize;
    a.waves = results[i].wavesCount;
    algos.push_back(std::move(a));
  }
  if (algos.empty()) return absl::NotFoundError("cuBLASLt's heuristic returned no algorithm for the problem");
  return algos;
}

namespace {

// One algorithm setting (CUBLASLT_ALGO_CONFIG_*) and where its value lives.
struct ConfigField {
  cublasLtMatmulAlgoConfigAttributes_t attribute;
  void* value;
  size_t size;
  const char* name;
};

// Calls fn(attribute, value, size, name) for each field of `config`, as
// cuBLASLt's algorithm attribute of the same meaning; stops at an error.
template <typename Fn>
absl::Status ForEachConfigField(CublasLtConfig* config, Fn fn) {
  const ConfigField fields[] = {
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, &config->stages, sizeof(config->stages), "stages"},
      {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &config->swizzle, sizeof(config->swizzle), "CTA swizzle"},
      {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &config->custom, sizeof(config->custom), "custom option"},
      {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &config->cluster, sizeof(config->cluster), "cluster shape"},
  };
  for (const ConfigField& f : fields) {
    if (absl::Status s = fn(f.attribute, f.value, f.size, f.name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// An algorithm's CublasLtConfig and CublasLtCaps; `clusters` as Variants'.
absl::Status ReadConfig(const CublasLt::Api* api, const cublasLtMatmulAlgo_t& a, bool clusters, CublasLtConfig* config,
                        CublasLtCaps* caps) {
  size_t written = 0;
  absl::Status read = ForEachConfigField(
      config, [&](cublasLtMatmulAlgoConfigAttributes_t attribute, void* value, size_t size, const char* name) {
        return LtStatus(*api, api->cublasLtMatmulAlgoConfigGetAttribute(&a, attribute, value, size, &written), name);
      });
  if (!read.ok()) return read;
  int32_t swizzle = 0;
  KTUNE_LT(api->cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle,
                                                  sizeof(swizzle), &written),
           "swizzle support");
  caps->swizzle = swizzle != 0;
  int32_t custom_max = 0;
  KTUNE_LT(api->cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                                  sizeof(custom_max), &written),
           "custom option range");
  caps->custom_max = static_cast<uint32_t>(std::max(custom_max, 0));
  // The stage ids: asked for the count first (size 0), then read.
  KTUNE_LT(api->cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, nullptr, 0, &written),
           "stage ids count");
  caps->stages.assign(written / sizeof(uint32_t), 0);
  if (!caps->stages.empty()) {
    KTUNE_LT(api->cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_STAGES_IDS, caps->stages.data(),
                                                    caps->stages.size() * sizeof(uint32_t), &written),
             "stage ids");
  }
  caps->clusters = clusters;
  return absl::OkStatus();
}

absl::Status WriteConfig(const CublasLt::Api* api, CublasLtConfig config, cublasLtMatmulAlgo_t* a) {
  return ForEachConfigField(
      &config, [&](cublasLtMatmulAlgoConfigAttributes_t attribute, void* value, size_t size, const char* name) {
        return LtStatus(*api, api->cublasLtMatmulAlgoConfigSetAttribute(a, attribute, value, size), name);
      });
}

}  // namespace

absl::StatusOr<std::vector<CublasLtAlgo>> CublasLt::Variants(const v1::GemmProblem& p,
                                                             const std::vector<CublasLtAlgo>& seeds,
                                                             uint64_t max_workspace_bytes, bool clusters,
                                                             size_t max_per_seed) {
  if (absl::Status s = CublasLtCanServe(p); !s.ok()) return s;
  const Api* api = api_.get();
  Descriptors d(api);
  if (absl::Status s = Describe(api, p, nullptr, &d); !s.ok()) return s;
  std::vector<CublasLtAlgo> out;
  absl::Status unreadable;  // the last seed whose settings could not be read
  auto known = [&](const std::string& bytes) {
    auto same = [&](const CublasLtAlgo& x) { return x.data == bytes; };
    return std::any_of(seeds.begin(), seeds.end(), same) || std::any_of(out.begin(), out.end(), same);
  };
  for (const CublasLtAlgo& seed : seeds) {
    if (seed.data.size() != sizeof(cublasLtMatmulAlgo_t)) {
      return absl::InvalidArgumentError("a cuBLASLt algorithm is 64 bytes");
    }
    cublasLtMatmulAlgo_t base;
    std::memcpy(&base, seed.data.data(), sizeof(base));
    CublasLtConfig config;
    CublasLtCaps caps;
    if (absl::Status s = ReadConfig(api, base, clusters, &config, &caps); !s.ok()) {
      unreadable = s;  // this seed only: the next may be of another kind
      continue;
    }
    size_t from_seed = 0;
    for (const CublasLtConfig& c : NeighbourConfigs(config, caps)) {
      if (from_seed >= max_per_seed) break;
      cublasLtMatmulAlgo_t a = base;
      if (!WriteConfig(api, c, &a).ok()) continue;  // a value this algorithm does not take
      cublasLtMatmulHeuristicResult_t result;
      std::memset(&result, 0, sizeof(result));
      if (api->cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(handle_), d.op_, d.a_, d.b_, d.c_, d.d_, &a,
                                       &result) != CUBLAS_STATUS_SUCCESS ||
          result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > max_workspace_bytes) {
        continue;  // not valid for this problem or this GPU
      }
      CublasLtAlgo v;
      v.data.assign(reinterpret_cast<const char*>(&a), sizeof(a));
      if (known(v.data)) continue;
      v.workspace_bytes = result.workspaceSize;
      v.waves = result.wavesCount;
      out.push_back(std::move(v));
      ++from_seed;
    }
  }
  if (out.empty() && !unreadable.ok()) return unreadable;
  return out;
}

absl::StatusOr<std::vector<CublasLtAlgo>> CublasLt::Candidates(const v1::GemmProblem& p, int max_heuristic,
                                                               bool clusters, absl::Status* variants_status) {
  const size_t max_listed = static_cast<size_t>(std::max(max_heuristic, 1));
  absl::StatusOr<std::vector<CublasLtAlgo>> algos = Heuristic(p, max_heuristic, kCublasLtWorkspaceBytes);
  if (!algos.ok()) return algos.status();
  // The second list only adds: the first's head stays cuBLASLt's default.
  absl::StatusOr<std::vector<CublasLtAlgo>> small = Heuristic(p, max_heuristic, kCublasLtSmallWorkspaceBytes);
  if (small.ok()) *algos = MergeCublasLtAlgos(*std::move(algos), *small, max_listed);
  // Variants after every heuristic algorithm, so ties still go to the
  // heuristic's order.
  constexpr size_t kVariantSeeds = 2;  // cuBLASLt's default and its runner-up
  constexpr size_t kVariantsPerSeed = 12;
  const std::vector<CublasLtAlgo> seeds(algos->begin(), algos->begin() + std::min(algos->size(), kVariantSeeds));
  absl::StatusOr<std::vector<CublasLtAlgo>> variants =
      Variants(p, seeds, kCublasLtWorkspaceBytes, clusters, kVariantsPerSeed);
  if (variants_status != nullptr) *variants_status = variants.status();
  if (variants.ok()) {
    const size_t all = algos->size() + variants->size();
    *algos = MergeCublasLtAlgos(*std::move(algos), *variants, all);
  }
  return algos;
}

std::string ToString(const CublasLtAlgoSettings& d) {
  return absl::StrCat("algo ", d.id, " tile ", d.tile, " splitk ", d.split_k, " reduction ", d.reduction, " swizzle ",
                      d.swizzle, " custom ", d.custom, " stages ", d.stages, " inner ", d.inner, " cluster ",
                      d.cluster);
}

absl::StatusOr<CublasLtAlgoSettings> CublasLt::ReadSettings(const CublasLtAlgo& algo) const {
  if (algo.data.size() != sizeof(cublasLtMatmulAlgo_t)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cuBLASLt algorithm is ", sizeof(cublasLtMatmulAlgo_t), " bytes, got ", algo.data.size()));
  }
  const Api* api = api_.get();
  cublasLtMatmulAlgo_t a;
  std::memcpy(&a, algo.data.data(), sizeof(a));
  CublasLtAlgoSettings d;
  const ConfigField fields[] = {
      {CUBLASLT_ALGO_CONFIG_ID, &d.id, sizeof(d.id), "algorithm id"},
      {CUBLASLT_ALGO_CONFIG_TILE_ID, &d.tile, sizeof(d.tile), "tile"},
      {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &d.split_k, sizeof(d.split_k), "split K"},
      {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &d.reduction, sizeof(d.reduction), "reduction scheme"},
      {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &d.swizzle, sizeof(d.swizzle), "CTA swizzle"},
      {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &d.custom, sizeof(d.custom), "custom option"},
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, &d.stages, sizeof(d.stages), "stages"},
      {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &d.inner, sizeof(d.inner), "inner shape"},
      {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &d.cluster, sizeof(d.cluster), "cluster shape"},
  };
  size_t written = 0;
  for (const ConfigField& f : fields) {
    KTUNE_LT(api->cublasLtMatmulAlgoConfigGetAttribute(&a, f.attribute, f.value, f.size, &written), f.name);
  }
  return d;
}

absl::Status CublasLt::Check(const v1::GemmProblem& p, const CublasLtAlgo& algo) {
  if (algo.data.size() != sizeof(cublasLtMatmulAlgo_t)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cuBLASLt algorithm is ", sizeof(cublasLtMatmulAlgo_t), " bytes, got ", algo.data.size()));
  }
  if (absl::Status s = CublasLtCanServe(p); !s.ok()) return s;
  const Api* api = api_.get();
  Descriptors d(api);
  if (absl::Status s = Describe(api, p, nullptr, &d); !s.ok()) return s;
  cublasLtMatmulAlgo_t a;
  std::memcpy(&a, algo.data.data(), sizeof(a));
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  KTUNE_LT(
      api->cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(handle_), d.op_, d.a_, d.b_, d.c_, d.d_, &a, &result),
      "cublasLtMatmulAlgoCheck");
  if (result.workspaceSize > algo.workspace_bytes) {
    return absl::FailedPreconditionError(absl::StrCat("the algorithm needs ", result.workspaceSize,
                                                      " bytes of workspace, the entry allows ", algo.workspace_bytes));
  }
  return absl::OkStatus();
}

absl::Status CublasLt::Run(const v1::GemmProblem& p, const CublasLtAlgo& algo, const GemmOperands& o,
                           uint64_t workspace, uint64_t workspace_bytes, void* stream) {
  if (algo.data.size() != sizeof(cublasLtMatmulAlgo_t)) {
    return absl::InvalidArgumentError("a cuBLASLt algorithm is 64 bytes");
  }
  const Api* api = api_.get();
  const std::string key = absl::StrCat(p.SerializeAsString(), "|", o.bias, "|", o.a_scale, "|", o.b_scale);
  if (run_descriptors_ == nullptr || key != run_key_) {
    auto fresh = std::make_unique<Descriptors>(api);
    if (absl::Status s = Describe(api, p, &o, fresh.get()); !s.ok()) return s;
    run_descriptors_ = std::move(fresh);
    run_key_ = key;
  }
  const Descriptors& d = *run_descriptors_;
  cublasLtMatmulAlgo_t a;
  std::memcpy(&a, algo.data.data(), sizeof(a));
  // The operands as the call names them (cuBLASLt's A is ktune's B).
  // Without C, D doubles as C (read never: beta = 0).
  const v1::CublasLtCall call = CublasLtCallFor(p);
  const float beta = call.has_c() ? o.beta : 0.0f;
  auto pointer = [&](const v1::CublasLtCall::Matrix& m) {
    return reinterpret_cast<const void*>(Operand(o, m.tensor()));
  };
  KTUNE_LT(api->cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), d.op_, &o.alpha, pointer(call.a()), d.a_,
                               pointer(call.b()), d.b_, &beta, pointer(call.has_c() ? call.c() : call.d()), d.c_,
                               reinterpret_cast<void*>(o.d), d.d_, &a, reinterpret_cast<void*>(workspace),
                               workspace_bytes, static_cast<cudaStream_t>(stream)),
           "cublasLtMatmul");
  return absl::OkStatus();
}

}  // namespace ktune
