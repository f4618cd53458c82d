#include "daemon/answers.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache/recipe_check.h"
#include "spdlog/spdlog.h"
#include "tuner/compile/compile_through_cache.h"
#include "tuner/core/safe_text.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

// Everything that determines a program's code, and nothing of its launch
// geometry: two problems that instantiate the same kernels share their code
// and nothing else.
std::string CompileKey(const LaunchRecipe& r) {
  std::string key =
      absl::StrCat(r.template_id, "|", r.template_hash, "|", r.arch, "|", absl::StrJoin(r.nvrtc_options, " "));
  for (const KernelLaunch& k : r.kernels) absl::StrAppend(&key, "|", k.name_expression);
  return key;
}

// The software this binary keys each entry op under (it depends on the op
// alone), or why there is none. An op whose template is missing is not
// served: none of its entries is stale.
std::map<std::string, absl::StatusOr<SoftwareFingerprint>> OpSoftware(const OpRegistry& ops) {
  std::map<std::string, absl::StatusOr<SoftwareFingerprint>> software;
  for (const std::unique_ptr<Op>& op : ops.ops()) {
    for (const std::string& entry_op : op->entry_ops()) software.emplace(entry_op, op->Software(entry_op));
  }
  return software;
}

std::map<std::string, std::string> SoftwareKeys(
    const std::map<std::string, absl::StatusOr<SoftwareFingerprint>>& op_software) {
  std::map<std::string, std::string> keys;
  for (const auto& [op, software] : op_software) {
    if (software.ok()) keys[op] = SoftwareKey(*software);
  }
  return keys;
}

}  // namespace

v1::LaunchRecipe WithoutLoweredNames(v1::LaunchRecipe recipe) {
  for (v1::KernelLaunch& k : *recipe.mutable_kernels()) k.clear_lowered_name();
  return recipe;
}

Answers::Answers(const OpRegistry& ops, Store* store, KernelCache* kernel_cache, std::vector<DeviceKind> kinds,
                 ServiceMetrics* metrics)
    : ops_(ops),
      kernel_cache_(kernel_cache),
      metrics_(metrics),
      kinds_(std::move(kinds)),
      op_software_(OpSoftware(ops)),
      current_software_(SoftwareKeys(op_software_)),
      entries_(store, [this](const v1::Entry& entry) { return EntryAnswer(entry); }) {}

absl::StatusOr<Resolved> Answers::Resolve(const v1::Problem& problem, const v1::DeviceSelector& device) const {
  // Once per request: the problem is validated and keyed once, and the op's
  // software fingerprint and key come from tables made at start.
  absl::StatusOr<const DeviceKind*> kind = SelectKind(kinds_, device);
  if (!kind.ok()) return kind.status();
  absl::StatusOr<const Op*> op = ops_.ForProblem(problem);
  if (!op.ok()) return op.status();
  absl::StatusOr<ProblemIdentity> id = (*op)->Identify(problem);
  if (!id.ok()) return id.status();
  auto software = op_software_.find(id->entry_op);
  if (software == op_software_.end()) {  // an op keyed the problem under an entry op it does not list
    return absl::InternalError(absl::StrCat("no software fingerprint for ", id->entry_op));
  }
  // As the op answered at start (its template is not in this build).
  if (!software->second.ok()) return software->second.status();
  Resolved r;
  r.proto = problem;
  r.op = *op;
  r.kind = *kind;
  r.software = *software->second;
  const std::string& software_key = current_software_.at(id->entry_op);  // every ok software has its key
  r.key = EntryKey{std::move(id->entry_op), std::move(id->problem_key), r.kind->key, software_key};
  return r;
}

const DeviceKind* Answers::KindOfKey(const std::string& device_key) const {
  for (const DeviceKind& kind : kinds_) {
    if (kind.key == device_key) return &kind;
  }
  return nullptr;
}

EntryFilter::Stale Answers::StaleFilter() const {
  EntryFilter::Stale stale{{}, current_software_};
  for (const DeviceKind& kind : kinds_) stale.device_keys.push_back(kind.key);
  return stale;
}

