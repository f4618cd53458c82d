// CublasLtApi over libcublasLt.so.13, loaded with dlopen when the first
// cuBLASLt recipe is: launchers of kernel recipes never need the library.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/launch_driver.h"

namespace ktune {
namespace {

#define KTUNE_LAUNCH_LT_FUNCTIONS(X)  \
  X(cublasLtCreate)                   \
  X(cublasLtDestroy)                  \
  X(cublasLtGetStatusName)            \
  X(cublasLtMatmulDescCreate)         \
  X(cublasLtMatmulDescDestroy)        \
  X(cublasLtMatmulDescSetAttribute)   \
  X(cublasLtMatrixLayoutCreate)       \
  X(cublasLtMatrixLayoutDestroy)      \
  X(cublasLtMatrixLayoutSetAttribute) \
  X(cublasLtMatmul)

struct LtTable {
#define KTUNE_LAUNCH_LT_MEMBER(f) decltype(&::f) f = nullptr;
  KTUNE_LAUNCH_LT_FUNCTIONS(KTUNE_LAUNCH_LT_MEMBER)
#undef KTUNE_LAUNCH_LT_MEMBER
};

class CublasLtLibrary final : public CublasLtApi {
 public:
  CublasLtLibrary(LtTable t, cublasLtHandle_t handle) : t_(t), handle_(handle) {}
  // The library stays loaded: unloading cuBLASLt strands memory its static
  // runtime allocated at load (LeakSanitizer reports it), and the next
  // launcher of a cuBLASLt recipe would load it again.
  ~CublasLtLibrary() override { t_.cublasLtDestroy(handle_); }

  absl::StatusOr<void*> CreateMatmulDesc(uint32_t compute_type, uint32_t scale_type) override {
    cublasLtMatmulDesc_t desc = nullptr;
    absl::Status s = Check(t_.cublasLtMatmulDescCreate(&desc, static_cast<cublasComputeType_t>(compute_type),
                                                       static_cast<cudaDataType_t>(scale_type)),
                           "cublasLtMatmulDescCreate");
    if (!s.ok()) return s;
    return static_cast<void*>(desc);
  }
  absl::Status SetMatmulDescAttribute(void* desc, uint32_t attribute, const void* value, size_t size) override {
    return Check(t_.cublasLtMatmulDescSetAttribute(static_cast<cublasLtMatmulDesc_t>(desc),
                                                   static_cast<cublasLtMatmulDescAttributes_t>(attribute), value, size),
                 "cublasLtMatmulDescSetAttribute");
  }
  void DestroyMatmulDesc(void* desc) override { t_.cublasLtMatmulDescDestroy(static_cast<cublasLtMatmulDesc_t>(desc)); }

  absl::StatusOr<void*> CreateMatrixLayout(uint32_t data_type, uint64_t rows, uint64_t cols, int64_t ld) override {
    cublasLtMatrixLayout_t layout = nullptr;
    absl::Status s =
        Check(t_.cublasLtMatrixLayoutCreate(&layout, static_cast<cudaDataType_t>(data_type), rows, cols, ld),
              "cublasLtMatrixLayoutCreate");
    if (!s.ok()) return s;
    return static_cast<void*>(layout);
  }
  absl::Status SetMatrixLayoutAttribute(void* layout, uint32_t attribute, const void* value, size_t size) override {
    return Check(
        t_.cublasLtMatrixLayoutSetAttribute(static_cast<cublasLtMatrixLayout_t>(layout),
                                            static_cast<cublasLtMatrixLayoutAttribute_t>(attribute), value, size),
        "cublasLtMatrixLayoutSetAttribute");
  }
  void DestroyMatrixLayout(void* layout) override {
    t_.cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(layout));
  }

  absl::Status Matmul(const MatmulCall& m) override {
    auto ptr = [](uint64_t a) { return reinterpret_cast<void*>(a); };
    return Check(t_.cublasLtMatmul(handle_, static_cast<cublasLtMatmulDesc_t>(m.desc), &m.alpha, ptr(m.a),
                                   static_cast<cublasLtMatrixLayout_t>(m.a_layout), ptr(m.b),
                                   static_cast<cublasLtMatrixLayout_t>(m.b_layout), &m.beta, ptr(m.c),
                                   static_cast<cublasLtMatrixLayout_t>(m.c_layout), ptr(m.d),
                                   static_cast<cublasLtMatrixLayout_t>(m.d_layout),
                                   static_cast<const cublasLtMatmulAlgo_t*>(m.algo), ptr(m.workspace),
                                   m.workspace_bytes, static_cast<cudaStream_t>(m.stream)),
                 "cublasLtMatmul");
  }

 private:
  absl::Status Check(cublasStatus_t s, const char* call) const {
    if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    const std::string message = absl::StrCat(call, ": ", t_.cublasLtGetStatusName(s));
    switch (s) {
      case CUBLAS_STATUS_INVALID_VALUE:
      case CUBLAS_STATUS_NOT_SUPPORTED:
        return absl::InvalidArgumentError(message);
      case CUBLAS_STATUS_ALLOC_FAILED:
        return absl::ResourceExhaustedError(message);
      default:
        return absl::InternalError(message);
    }
  }

  const LtTable t_;
  const cublasLtHandle_t handle_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLtApi>> OpenCublasLtApi() {
  constexpr const char* kName = "libcublasLt.so.13";
  void* library = dlopen(kName, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cuBLASLt recipes need ", kName, ": ", why != nullptr ? why : "dlopen failed"));
  }
  LtTable t;
#define KTUNE_LAUNCH_LT_RESOLVE(f)                                                              \
  t.f = reinterpret_cast<decltype(t.f)>(dlsym(library, #f));                                    \
  if (t.f == nullptr) {                                                                         \
    dlclose(library);                                                                           \
    return absl::FailedPreconditionError(absl::StrCat(kName, " is not usable: it lacks ", #f)); \
  }
  KTUNE_LAUNCH_LT_FUNCTIONS(KTUNE_LAUNCH_LT_RESOLVE)
#undef KTUNE_LAUNCH_LT_RESOLVE
  cublasLtHandle_t handle = nullptr;
  if (const cublasStatus_t s = t.cublasLtCreate(&handle); s != CUBLAS_STATUS_SUCCESS) {
    const std::string name = t.cublasLtGetStatusName(s);
    dlclose(library);
    return absl::FailedPreconditionError(absl::StrCat("cublasLtCreate: ", name));
  }
  return std::unique_ptr<CublasLtApi>(new CublasLtLibrary(t, handle));
}

}  // namespace ktune
