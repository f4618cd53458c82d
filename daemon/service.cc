#include "daemon/service.h"

#include <algorithm>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cache/bundle.h"
#include "cache/recipe_check.h"
#include "daemon/reactors.h"
#include "daemon/status_mapping.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "spdlog/spdlog.h"
#include "tuner/cublaslt.h"
#include "tuner/gemm_problem.h"
#include "tuner/gemm_skinny_space.h"
#include "tuner/gemm_space.h"
#include "tuner/gemm_tuner.h"
#include "tuner/gemm_wgmma_space.h"
#include "tuner/gemm_wire.h"
#include "tuner/kernel_source.h"
#include "tuner/norm_space.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/safe_text.h"
#include "tuner/tuner.h"
#include "tuner/wire.h"

namespace ktune {
namespace {

// The ops entries are stored under (OpName, and "gemm").
constexpr std::array<const char*, 5> kEntryOps = {"rmsnorm.fwd", "rmsnorm.bwd", "layernorm.fwd", "layernorm.bwd",
                                                  "gemm"};

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// The first config of a wgmma space (the model's best) that does not split K.
// The space's first config that is neither split nor promoted (see
// AnswerUntunedGemm for why those are measured before they are answered).
std::optional<WgmmaTileConfig> BestUnsplit(const std::vector<WgmmaTileConfig>& space) {
  const auto it =
      std::find_if(space.begin(), space.end(), [](const WgmmaTileConfig& c) { return c.split_k == 1 && !c.promote; });
  if (it == space.end()) return std::nullopt;
  return *it;
}

constexpr int kDefaultPageSize = 1000;
constexpr int kMaxPageSize = 10000;
constexpr size_t kMaxPageTokenBytes = 4096;
constexpr uint64_t kMaxUnaryExportBytes = uint64_t{64} << 20;
constexpr int kMaxDeleteProblems = 1000;
constexpr size_t kMaxDeleteListed = 1000;

// A page token: the last key of the page and the filter it was given for,
// opaque to callers (web-safe base64). Keyset paging: the next page starts
// after that key, so no server state is kept between pages.
constexpr absl::string_view kPageTokenMagic = "ktp1";

std::string EncodePageToken(const EntryKey& last, absl::string_view scope) {
  return absl::WebSafeBase64Escape(absl::StrCat(kPageTokenMagic, "\x1e", scope, "\x1e", FlatKey(last)));
}

absl::StatusOr<EntryKey> DecodePageToken(absl::string_view token, absl::string_view scope) {
  // The token itself is never echoed: it is the caller's, of any content.
  auto bad = [](absl::string_view why) { return absl::InvalidArgumentError(absl::StrCat("page_token: ", why)); };
  if (token.size() > kMaxPageTokenBytes) return bad("too long to be a token this server gave");
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw)) return bad("not a token this server gave (not base64)");
  std::vector<std::string> parts = absl::StrSplit(raw, absl::MaxSplits('\x1e', 2));
  if (parts.size() != 3 || parts[0] != kPageTokenMagic) return bad("not a token this server gave");
  if (parts[1] != scope) return bad("given for another op or stale_only; start again without a token");
  std::vector<std::string> key = absl::StrSplit(parts[2], '\x1f');
  if (key.size() != 4) return bad("not a token this server gave (no key)");
  return EntryKey{std::move(key[0]), std::move(key[1]), std::move(key[2]), std::move(key[3])};
}

// Everything that determines a program's code, and nothing of its launch
// geometry: two problems that instantiate the same kernels share their code
// and nothing else.
std::string CompileKey(const LaunchRecipe& r) {
  std::string key =
      absl::StrCat(r.template_id, "|", r.template_hash, "|", r.arch, "|", absl::StrJoin(r.nvrtc_options, " "));
  for (const KernelLaunch& k : r.kernels) absl::StrAppend(&key, "|", k.name_expression);
  return key;
}

// A stored recipe as the check sees it: entries stored before lowered names
// were left out of them still carry the names their tune compiled. Those are
// never served (the daemon compiles the recipe itself), so they are dropped
// rather than compared.
v1::LaunchRecipe WithoutLoweredNames(v1::LaunchRecipe recipe) {
  for (v1::KernelLaunch& k : *recipe.mutable_kernels()) k.clear_lowered_name();
  return recipe;
}

// Sets entry->recipe to the one this build's template writes for the entry's
// problem and config on `device`, after checking that `measured` (the recipe
// the tuner measured, when given) is that recipe: what is stored is exactly
// what was timed, and what every later answer will re-derive.
absl::Status SetTemplateRecipe(const DeviceInfo& device, const LaunchRecipe* measured, v1::Entry* entry) {
  absl::StatusOr<LaunchRecipe> recipe = TemplateRecipe(entry->problem(), entry->config(), device);
  if (!recipe.ok()) {
    return absl::InternalError(
        absl::StrCat("the tune's winner has no recipe of this build: ", recipe.status().message()));
  }
  if (measured != nullptr) {
    const v1::LaunchRecipe timed = WithoutLoweredNames(RecipeToProto(*measured, /*include_cubin=*/false));
    if (absl::Status s = CompareRecipe("the tune's winner: ", timed, *recipe); !s.ok()) {
      return absl::InternalError(s.message());
    }
  }
  *entry->mutable_recipe() = RecipeToProto(*recipe, /*include_cubin=*/false);
  return absl::OkStatus();
}

}  // namespace

KtuneServiceImpl::KtuneServiceImpl(Store* store, KernelCache* kernel_cache, std::unique_ptr<CandidateExecutor> executor,
                                   std::string compile_only_reason, const ServiceOptions& options)
    : store_(store),
      kernel_cache_(kernel_cache),
      entries_(store, [this](const v1::Entry& entry) { return EntryAnswer(entry); }),
      executor_(std::move(executor)),
      compile_only_reason_(std::move(compile_only_reason)),
      target_(executor_ ? executor_->device() : CompileOnlyTarget()),
      target_key_(DeviceKey(target_)),
      op_software_(OpSoftware()),
      current_software_(CurrentSoftware(op_software_)),
      options_(options),
      started_(std::chrono::steady_clock::now()),
      queue_(options.max_queued_tunes) {
  // Nothing is read from the store here: entries are read when asked for
  // (EntryCache), so the daemon starts in the same time with any number.
  DeclareMetrics();
}

KtuneServiceImpl::~KtuneServiceImpl() { queue_.Shutdown(); }