absl::Status Answers::CheckOpFilter(const std::string& op) const {
  if (op.empty() || current_software_.count(op) > 0) return absl::OkStatus();
  if (ops_.ForEntryOp(op) != nullptr) return absl::InvalidArgumentError("op: not served by this daemon");
  const std::vector<std::string> known = ops_.entry_ops();
  std::string expected;
  for (size_t i = 0; i < known.size(); ++i) {
    absl::StrAppend(&expected, i == 0 ? "" : i + 1 == known.size() ? " or " : ", ", known[i]);
  }
  return absl::InvalidArgumentError(absl::StrCat("op: unknown op '", SafeText(op), "' (expected ", expected, ")"));
}

void Answers::RememberCode(const LaunchRecipe& recipe) {
  if (recipe.is_cublaslt_call() || recipe.cubin.empty()) return;
  CompiledCode code{recipe.cubin, {}};
  for (const KernelLaunch& k : recipe.kernels) code.lowered_names.push_back(k.lowered_name);
  absl::MutexLock lock(&compiled_mu_);
  compiled_.insert_or_assign(CompileKey(recipe), std::move(code));
}

absl::Status Answers::AttachCode(LaunchRecipe* recipe) {
  if (recipe->is_cublaslt_call()) return absl::OkStatus();  // a library call: nothing to compile
  const std::string key = CompileKey(*recipe);
  auto attach = [recipe](const CompiledCode& code) {
    recipe->cubin = code.cubin;
    for (size_t i = 0; i < recipe->kernels.size(); ++i) recipe->kernels[i].lowered_name = code.lowered_names[i];
  };
  {
    absl::MutexLock lock(&compiled_mu_);
    if (auto it = compiled_.find(key); it != compiled_.end()) {
      attach(it->second);
      return absl::OkStatus();
    }
  }
  // The tuner's one way to code (kernel cache, then NVRTC, stored back): it
  // fills only the cubin and lowered names, and a failure changes nothing.
  const CachedCompile compiled = CompileThroughCache(recipe, kernel_cache_);
  if (!compiled.ok) {
    return absl::InternalError(absl::StrCat("compiling ", recipe->template_id, " failed: ", compiled.log));
  }
  if (compiled.compiled) metrics_->AddCompileSeconds(compiled.compile_seconds);
  CompiledCode code{recipe->cubin, {}};
  for (const KernelLaunch& k : recipe->kernels) code.lowered_names.push_back(k.lowered_name);
  absl::MutexLock lock(&compiled_mu_);
  compiled_.insert_or_assign(key, std::move(code));
  return absl::OkStatus();
}

absl::StatusOr<LaunchRecipe> Answers::ServedRecipe(const Resolved& r, const v1::Config& config) {
  absl::StatusOr<LaunchRecipe> recipe = r.op->TemplateRecipe(r.proto, config, r.kind->device);
  if (!recipe.ok()) return recipe.status();
  if (absl::Status s = AttachCode(&*recipe); !s.ok()) return s;
  return recipe;
}

absl::StatusOr<v1::GetConfigResponse> Answers::EntryAnswer(const v1::Entry& entry) const {
  // The stored recipe is checked, then the template's own is served: a store
  // or bundle can say which config won, never how to launch it.
  const DeviceKind* kind = KindOfKey(DeviceKey(DeviceFromProto(entry.device())));
  if (kind == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("stored entry: device: ", SafeText(entry.device().name()),
                                                   " (this fingerprint) is no GPU kind of this ktuned"));
  }
  absl::StatusOr<LaunchRecipe> recipe = ops_.TemplateRecipe(entry.problem(), entry.config(), kind->device);
  if (!recipe.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stored entry: recipe: this build's template writes none for its config on ", Arch(kind->device),
                     ": ", recipe.status().message()));
  }
  if (absl::Status s = CompareStoredRecipe("stored entry: ", WithoutLoweredNames(entry.recipe()), *recipe); !s.ok()) {
    return s;
  }
  v1::GetConfigResponse response;
  *response.mutable_config() = entry.config();
  response.set_source(v1::TUNED);
  *response.mutable_measurement() = entry.measurement();
  *response.mutable_recipe() = RecipeToProto(*recipe, /*include_cubin=*/false);
  *response.mutable_device() = entry.device();
  *response.mutable_software() = entry.software();
  return response;
}

