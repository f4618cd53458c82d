#include "tuner/compile/nvrtc_compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/core/parallel.h"

namespace ktune {
namespace {

// Owns one nvrtcProgram.
class NvrtcProgram {
 public:
  NvrtcProgram() = default;
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;
  ~NvrtcProgram() {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
  }

  nvrtcProgram* out() { return &program_; }
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

// The one check helper for NVRTC results: on failure it records which call
// failed, NVRTC's message and, when a program exists, its log.
class NvrtcChecker {
 public:
  explicit NvrtcChecker(CompileResult* result) : result_(result) {}

  bool Ok(nvrtcResult code, const char* call, nvrtcProgram program = nullptr) {
    if (code == NVRTC_SUCCESS) return true;
    result_->ok = false;
    absl::StrAppend(&result_->log, call, " failed: ", nvrtcGetErrorString(code), "\n");
    if (program != nullptr) absl::StrAppend(&result_->log, ProgramLog(program));
    return false;
  }

  static std::string ProgramLog(nvrtcProgram program) {
    size_t size = 0;
    if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
    std::string log(size, '\0');
    if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
    log.resize(size - 1);  // drop the terminating NUL
    return log;
  }

 private:
  CompileResult* result_;
};

// Compiles `text` (named `path`, with in-memory headers) for the recipe's
// name expressions, options and architecture.
CompileResult CompileText(const std::string& text, const std::string& path, const std::vector<std::string>& names,
                          const std::vector<std::string>& texts, LaunchRecipe* recipe) {
  CompileResult result;
  if (recipe->kernels.empty()) {
    result.log = "recipe has no kernels";
    return result;
  }
  std::vector<const char*> header_texts;
  std::vector<const char*> header_names;
  for (size_t i = 0; i < names.size(); ++i) {
    header_texts.push_back(texts[i].c_str());
    header_names.push_back(names[i].c_str());
  }
  // NVRTC names the translation unit; instantiations come from name expressions.
  std::string unit = absl::StrCat(text, "\n");
  NvrtcChecker check(&result);
  NvrtcProgram program;
  if (!check.Ok(nvrtcCreateProgram(program.out(), unit.c_str(), path.c_str(), static_cast<int>(header_names.size()),
                                   header_texts.data(), header_names.data()),
                "nvrtcCreateProgram")) {
    return result;
  }
  for (const KernelLaunch& k : recipe->kernels) {
    if (!check.Ok(nvrtcAddNameExpression(program.get(), k.name_expression.c_str()), "nvrtcAddNameExpression",
                  program.get())) {
      return result;
    }
  }
  std::vector<std::string> options = recipe->nvrtc_options;
  if (!recipe->arch.empty() && std::none_of(options.begin(), options.end(), [](const std::string& o) {
        return o.rfind("--gpu-architecture", 0) == 0 || o.rfind("-arch", 0) == 0;
      })) {
    options.push_back(absl::StrCat("--gpu-architecture=", recipe->arch));
  }
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  const nvrtcResult compiled =
      nvrtcCompileProgram(program.get(), static_cast<int>(option_ptrs.size()), option_ptrs.data());
  if (compiled != NVRTC_SUCCESS) {
    check.Ok(compiled, "nvrtcCompileProgram", program.get());
    return result;
  }
  result.log = NvrtcChecker::ProgramLog(program.get());  // warnings, ptxas info

  size_t cubin_size = 0;
  if (!check.Ok(nvrtcGetCUBINSize(program.get(), &cubin_size), "nvrtcGetCUBINSize")) {
    return result;
  }
  if (cubin_size == 0) {
    result.log += "nvrtcGetCUBIN: empty cubin (was a virtual architecture compute_XX given?)\n";
    return result;
  }
  std::string cubin(cubin_size, '\0');
  if (!check.Ok(nvrtcGetCUBIN(program.get(), cubin.data()), "nvrtcGetCUBIN")) return result;

  std::vector<std::string> lowered;
  for (const KernelLaunch& k : recipe->kernels) {
    const char* name = nullptr;
    if (!check.Ok(nvrtcGetLoweredName(program.get(), k.name_expression.c_str(), &name), "nvrtcGetLoweredName")) {
      return result;
    }
    lowered.emplace_back(name);
  }
  recipe->cubin = std::move(cubin);
  for (size_t i = 0; i < lowered.size(); ++i) recipe->kernels[i].lowered_name = lowered[i];
  result.ok = true;
  return result;
}

CompileResult CompileImpl(LaunchRecipe* recipe) {
  CompileResult result;
  absl::StatusOr<const KernelSource*> source = FindKernelSource(recipe->template_id);
  if (!source.ok()) {
    result.log = std::string(source.status().message());
    return result;
  }
  if (!recipe->template_hash.empty() && recipe->template_hash != (*source)->hash) {
    result.log = absl::StrCat("recipe was made for template hash ", recipe->template_hash, " but this binary embeds ",
                              (*source)->hash);
    return result;
  }
  const KernelSource& src = **source;
  return CompileText(src.text, src.path, src.header_names, src.header_texts, recipe);
}

}  // namespace

int NvrtcVersion() {
  int major = 0;
  int minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

CompileResult Compile(LaunchRecipe* recipe) {
  const auto start = std::chrono::steady_clock::now();
  CompileResult result = CompileImpl(recipe);
  result.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

CompileResult CompileSource(const std::string& text, LaunchRecipe* recipe) {
  const auto start = std::chrono::steady_clock::now();
  CompileResult result = CompileText(text, "source.cu", {}, {}, recipe);
  result.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<CompileResult> CompileAll(std::vector<LaunchRecipe>* recipes, int threads,
                                      const std::function<void(int)>& on_done) {
  const int count = static_cast<int>(recipes->size());
  std::vector<CompileResult> results(count);
  if (count == 0) return results;
  std::mutex done_mu;  // serializes on_done and guards `finished`
  int finished = 0;
  ParallelFor(count, threads, [&](int i) {
    results[i] = Compile(&(*recipes)[i]);
    std::lock_guard<std::mutex> lock(done_mu);
    ++finished;
    if (on_done) on_done(finished);
  });
  return results;
}

}  // namespace ktune