void KtuneServiceImpl::DeclareMetrics() {
  using K = Metrics::Kind;
  metrics_.Declare("ktune_getconfig_total", K::kCounter,
                   "GetConfig answers by how they were obtained (hit, heuristic, nearest, tuned, "
                   "not_found, refused, cancelled, error)");
  metrics_.DeclareHistogram(
      "ktune_getconfig_seconds", "GetConfig latency in the daemon (decoded request to answer), by answer",
      {25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 1, 10, 60, 300, 1800});
  metrics_.Declare("ktune_build_info", K::kGauge, "Always 1; the labels say what this ktuned is built from");
  metrics_.Declare("ktune_compile_only", K::kGauge,
                   "1 when this ktuned has no usable GPU (serves cached and heuristic answers, cannot tune)");
  metrics_.Declare("ktune_tunes_total", K::kCounter, "Tuning jobs finished, by result");
  metrics_.Declare("ktune_tune_seconds_total", K::kCounter, "Wall time spent in tuning jobs");
  metrics_.Declare("ktune_compile_seconds_total", K::kCounter,
                   "NVRTC compile time summed over candidates (all compile threads)");
  metrics_.Declare("ktune_run_seconds_total", K::kCounter, "Wall time verifying and timing candidates on the GPU");
  metrics_.Declare("ktune_kernel_cache_hits_total", K::kCounter,
                   "Candidates whose cubin came from the compiled-kernel cache");
  metrics_.Declare("ktune_candidates_compiled_total", K::kCounter, "Candidates compiled by NVRTC");
  metrics_.Declare("ktune_quarantined_total", K::kCounter, "Candidates quarantined after a fault or a hang, by reason");
  metrics_.Declare("ktune_candidates_total", K::kCounter,
                   "Candidates that finished, by outcome (ok, compile_error, wrong_answer, "
                   "launch_error)");
  metrics_.Declare("ktune_tune_jobs_joined_total", K::kCounter,
                   "Tune requests that shared an already queued or running job of their key");
  metrics_.Declare("ktune_tune_jobs_rejected_total", K::kCounter, "Tune requests refused because the queue was full");
  metrics_.Declare("ktune_tune_jobs_cancelled_total", K::kCounter,
                   "Tuning jobs dropped because every caller waiting for them went away");
  metrics_.Declare("ktune_tune_queue_depth", K::kGauge, "Tuning jobs waiting");
  metrics_.Declare("ktune_tunes_running", K::kGauge, "Tuning jobs running");
  metrics_.Declare("ktune_entries", K::kGauge, "Tuned entries stored, by op");

  // Every label value a family can take is exported from the start, at 0.
  static constexpr std::array<const char*, kAnswerKinds> kAnswerNames = {
      "hit", "heuristic", "nearest", "tuned", "not_found", "refused", "cancelled", "error"};
  for (int i = 0; i < kAnswerKinds; ++i) {
    answer_metrics_[i] = {metrics_.Get("ktune_getconfig_total", {{"answer", kAnswerNames[i]}}),
                          metrics_.GetHistogram("ktune_getconfig_seconds", {{"answer", kAnswerNames[i]}})};
  }
  for (const char* result : {"ok", "failed", "cancelled"}) metrics_.Get("ktune_tunes_total", {{"result", result}});
  for (CandidateStatus status : {CandidateStatus::kOk, CandidateStatus::kCompileError, CandidateStatus::kWrongAnswer,
                                 CandidateStatus::kLaunchError, CandidateStatus::kFault, CandidateStatus::kTimeout,
                                 CandidateStatus::kQuarantined}) {
    metrics_.Get("ktune_candidates_total", {{"status", CandidateStatusName(status)}});
  }
  for (const char* reason : {"fault", "timeout"}) metrics_.Get("ktune_quarantined_total", {{"reason", reason}});
  for (const char* op : kEntryOps) metrics_.Get("ktune_entries", {{"op", op}});
  metrics_.Get("ktune_build_info", {{"version", KTUNE_VERSION}, {"nvrtc", absl::StrCat(NvrtcVersion())}})->Set(1);
  metrics_.Get("ktune_compile_only")->Set(compile_only() ? 1 : 0);
}

void KtuneServiceImpl::ObserveAnswer(Answer answer, std::chrono::steady_clock::time_point start) {
  answer_metrics_[static_cast<int>(answer)].seconds->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void KtuneServiceImpl::CountAnswer(Answer answer, std::chrono::steady_clock::time_point start) {
  answer_metrics_[static_cast<int>(answer)].total->Add(1);
  ObserveAnswer(answer, start);
}

void KtuneServiceImpl::RefreshGauges() {
  const TuneQueue::Stats s = queue_.stats();
  metrics_.Set("ktune_tune_queue_depth", s.queued);
  metrics_.Set("ktune_tunes_running", s.running);
  metrics_.Set("ktune_tune_jobs_joined_total", static_cast<double>(s.jobs_joined));
  metrics_.Set("ktune_tune_jobs_rejected_total", static_cast<double>(s.jobs_rejected));
  metrics_.Set("ktune_tune_jobs_cancelled_total", static_cast<double>(s.jobs_cancelled));
  if (absl::StatusOr<std::map<std::string, int64_t>> counts = store_->CountByOp(); counts.ok()) {
    // An op with no entries (left) reads 0, not its last count.
    for (const char* op : kEntryOps) {
      if (counts->count(op) == 0) metrics_.Set("ktune_entries", 0, "op", op);
    }
    for (const auto& [op, n] : *counts) metrics_.Set("ktune_entries", static_cast<double>(n), "op", op);
  }
}

std::map<std::string, SoftwareFingerprint> KtuneServiceImpl::OpSoftware() {
  std::map<std::string, SoftwareFingerprint> software;
  v1::Problem gemm;
  gemm.mutable_gemm();
  if (absl::StatusOr<SoftwareFingerprint> s = BuildSoftware(gemm); s.ok()) software["gemm"] = *s;
  for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
    for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) {
      NormProblem p;
      p.op = op;
      p.pass = pass;
      v1::Problem problem;
      *problem.mutable_norm() = NormProblemToProto(p);
      // Not served (its template is missing): none of its entries is stale.
      if (absl::StatusOr<SoftwareFingerprint> s = BuildSoftware(problem); s.ok()) software[OpName(p)] = *s;
    }
  }
  return software;
}

std::map<std::string, std::string> KtuneServiceImpl::CurrentSoftware(
    const std::map<std::string, SoftwareFingerprint>& op_software) {
  std::map<std::string, std::string> keys;
  for (const auto& [op, software] : op_software) keys[op] = SoftwareKey(software);
  return keys;
}

absl::StatusOr<KtuneServiceImpl::Resolved> KtuneServiceImpl::Resolve(const v1::Problem& problem) const {
  // Once per request: the problem is converted and validated once, and the
  // op's software fingerprint and key come from tables made at start.
  Resolved r;
  if (problem.has_gemm()) {
    if (absl::Status s = ValidateGemmProblem(problem.gemm()); !s.ok()) return s;
    r.gemm = problem.gemm();
    r.key.op = "gemm";
    r.key.problem_key = GemmCanonicalKey(problem.gemm());
  } else if (problem.has_norm()) {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    if (absl::Status s = ValidateNormProblem(*norm); !s.ok()) return s;
    r.problem = *norm;
    r.key.op = OpName(*norm);
    r.key.problem_key = CanonicalKey(*norm);
  } else {
    return absl::InvalidArgumentError("problem: missing (set problem.norm)");
  }
  auto software = op_software_.find(r.key.op);
  auto software_key = current_software_.find(r.key.op);
  if (software == op_software_.end() || software_key == current_software_.end()) {
    // As BuildSoftware answers it (the op's template is not in this build).
    absl::StatusOr<SoftwareFingerprint> built = BuildSoftware(problem);
    return built.ok() ? absl::InternalError(absl::StrCat("no software fingerprint for ", r.key.op)) : built.status();
  }
  r.software = software->second;
  r.key.software_key = software_key->second;
  r.key.device_key = target_key_;
  r.proto = problem;
  return r;
}

void KtuneServiceImpl::RememberCode(const LaunchRecipe& recipe) {
  if (recipe.is_cublaslt_call() || recipe.cubin.empty()) return;
  CompiledCode code{recipe.cubin, {}};
  for (const KernelLaunch& k : recipe.kernels) code.lowered_names.push_back(k.lowered_name);
  absl::MutexLock lock(&compiled_mu_);
  compiled_.insert_or_assign(CompileKey(recipe), std::move(code));
}