absl::Status Answers::AnswerFromEntry(const ServedEntry& served, bool include_cubin, v1::GetConfigResponse* response) {
  if (!served.answer.ok()) return served.answer.status();
  *response = *served.answer;
  if (include_cubin) {
    // Entries carry no code; the recipe compiles deterministically from the
    // embedded template (same software fingerprint), once per process.
    LaunchRecipe recipe = RecipeFromProto(response->recipe());
    if (absl::Status s = AttachCode(&recipe); !s.ok()) {
      spdlog::warn("event=cubin_recompile_failed template=\"{}\" error=\"{}\"", SafeText(recipe.template_id),
                   SafeText(s.message(), 1024));
    } else {
      *response->mutable_recipe() = RecipeToProto(recipe, /*include_cubin=*/true);
    }
  }
  return absl::OkStatus();
}

absl::Status Answers::AnswerConfig(const Resolved& r, v1::Config config, v1::Source source, bool include_cubin,
                                   v1::GetConfigResponse* response) {
  absl::StatusOr<LaunchRecipe> compiled = ServedRecipe(r, config);
  if (!compiled.ok()) return compiled.status();
  *response->mutable_config() = std::move(config);
  response->set_source(source);
  *response->mutable_recipe() = RecipeToProto(*compiled, include_cubin);
  *response->mutable_device() = DeviceToProto(r.kind->device);
  *response->mutable_software() = SoftwareToProto(r.software);
  return absl::OkStatus();
}

absl::StatusOr<GetConfigAnswer> Answers::AnswerUntuned(const Resolved& r, bool nearest_on_miss, bool include_cubin,
                                                       v1::GetConfigResponse* response) {
  if (nearest_on_miss) {
    const ProblemFamily family = r.op->Family(r.proto, r.key.device_key, r.key.software_key);
    if (std::shared_ptr<const v1::Entry> nearest = entries_.Nearest(family)) {
      // Another M's tuned config, if its op re-judges it fit for this one and
      // its template writes it for this problem; else the heuristic answer.
      absl::StatusOr<v1::Config> config = r.op->NearestConfig(r.proto, *nearest, r.kind->device);
      if (config.ok() && AnswerConfig(r, *std::move(config), v1::NEAREST, include_cubin, response).ok()) {
        *response->mutable_tuned_for() = nearest->problem();
        return GetConfigAnswer::kNearest;
      }
      response->Clear();
    }
  }
  absl::StatusOr<v1::Config> config = r.op->HeuristicConfig(r.proto, r.kind->device);
  if (!config.ok()) return config.status();
  if (absl::Status s = AnswerConfig(r, *std::move(config), v1::HEURISTIC, include_cubin, response); !s.ok()) return s;
  return GetConfigAnswer::kHeuristic;
}

absl::Status Answers::AttachVerifiedCode(const v1::Problem& problem, const DeviceInfo& device,
                                         v1::GetConfigResponse* response) {
  // The tune's answer is this build's recipe for its config (the tune job
  // checked it); compiled here, served with its code.
  if (absl::Status s = VerifyRecipe(ops_, problem, response->config(), response->recipe(), device); !s.ok()) {
    return absl::InternalError(s.message());
  }
  LaunchRecipe recipe = RecipeFromProto(response->recipe());
  if (absl::Status s = AttachCode(&recipe); !s.ok()) return s;
  *response->mutable_recipe() = RecipeToProto(recipe, /*include_cubin=*/true);
  return absl::OkStatus();
}

}  // namespace ktune