absl::Status KtuneServiceImpl::AttachCode(LaunchRecipe* recipe) {
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
  // Compiled on a copy: only its code is kept, whatever else it holds.
  LaunchRecipe program = *recipe;
  if (kernel_cache_ == nullptr || !kernel_cache_->Lookup(&program, NvrtcVersion())) {
    CompileResult result = Compile(&program);
    if (!result.ok) {
      return absl::InternalError(absl::StrCat("compiling ", program.template_id, " failed: ", result.log));
    }
    metrics_.Add("ktune_compile_seconds_total", result.compile_seconds);
    if (kernel_cache_ != nullptr) kernel_cache_->Store(program, NvrtcVersion());
  }
  CompiledCode code{program.cubin, {}};
  for (const KernelLaunch& k : program.kernels) code.lowered_names.push_back(k.lowered_name);
  attach(code);
  absl::MutexLock lock(&compiled_mu_);
  compiled_.insert_or_assign(key, std::move(code));
  return absl::OkStatus();
}

absl::StatusOr<LaunchRecipe> KtuneServiceImpl::ServedRecipe(const v1::Problem& problem, const v1::Config& config) {
  absl::StatusOr<LaunchRecipe> recipe = TemplateRecipe(problem, config, target_);
  if (!recipe.ok()) return recipe.status();
  if (absl::Status s = AttachCode(&*recipe); !s.ok()) return s;
  return recipe;
}

absl::StatusOr<v1::GetConfigResponse> KtuneServiceImpl::EntryAnswer(const v1::Entry& entry) const {
  // The stored recipe is checked, then the template's own is served: a store
  // or bundle can say which config won, never how to launch it.
  absl::StatusOr<LaunchRecipe> recipe = TemplateRecipe(entry.problem(), entry.config(), target_);
  if (!recipe.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stored entry: recipe: this build's template writes none for its config on ", Arch(target_), ": ",
                     recipe.status().message()));
  }
  if (absl::Status s = CompareRecipe("stored entry: ", WithoutLoweredNames(entry.recipe()), *recipe); !s.ok()) {
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

absl::Status KtuneServiceImpl::AnswerFromEntry(const ServedEntry& served, bool include_cubin,
                                               v1::GetConfigResponse* response) {
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

absl::Status KtuneServiceImpl::AnswerUntuned(const Resolved& r, const NormConfig& config, v1::Source source,
                                             bool include_cubin, v1::GetConfigResponse* response) {
  v1::Config proto;
  *proto.mutable_norm() = NormConfigToProto(config);
  absl::StatusOr<LaunchRecipe> compiled = ServedRecipe(r.proto, proto);
  if (!compiled.ok()) return compiled.status();
  *response->mutable_config() = std::move(proto);
  response->set_source(source);
  *response->mutable_recipe() = RecipeToProto(*compiled, include_cubin);
  *response->mutable_device() = DeviceToProto(target_);
  *response->mutable_software() = SoftwareToProto(r.software);
  return absl::OkStatus();
}

absl::Status KtuneServiceImpl::AnswerNearestGemm(const Resolved& r, const v1::Entry& nearest, bool include_cubin,
                                                 v1::GetConfigResponse* response) {
  const v1::GemmConfig& config = nearest.config().gemm();
  // The tuned config of another M, re-judged and re-written for this one; a
  // cuBLASLt algorithm is not (the caller would have to check it for this M).
  if (config.has_cublaslt()) return absl::NotFoundError("the nearest entry is a cuBLASLt algorithm");
  absl::StatusOr<LaunchRecipe> compiled = ServedRecipe(r.proto, nearest.config());
  if (!compiled.ok()) {
    // A config the template refuses for this M is no answer; a compile error is.
    return absl::IsInternal(compiled.status()) ? compiled.status() : absl::NotFoundError(compiled.status().message());
  }
  *response->mutable_config()->mutable_gemm() = config;
  response->set_source(v1::NEAREST);
  *response->mutable_tuned_for() = nearest.problem();
  *response->mutable_recipe() = RecipeToProto(*compiled, include_cubin);
  *response->mutable_device() = DeviceToProto(target_);
  *response->mutable_software() = SoftwareToProto(r.software);
  return absl::OkStatus();
}

void KtuneServiceImpl::CountTune(const std::string& key, const absl::Status& status, double tune_seconds,
                                 double compile_seconds) {
  if (!status.ok()) {
    metrics_.Add("ktune_tunes_total", 1, "result", absl::IsCancelled(status) ? "cancelled" : "failed");
    spdlog::error("event=tune_failed key=\"{}\" error=\"{}\"", key, SafeText(status.message(), 1024));
    return;
  }
  metrics_.Add("ktune_tunes_total", 1, "result", "ok");
  metrics_.Add("ktune_tune_seconds_total", tune_seconds);
  metrics_.Add("ktune_compile_seconds_total", compile_seconds);
}

absl::Status KtuneServiceImpl::AnswerUntunedGemm(const Resolved& r, bool include_cubin,
                                                 v1::GetConfigResponse* response) {
  // What a compiler gets before a GEMM is tuned: the template family that won
  // the H200's bench for such a problem
  // (bench/results/2026-11-29-gemm-5237382.md) with its model's best config: skinny for
  // M <= 16, wgmma on sm_90, else mma.sync.
  // The untuned wgmma answer is the model's best without split-K: a split-K
  // recipe needs a zeroed workspace, and the model's split-K estimate has not
  // been checked against the GPU yet. fp8 is answered alike since its wgmma
  // kernels ran correctly on the H200 (bench/results/2026-11-29-gemm-fp8-wgmma-5ea37ac.md:
  // every config of the GPU tests and of the 21 bench shapes); where its K is
  // too long for one fp8 accumulator the space has only split or promoted
  // configs. Promoted configs verify on the H200 but stay below cuBLASLt
  // (0.80-0.94x, bench/results/2026-11-30-gemm-paired-263d781.md; 0.94-0.98x at the
  // 8192-row bench shapes since 6a2c972,
  // bench/results/2026-11-30-gemm-fp8-promotion-6a2c972.md),
  // which a caller without an answer falls back to, so they are tuned but
  // never an untuned answer: such a K has no answer.
  // The skinny template's fp8 form serves M <= 16 like its bf16 form since it
  // ran correctly on the H200 (bench/results/2026-11-30-norms-gemm-158b556.md: the GPU
  // tests, and the best own kernel at 7 of the 8 fp8 bench shapes with
  // M <= 16); its config is the one most often fastest there
  // (SkinnyUntunedConfig).
  // B as [K, N] alike since its wgmma kernels ran correctly on the H200
  // (bench/results/2026-11-30-wgmma-kn-norm-clusters-c3fea25.md, 723fbce: the GPU tests, and every
  // candidate at four bench shapes).
  v1::Config config;
  if (const std::optional<SkinnyConfig> skinny = SkinnyUntunedConfig(*r.gemm, target_)) {
    *config.mutable_gemm()->mutable_skinny() = SkinnyConfigToProto(*skinny);
  } else if (const std::optional<WgmmaTileConfig> wgmma = BestUnsplit(WgmmaSearchSpace(*r.gemm, target_))) {
    *config.mutable_gemm()->mutable_wgmma() = WgmmaTileConfigToProto(*wgmma);
  } else if (const std::vector<GemmTileConfig> mma = GemmSearchSpace(*r.gemm, target_); !mma.empty()) {
    *config.mutable_gemm()->mutable_mma_sync() = GemmTileConfigToProto(mma.front());
  } else {
    return absl::FailedPreconditionError(
        "no heuristic answer for this GEMM: no template serves it unsplit (fp8: K over 4096 needs split-K, "
        "promotion or cuBLASLt, measured and checked on the GPU first); ask with TUNE_ON_MISS");
  }
  absl::StatusOr<LaunchRecipe> compiled = ServedRecipe(r.proto, config);
  if (!compiled.ok()) return compiled.status();
  *response->mutable_config() = std::move(config);
  response->set_source(v1::HEURISTIC);
  *response->mutable_recipe() = RecipeToProto(*compiled, include_cubin);
  *response->mutable_device() = DeviceToProto(target_);
  *response->mutable_software() = SoftwareToProto(r.software);
  return absl::OkStatus();
}

std::set<std::string> KtuneServiceImpl::QuarantinedFor(const Resolved& r) {
  std::set<std::string> out;
  if (absl::StatusOr<std::vector<QuarantineRecord>> q = store_->Quarantined(r.key.device_key, r.key.software_key);
      q.ok()) {
    for (const QuarantineRecord& record : *q) out.insert(record.candidate);
  }
  return out;
}

std::function<void(const std::string&, const std::string&, const std::string&)> KtuneServiceImpl::QuarantineFn(
    const Resolved& r) {
  return [this, key = r.key](const std::string& candidate, const std::string& reason, const std::string& detail) {
    spdlog::error("event=candidate_quarantined key=\"{}\" reason={} candidate=\"{}\" detail=\"{}\"", key.problem_key,
                  reason, SafeText(candidate), SafeText(detail, 2000));
    metrics_.Add("ktune_quarantined_total", 1, "reason", reason);
    absl::Status s = store_->Quarantine({key.device_key, key.software_key, candidate, reason, detail.substr(0, 2000),
                                         absl::ToUnixSeconds(absl::Now())});
    if (!s.ok()) spdlog::error("event=quarantine_store_failed error=\"{}\"", std::string(s.message()));
  };
}

TuneQueue::Result KtuneServiceImpl::TuneGemmAndStore(const Resolved& r, int repetitions,
                                                     const std::atomic<bool>& cancelled,
                                                     const TuneQueue::ProgressFn& progress) {
  GemmTuneOptions options;
  if (repetitions > 0) options.measure.repetitions = repetitions;
  options.cancelled = &cancelled;
  options.kernel_cache = kernel_cache_;
  options.quarantined = QuarantinedFor(r);
  options.on_quarantine = QuarantineFn(r);
  spdlog::info("event=tune_start key=\"{}\"", r.key.problem_key);
  // The GEMM tuner reports once it is done: its candidates are then replayed
  // as progress, in order.
  auto say = [&](const std::string& stage, int done, int total, const std::string& message) {
    if (!progress) return;
    v1::TuneEvent event;
    event.mutable_progress()->set_stage(stage);
    event.mutable_progress()->set_done(done);
    event.mutable_progress()->set_total(total);
    event.mutable_progress()->set_message(message);
    progress(event);
  };
  say("generated", 0, 0, absl::StrCat("GEMM candidates for ", r.key.problem_key, ": our templates and cuBLASLt"));
  absl::StatusOr<GemmTuneResult> result = TuneGemm(*r.gemm, executor_.get(), options);
  CountTune(r.key.problem_key, result.status(), result.ok() ? result->tune_seconds : 0,
            result.ok() ? result->compile_seconds : 0);
  if (!result.ok()) return result.status();
  metrics_.Add("ktune_kernel_cache_hits_total", result->kernel_cache_hits);
  metrics_.Add("ktune_candidates_compiled_total", result->compiled);
  int measured = 0;
  const int outcomes = static_cast<int>(result->outcomes.size());
  for (int i = 0; i < outcomes; ++i) {
    const GemmCandidateOutcome& o = result->outcomes[i];
    const std::string status = o.status.substr(0, o.status.find(':'));
    metrics_.Add("ktune_candidates_total", 1, "status", status);
    measured += o.status == "ok";
    say("measured", i + 1, outcomes,
        absl::StrCat(o.name, ": ", o.status.substr(0, 300),
                     o.status == "ok" ? absl::StrFormat(" %.2f us", o.timing.median_us) : "",
                     o.sustained ? absl::StrFormat(", %.2f us sustained", o.sustained->median_us) : ""));
  }
  if (result->tie_break) {
    spdlog::info("event=tie_break key=\"{}\" challenger=\"{}\" ratio={:.3f} rounds={} won={}", r.key.problem_key,
                 result->tie_break_challenger, result->tie_break->median_ratio, result->tie_break->ratios.size(),
                 HeadToHeadFavoursFirst(*result->tie_break));
  }
  v1::Entry entry;
  *entry.mutable_problem()->mutable_gemm() = *r.gemm;
  *entry.mutable_device() = DeviceToProto(target_);
  *entry.mutable_software() = SoftwareToProto(r.software);
  const GemmCandidate& w = result->winner;
  if (w.tile.has_value()) {
    *entry.mutable_config()->mutable_gemm()->mutable_mma_sync() = GemmTileConfigToProto(*w.tile);
  } else if (w.wgmma.has_value()) {
    *entry.mutable_config()->mutable_gemm()->mutable_wgmma() = WgmmaTileConfigToProto(*w.wgmma);
  } else if (w.skinny.has_value()) {
    *entry.mutable_config()->mutable_gemm()->mutable_skinny() = SkinnyConfigToProto(*w.skinny);
  } else {
    v1::CublasLtAlgorithm* a = entry.mutable_config()->mutable_gemm()->mutable_cublaslt();
    a->set_algo(w.recipe.cublaslt_algo);
    a->set_version(CublasLtLibraryVersion());
    a->set_workspace_bytes(w.recipe.workspace_bytes);
  }
  // A cuBLASLt call is wholly its config; a template's recipe is checked to be
  // the one the template writes for the config that won.
  if (absl::Status s = SetTemplateRecipe(target_, w.is_template() ? &w.recipe : nullptr, &entry); !s.ok()) return s;
  v1::Measurement* m = entry.mutable_measurement();
  m->set_time_us(result->winner_timing.median_us);
  m->set_spread(result->winner_timing.spread);
  m->set_repetitions(result->winner_timing.repetitions);
  m->set_throughput(GemmFlops(*r.gemm) / (result->winner_timing.median_us * 1e6));
  m->set_throughput_unit("TFLOP/s");
  m->set_sustained(result->sustained);
  entry.set_tuned_at_unix(absl::ToUnixSeconds(absl::Now()));
  entry.set_candidates_measured(std::max(measured, 1));
  entry.set_ktune_version(KTUNE_VERSION);
  if (absl::Status s = entries_.Insert(entry); !s.ok()) return s;
  if (w.is_template()) RememberCode(w.recipe);
  spdlog::info(
      "event=tune_done key=\"{}\" answer=\"{}\" time_us={:.2f} sustained={} tflops={:.1f} "
      "candidates={}+{} seconds={:.2f}",
      r.key.problem_key, w.Name(), result->winner_timing.median_us, result->sustained, m->throughput(),
      result->template_candidates, result->cublaslt_candidates, result->tune_seconds);
  return EntryAnswer(entry);
}

TuneQueue::Result KtuneServiceImpl::TuneAndStore(const Resolved& r, int repetitions, bool force,
                                                 const std::atomic<bool>& cancelled,
                                                 const TuneQueue::ProgressFn& progress) {
  // A key stored while this job waited in the queue (e.g. a background tune
  // that ran first) is answered, not tuned again.
  if (!force) {
    if (std::shared_ptr<const ServedEntry> hit = entries_.Lookup(r.key); hit != nullptr && hit->answer.ok()) {
      return *hit->answer;
    }  // else not servable: tuned again, and replaced
  }
  if (cancelled) return absl::CancelledError("every caller waiting for this tune went away");
  if (r.gemm.has_value()) return TuneGemmAndStore(r, repetitions, cancelled, progress);
  TuneOptions options;
  if (repetitions > 0) options.measure.repetitions = repetitions;
  options.search = options_.search;
  options.budget = options_.budget;
  options.kernel_cache = kernel_cache_;
  options.cancelled = &cancelled;
  options.quarantined = QuarantinedFor(r);
  options.on_quarantine = QuarantineFn(r);
  auto on_progress = [&](const TuneProgress& p) {
    v1::TuneEvent event;
    if (p.candidate != nullptr) {
      v1::Candidate* c = event.mutable_candidate();
      *c->mutable_config()->mutable_norm() = NormConfigToProto(p.candidate->config);
      c->set_status(CandidateStatusName(p.candidate->status));
      c->set_detail(p.candidate->detail.substr(0, 2000));
      if (p.candidate->status == CandidateStatus::kOk) {
        c->mutable_measurement()->set_time_us(p.candidate->timing.median_us);
        c->mutable_measurement()->set_spread(p.candidate->timing.spread);
        c->mutable_measurement()->set_repetitions(p.candidate->timing.repetitions);
      }
      progress(event);
      event.Clear();
    }
    v1::TuneEvent::Progress* pr = event.mutable_progress();
    pr->set_stage(p.stage);
    pr->set_done(p.done);
    pr->set_total(p.total);
    pr->set_best_time_us(p.best_time_us);
    pr->set_message(p.message);
    progress(event);
  };

  spdlog::info("event=tune_start key=\"{}\"", r.key.problem_key);
  absl::StatusOr<TuneResult> result = TuneNorm(r.problem, executor_.get(), options, on_progress);
  CountTune(r.key.problem_key, result.status(), result.ok() ? result->tune_seconds : 0,
            result.ok() ? result->compile_seconds : 0);
  if (!result.ok()) return result.status();
  metrics_.Add("ktune_run_seconds_total", result->run_seconds);
  metrics_.Add("ktune_kernel_cache_hits_total", result->kernel_cache_hits);
  metrics_.Add("ktune_candidates_compiled_total", result->compiled);
  for (const CandidateOutcome& o : result->outcomes) {
    if (o.status == CandidateStatus::kNotMeasured) continue;
    metrics_.Add("ktune_candidates_total", 1, "status", CandidateStatusName(o.status));
  }
  v1::Entry entry;
  *entry.mutable_problem()->mutable_norm() = NormProblemToProto(r.problem);
  *entry.mutable_device() = DeviceToProto(target_);
  *entry.mutable_software() = SoftwareToProto(r.software);
  *entry.mutable_config()->mutable_norm() = NormConfigToProto(result->config);
  if (absl::Status s = SetTemplateRecipe(target_, &result->recipe, &entry); !s.ok()) return s;
  v1::Measurement* m = entry.mutable_measurement();
  m->set_time_us(result->timing.median_us);
  m->set_spread(result->timing.spread);
  m->set_repetitions(result->timing.repetitions);
  m->set_throughput(result->throughput_tbs);
  m->set_throughput_unit("TB/s");
  entry.set_tuned_at_unix(absl::ToUnixSeconds(absl::Now()));
  entry.set_candidates_measured(result->candidates_measured);
  entry.set_ktune_version(KTUNE_VERSION);
  if (absl::Status s = entries_.Insert(entry); !s.ok()) return s;
  RememberCode(result->recipe);
  spdlog::info(
      "event=tune_done key=\"{}\" config=\"{}\" time_us={:.2f} tbs={:.3f} strategy={} "
      "candidates={} measured={} compiled={} cache_hits={} seconds={:.2f} "
      "compile_seconds={:.2f} run_seconds={:.2f} prepare_seconds={:.3f} verify_seconds={:.3f} "
      "time_seconds={:.3f}",
      r.key.problem_key, ToString(result->config), result->timing.median_us, result->throughput_tbs, result->strategy,
      result->candidates_generated, result->candidates_measured, result->compiled, result->kernel_cache_hits,
      result->tune_seconds, result->compile_seconds, result->run_seconds, result->prepare_seconds,
      result->verify_seconds, result->time_seconds);
  return EntryAnswer(entry);
}

absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> KtuneServiceImpl::JoinTune(const Resolved& r, JobPriority priority,
                                                                              int repetitions, bool force,
                                                                              TuneQueue::DoneFn done,
                                                                              TuneQueue::ProgressFn progress) {
  if (compile_only()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this ktuned is compile-only (", compile_only_reason_,
                     "): it answers CACHED_ONLY and HEURISTIC_ON_MISS but cannot tune"));
  }
  auto work = [this, r, repetitions, force](const std::atomic<bool>& cancelled, const TuneQueue::ProgressFn& progress) {
    return TuneAndStore(r, repetitions, force, cancelled, progress);
  };
  absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> ticket =
      queue_.Join(FlatKey(r.key), priority, std::move(work), std::move(done), std::move(progress));
  if (!ticket.ok() && absl::IsResourceExhausted(ticket.status())) {
    spdlog::warn("event=tune_rejected key=\"{}\" error=\"{}\"", r.key.problem_key,
                 std::string(ticket.status().message()));
  }
  return ticket;
}

grpc::ServerUnaryReactor* KtuneServiceImpl::GetConfig(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request_bytes,
                                                      grpc::ByteBuffer* response) {
  v1::GetConfigRequest request;
  grpc::ByteBuffer bytes = *request_bytes;  // shares the slices; parsing consumes its argument
  if (!grpc::SerializationTraits<v1::GetConfigRequest>::Deserialize(&bytes, &request).ok()) {
    return Finish(context, absl::InvalidArgumentError(
                               "the request is not a valid /ktune.v1.KtuneService/GetConfig request message "
                               "(protobuf parse failed)"));
  }
  GetConfigReply reply{response};
  // The hot path pays one level check when debug logging is off.
  if (!spdlog::should_log(spdlog::level::debug)) return ServeGetConfig(context, request, &reply);
  const absl::Time start = absl::Now();
  std::string problem_key;
  reply.problem_key = &problem_key;
  grpc::ServerUnaryReactor* reactor = ServeGetConfig(context, request, &reply);
  // A pending answer (a TUNE_ON_MISS miss waiting for its tune) is written by
  // the tune's thread: source PENDING. An error sends no answer: source NONE.
  const std::string source = reply.pending                            ? "PENDING"
                             : reply.source != v1::SOURCE_UNSPECIFIED ? v1::Source_Name(reply.source)
                                                                      : "NONE";
  spdlog::debug("event=request op=GetConfig problem=\"{}\" policy={} source={} us={}",
                problem_key.empty() ? "invalid" : problem_key, v1::Policy_Name(request.policy()), source,
                absl::ToInt64Microseconds(absl::Now() - start));
  return reactor;
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ServeGetConfig(grpc::CallbackServerContext* context,
                                                           const v1::GetConfigRequest& request_message,
                                                           GetConfigReply* reply) {
  const auto start = std::chrono::steady_clock::now();  // for the latency histogram
  const v1::GetConfigRequest* request = &request_message;
  // Answers built here are serialized into the reply before the call ends.
  v1::GetConfigResponse answer;
  v1::GetConfigResponse* response = &answer;
  auto finish = [&](const absl::Status& status) {
    if (status.ok()) {
      bool own_buffer;
      (void)grpc::SerializationTraits<v1::GetConfigResponse>::Serialize(answer, reply->wire, &own_buffer);
      reply->source = answer.source();
    }
    return Finish(context, status);
  };
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    return finish(s);
  }
  // The whole request is checked before anything is looked up: an unknown
  // policy is refused whether or not the key is stored.
  if (!v1::Policy_IsValid(request->policy())) {
    CountAnswer(Answer::kError, start);
    return finish(absl::InvalidArgumentError(absl::StrCat("policy: unknown value ", request->policy())));
  }
  absl::StatusOr<Resolved> resolved = Resolve(request->problem());
  if (!resolved.ok()) {
    CountAnswer(Answer::kError, start);
    return finish(resolved.status());
  }
  if (reply->problem_key != nullptr) *reply->problem_key = resolved->key.problem_key;
  if (std::shared_ptr<const ServedEntry> hit = entries_.Lookup(resolved->key)) {
    if (hit->answer.ok() && !request->include_cubin()) {
      // The hot path: the entry's answer as serialized when it was read.
      *reply->wire = hit->answer_wire;  // shallow: shares the slices
      reply->source = v1::TUNED;
      CountAnswer(Answer::kHit, start);
      return Finish(context, absl::OkStatus());
    }
    absl::Status served = AnswerFromEntry(*hit, request->include_cubin(), response);
    if (served.ok()) {
      CountAnswer(Answer::kHit, start);
      return finish(absl::OkStatus());
    }
    // Not this build's recipe for its config (a store written by hand, or a
    // device whose recipe differs): answered as a miss, never as stored.
    spdlog::error("event=entry_not_served key=\"{}\" error=\"{}\"", resolved->key.problem_key,
                  std::string(served.message()));
    response->Clear();
  }
  const bool include_cubin = request->include_cubin();
  switch (request->policy()) {
    case v1::CACHED_ONLY:
      CountAnswer(Answer::kNotFound, start);
      return finish(absl::NotFoundError(absl::StrCat("no tuned entry for ", resolved->key.problem_key, " on ",
                                                     compile_only() ? "this compile-only daemon" : target_.name)));
    case v1::TUNE_ON_MISS: {
      reply->pending = true;
      auto attach = [this, include_cubin, problem = resolved->proto](v1::GetConfigResponse* r) -> absl::Status {
        if (!include_cubin) return absl::OkStatus();
        // The tune's answer is this build's recipe for its config (TuneAndStore
        // checked it); compiled here, served with its code.
        if (absl::Status s = VerifyRecipe(problem, r->config(), r->recipe(), target_); !s.ok()) {
          return absl::InternalError(s.message());
        }
        LaunchRecipe recipe = RecipeFromProto(r->recipe());
        if (absl::Status s = AttachCode(&recipe); !s.ok()) return s;
        *r->mutable_recipe() = RecipeToProto(recipe, /*include_cubin=*/true);
        return absl::OkStatus();
      };
      // Counted once the answer is sent, by what it was: a tuned answer, a
      // refusal (compile-only, queue full), a caller that left, or an error.
      auto count = [this, start](const absl::Status& status) {
        const Answer answer = status.ok() ? Answer::kTuned
                              : absl::IsFailedPrecondition(status) || absl::IsResourceExhausted(status)
                                  ? Answer::kRefused
                              : absl::IsCancelled(status) ? Answer::kCancelled
                                                          : Answer::kError;
        CountAnswer(answer, start);
      };
      auto* pending = new PendingAnswer(reply->wire, std::move(attach), std::move(count));
      absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> ticket =
          JoinTune(*resolved, JobPriority::kInteractive, 0, false, pending->Done(), nullptr);
      if (!ticket.ok()) {
        pending->Fail(ticket.status());
      } else {
        pending->Hold(*std::move(ticket));
      }
      return pending;
    }
    case v1::POLICY_UNSPECIFIED:
    case v1::HEURISTIC_ON_MISS: {
      std::shared_ptr<const v1::Entry> nearest;
      if (request->nearest_on_miss()) {
        nearest = resolved->gemm.has_value()
                      ? entries_.Nearest(*resolved->gemm, resolved->key.device_key, resolved->key.software_key)
                      : entries_.Nearest(resolved->problem, resolved->key.device_key, resolved->key.software_key);
      }
      absl::Status answered = absl::NotFoundError("no nearest entry");
      if (nearest != nullptr && resolved->gemm.has_value()) {
        answered = AnswerNearestGemm(*resolved, *nearest, include_cubin, response);
      } else if (nearest != nullptr) {
        absl::StatusOr<NormConfig> config = NormConfigFromProto(nearest->config().norm());
        if (config.ok() && CanImplement(resolved->problem, *config, target_).ok()) {
          answered = AnswerUntuned(*resolved, *config, v1::NEAREST, include_cubin, response);
          if (answered.ok()) *response->mutable_tuned_for() = nearest->problem();
        }
      }
      Answer answer = Answer::kNearest;
      if (!answered.ok()) {
        response->Clear();
        answered = resolved->gemm.has_value()
                       ? AnswerUntunedGemm(*resolved, include_cubin, response)
                       : AnswerUntuned(*resolved, HeuristicNormConfig(resolved->problem, target_), v1::HEURISTIC,
                                       include_cubin, response);
        answer = answered.ok() ? Answer::kHeuristic : Answer::kError;
      }
      if (answered.ok() && !compile_only() && options_.background_tunes) {
        // Nobody waits for it: the next call for this problem finds it tuned.
        absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> background =
            JoinTune(*resolved, JobPriority::kBackground, 0, false, nullptr, nullptr);
        response->set_tune_queued(background.ok());
      }
      CountAnswer(answer, start);
      return finish(answered);
    }
    default:  // refused above; a value added to the enum and not served here
      CountAnswer(Answer::kError, start);
      return finish(absl::InvalidArgumentError(absl::StrCat("policy: unknown value ", request->policy())));
  }
}

grpc::ServerWriteReactor<v1::TuneEvent>* KtuneServiceImpl::Tune(grpc::CallbackServerContext* context,
                                                                const v1::TuneRequest* request) {
  auto* stream = new TuneStream();
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    stream->Close(s);
    return stream;
  }
  absl::StatusOr<Resolved> resolved = Resolve(request->problem());
  if (!resolved.ok()) {
    stream->Close(resolved.status());
    return stream;
  }
  const int repetitions = request->options().repetitions();
  if (repetitions != 0 && (repetitions < 20 || repetitions > 1000)) {
    stream->Close(absl::InvalidArgumentError(
        absl::StrCat("options.repetitions: must be 0 (default) or in [20, 1000], got ", repetitions)));
    return stream;
  }
  const bool force = request->options().force();
  if (!force && !compile_only()) {
    if (std::shared_ptr<const ServedEntry> hit = entries_.Lookup(resolved->key)) {
      v1::TuneEvent event;
      if (AnswerFromEntry(*hit, false, event.mutable_result()).ok()) {
        stream->Push(std::move(event));
        stream->Close(absl::OkStatus());
        return stream;
      }
    }
  }
  absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> ticket =
      JoinTune(*resolved, JobPriority::kInteractive, repetitions, force, stream->Done(), stream->Progress());
  if (!ticket.ok()) {
    stream->Close(ticket.status());
  } else {
    stream->Hold(*std::move(ticket));
  }
  return stream;
}

absl::Status KtuneServiceImpl::CheckOpFilter(const std::string& op) const {
  if (op.empty() || current_software_.count(op) > 0) return absl::OkStatus();
  NormOp norm_op;
  NormPass pass;
  absl::Status s = ParseNormOpName(op, &norm_op, &pass);
  return absl::InvalidArgumentError(absl::StrCat("op: ", s.ok() ? "not served by this daemon" : s.message()));
}

EntryFilter::Stale KtuneServiceImpl::StaleFilter() const { return {target_key_, current_software_}; }

grpc::ServerUnaryReactor* KtuneServiceImpl::ListEntries(grpc::CallbackServerContext* context,
                                                        const v1::ListEntriesRequest* request,
                                                        v1::ListEntriesResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    return Finish(context, s);
  }
  if (absl::Status s = CheckOpFilter(request->op()); !s.ok()) return Finish(context, s);
  if (request->page_size() < 0) {
    return Finish(context,
                  absl::InvalidArgumentError(absl::StrCat("page_size: must be >= 0, got ", request->page_size())));
  }
  EntryFilter filter;
  filter.op = request->op();
  if (request->stale_only()) filter.stale = StaleFilter();
  // The token carries what it was given for, so a token reused with another
  // filter is refused rather than silently skipping or repeating entries.
  const std::string scope = absl::StrCat(request->op(), request->stale_only() ? "|stale" : "|all");
  PageRequest page;
  page.limit = request->page_size() == 0 ? kDefaultPageSize : std::min(request->page_size(), kMaxPageSize);
  if (!request->page_token().empty()) {
    absl::StatusOr<EntryKey> after = DecodePageToken(request->page_token(), scope);
    if (!after.ok()) return Finish(context, after.status());
    page.after = *std::move(after);
  }
  absl::StatusOr<Page> listed = store_->ListPage(filter, page);
  if (!listed.ok()) return Finish(context, listed.status());
  for (StoredEntry& e : listed->entries) *response->add_entries() = std::move(e.entry);
  if (listed->more) response->set_next_page_token(EncodePageToken(listed->entries.back().key, scope));
  return Finish(context, absl::OkStatus());
}

absl::StatusOr<KtuneServiceImpl::ExportSelection> KtuneServiceImpl::SelectForExport(
    const v1::ExportBundleRequest& request) const {
  if (absl::Status s = CheckOpFilter(request.op()); !s.ok()) return s;
  if (request.since_unix() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("since_unix: must be >= 0, got ", request.since_unix()));
  }
  ExportSelection selection;
  selection.filter.op = request.op();
  selection.filter.since_unix = request.since_unix();
  selection.device_name = request.device_name();
  return selection;
}

absl::Status KtuneServiceImpl::ExportPage(const ExportSelection& selection, std::optional<EntryKey>* after,
                                          size_t max_bytes, BundleEncoder* encoder, bool* done) {
  PageRequest page;
  page.after = *after;
  page.max_bytes = max_bytes;
  absl::StatusOr<Page> listed = store_->ListPage(selection.filter, page);
  if (!listed.ok()) return listed.status();
  for (const StoredEntry& e : listed->entries) {
    // The device name is inside the entry, not a column: filtered here.
    if (!selection.device_name.empty() && e.entry.device().name() != selection.device_name) continue;
    encoder->Add(e.entry);
  }
  *done = !listed->more;
  if (!listed->entries.empty()) *after = listed->entries.back().key;
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ExportBundle(grpc::CallbackServerContext* context,
                                                         const v1::ExportBundleRequest* request,
                                                         v1::ExportBundleResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<ExportSelection> selection = SelectForExport(*request);
  if (!selection.ok()) return Finish(context, selection.status());
  BundleEncoder encoder(absl::StrCat("ktune ", KTUNE_VERSION), absl::ToUnixSeconds(absl::Now()));
  std::optional<EntryKey> after;
  for (bool done = false; !done;) {
    if (context->IsCancelled()) return Finish(context, absl::CancelledError("the caller went away"));
    if (absl::Status s = ExportPage(*selection, &after, size_t{2} << 20, &encoder, &done); !s.ok()) {
      return Finish(context, s);
    }
    // One answer is one message: past the bound it is refused, not built.
    if (encoder.payload_bytes() > kMaxUnaryExportBytes) {
      return Finish(context, absl::FailedPreconditionError(
                                 absl::StrCat("the bundle is over ", kMaxUnaryExportBytes >> 20,
                                              " MiB, the most one ExportBundle answer carries; use ExportBundleStream "
                                              "(`ktune export` streams), or narrow it (op, device_name, since_unix)")));
    }
  }
  const std::string header = encoder.Header();
  response->set_bundle(absl::StrCat(header, encoder.TakePayload()));
  response->set_entries(static_cast<int32_t>(encoder.entries()));
  spdlog::info("event=export entries={} bytes={} op=\"{}\" gpu=\"{}\" since_unix={}", encoder.entries(),
               response->bundle().size(), SafeText(request->op()), SafeText(request->device_name()),
               request->since_unix());
  return Finish(context, absl::OkStatus());
}

namespace {

// ExportBundleStream: one page of entries encoded per write, so the daemon
// holds about one chunk whatever the bundle weighs, and a caller that goes
// away stops the reading at the next page.
class ExportStream final : public grpc::ServerWriteReactor<v1::ExportBundleChunk> {
 public:
  using PageFn = std::function<absl::Status(std::optional<EntryKey>*, BundleEncoder*, bool*)>;

  ExportStream(PageFn page, std::string log_note)
      : page_(std::move(page)),
        log_note_(std::move(log_note)),
        encoder_(absl::StrCat("ktune ", KTUNE_VERSION), absl::ToUnixSeconds(absl::Now())) {
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(ToGrpcStatus(absl::CancelledError("the caller went away during the export")));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  static constexpr size_t kChunkBytes = size_t{1} << 20;

  void Next() {
    if (sent_header_) {
      spdlog::info("event=export_stream entries={} bytes={} {}", encoder_.entries(),
                   encoder_.payload_bytes() + kBundleHeaderBytes, log_note_);
      Finish(grpc::Status::OK);
      return;
    }
    while (!done_ && encoder_.pending_bytes() < kChunkBytes) {
      if (absl::Status s = page_(&after_, &encoder_, &done_); !s.ok()) {
        Finish(ToGrpcStatus(s));
        return;
      }
    }
    chunk_.Clear();
    if (encoder_.pending_bytes() > 0) {
      chunk_.set_payload(encoder_.TakePayload());
    } else {
      chunk_.set_header(encoder_.Header());
      chunk_.set_entries(encoder_.entries());
      sent_header_ = true;
    }
    StartWrite(&chunk_);
  }

  PageFn page_;
  const std::string log_note_;
  BundleEncoder encoder_;
  std::optional<EntryKey> after_;
  bool done_ = false;
  bool sent_header_ = false;
  v1::ExportBundleChunk chunk_;  // alive until its write completes
};

// Ends a server stream at once with `status`.
class FailedExportStream final : public grpc::ServerWriteReactor<v1::ExportBundleChunk> {
 public:
  explicit FailedExportStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<v1::ExportBundleChunk>* KtuneServiceImpl::ExportBundleStream(
    grpc::CallbackServerContext* context, const v1::ExportBundleRequest* request) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    return new FailedExportStream(s);
  }
  absl::StatusOr<ExportSelection> selection = SelectForExport(*request);
  if (!selection.ok()) return new FailedExportStream(selection.status());
  return new ExportStream(
      [this, selection = *std::move(selection)](std::optional<EntryKey>* after, BundleEncoder* encoder, bool* done) {
        return ExportPage(selection, after, size_t{1} << 20, encoder, done);
      },
      absl::StrCat("op=\"", SafeText(request->op()), "\" gpu=\"", SafeText(request->device_name()),
                   "\" since_unix=", request->since_unix()));
}

grpc::ServerUnaryReactor* KtuneServiceImpl::DeleteEntries(grpc::CallbackServerContext* context,
                                                          const v1::DeleteEntriesRequest* request,
                                                          v1::DeleteEntriesResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kAdmin); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<v1::DeleteEntriesResponse> report = Delete(*request);
  if (!report.ok()) return Finish(context, report.status());
  *response = *std::move(report);
  return Finish(context, absl::OkStatus());
}

absl::StatusOr<v1::DeleteEntriesResponse> KtuneServiceImpl::Delete(const v1::DeleteEntriesRequest& request) {
  if (request.problems().empty() && !request.stale()) {
    return absl::InvalidArgumentError("nothing to delete: name problems, or ask for the stale entries");
  }
  if (request.problems_size() > kMaxDeleteProblems) {
    return absl::InvalidArgumentError(
        absl::StrCat("problems: at most ", kMaxDeleteProblems, " per call, got ", request.problems_size()));
  }
  // Every problem is checked before anything is deleted.
  std::vector<EntryFilter> filters;
  for (int i = 0; i < request.problems_size(); ++i) {
    absl::StatusOr<Resolved> r = Resolve(request.problems(i));
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("problems[", i, "]: ", r.status().message()));
    }
    EntryFilter& f = filters.emplace_back();
    f.op = r->key.op;
    f.problem_key = r->key.problem_key;
  }
  if (request.stale()) filters.emplace_back().stale = StaleFilter();
  v1::DeleteEntriesResponse report;
  report.set_dry_run(request.dry_run());
  for (const EntryFilter& f : filters) {
    const size_t room = kMaxDeleteListed - std::min<size_t>(kMaxDeleteListed, report.entries_size());
    absl::StatusOr<DeleteResult> result = entries_.Delete(f, request.dry_run(), room);
    if (!result.ok()) return result.status();
    report.set_deleted(report.deleted() + result->deleted);
    for (const EntryKey& key : result->listed) {
      v1::DeletedEntry* d = report.add_entries();
      d->set_op(key.op);
      d->set_problem_key(key.problem_key);
      d->set_device_key(key.device_key);
      d->set_software_key(key.software_key);
    }
  }
  spdlog::info("event=delete dry_run={} deleted={} problems={} stale={}", request.dry_run(), report.deleted(),
               request.problems_size(), request.stale());
  return report;
}

MergeTarget KtuneServiceImpl::ImportTarget() const {
  MergeTarget target;
  if (compile_only()) {
    target.not_judged_note = "compile-only daemon: no GPU to judge against, stored as bundled";
    return target;
  }
  target.device = DeviceToProto(target_);
  // The fingerprint this daemon would key the entry's problem under (as Resolve does).
  target.software_for = [](const v1::Entry& e) -> absl::StatusOr<v1::SoftwareFingerprint> {
    absl::StatusOr<SoftwareFingerprint> software = BuildSoftware(e.problem());
    if (!software.ok()) {
      return absl::Status(software.status().code(),
                          absl::StrCat("not served by this daemon: ", software.status().message()));
    }
    return SoftwareToProto(*software);
  };
  return target;
}

absl::StatusOr<v1::ImportBundleResponse> KtuneServiceImpl::Import(const v1::ImportBundleRequest& request) {
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(request.bundle());
  if (!bundle.ok()) {
    spdlog::warn("event=import_refused error=\"{}\"", SafeText(bundle.status().message(), 1024));
    return absl::Status(bundle.status().code(),
                        absl::StrCat("bundle refused, nothing imported: ", bundle.status().message()));
  }
  if (!v1::MergePolicy_IsValid(request.policy())) {
    return absl::InvalidArgumentError(absl::StrCat("policy: unknown merge policy ", request.policy()));
  }
  const std::vector<v1::Entry> incoming(bundle->entries().begin(), bundle->entries().end());
  const MergeTarget target = ImportTarget();
  v1::ImportBundleResponse report;
  // Plan and write under the cache's write lock, in one transaction: a tune
  // finishing meanwhile is either seen by the plan or written after it.
  absl::Status s = entries_.Update([&]() -> absl::StatusOr<std::vector<v1::Entry>> {
    // Straight from the store, not through the cache: an import's keys would
    // crowd the hot ones out of memory.
    absl::Status lookup_error;
    absl::StatusOr<MergePlan> plan =
        PlanMerge(incoming, request.policy(), target, [&](const EntryKey& key) -> std::optional<v1::Entry> {
          absl::StatusOr<std::optional<v1::Entry>> e = store_->Get(key);
          if (!e.ok()) {
            lookup_error.Update(e.status());
            return std::nullopt;
          }
          return *std::move(e);
        });
    if (!lookup_error.ok()) return lookup_error;
    if (!plan.ok()) return plan.status();
    report = std::move(plan->report);
    if (request.dry_run()) return std::vector<v1::Entry>();
    return std::move(plan->writes);
  });
  if (!s.ok()) return s;
  report.set_dry_run(request.dry_run());
  spdlog::info(
      "event=import dry_run={} policy={} added={} replaced={} unchanged={} kept={} "
      "rejected={}",
      request.dry_run(), MergePolicyName(request.policy()), report.added(), report.replaced(), report.unchanged(),
      report.kept(), report.rejected());
  return report;
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ImportBundle(grpc::CallbackServerContext* context,
                                                         const v1::ImportBundleRequest* request,
                                                         v1::ImportBundleResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kAdmin); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<v1::ImportBundleResponse> report = Import(*request);
  if (!report.ok()) return Finish(context, report.status());
  *response = *std::move(report);
  return Finish(context, absl::OkStatus());
}

grpc::ServerReadReactor<v1::ImportBundleRequest>* KtuneServiceImpl::ImportBundleStream(
    grpc::CallbackServerContext* context, v1::ImportBundleResponse* response) {
  return new ImportStream(options_.auth.Check(*context, Authorizer::Access::kAdmin), response,
                          [this](const v1::ImportBundleRequest& request) { return Import(request); });
}

grpc::ServerUnaryReactor* KtuneServiceImpl::GetStatus(grpc::CallbackServerContext* context,
                                                      const v1::GetStatusRequest* request,
                                                      v1::GetStatusResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    return Finish(context, s);
  }
  response->set_version(KTUNE_VERSION);
  response->set_compile_only(compile_only());
  if (compile_only()) {
    response->set_compile_only_reason(compile_only_reason_);
  } else {
    *response->add_devices() = DeviceToProto(target_);
  }
  // Counts the database keeps per (op, device, software): a read of a few
  // rows, whatever the store holds.
  absl::StatusOr<std::vector<EntryGroupCount>> groups = store_->CountByGroup();
  if (!groups.ok()) return Finish(context, groups.status());
  int64_t total = 0;
  int64_t stale = 0;
  for (const EntryGroupCount& g : *groups) {
    (*response->mutable_entries_by_op())[g.op] += g.entries;
    total += g.entries;
    if (g.device_key != target_key_) continue;  // another GPU's
    auto current = current_software_.find(g.op);
    if (current != current_software_.end() && current->second != g.software_key) stale += g.entries;
  }
  response->set_entries(total);
  response->set_stale_entries(stale);
  response->set_db_path(store_->path());
  response->set_nvrtc_version(NvrtcVersion());
  response->set_uptime_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  const TuneQueue::Stats queue = queue_.stats();
  response->set_queued_tunes(queue.queued);
  response->set_running_tunes(queue.running);
  RefreshGauges();
  for (const auto& [name, value] : metrics_.Snapshot()) (*response->mutable_metrics())[name] = value;
  return Finish(context, absl::OkStatus());
}

}  // namespace ktune
