#include "daemon/service.h"

#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cache/bundle.h"
#include "daemon/status_mapping.h"
#include "spdlog/spdlog.h"
#include "tuner/kernel_source.h"
#include "tuner/norm_space.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/tuner.h"
#include "tuner/wire.h"

namespace ktune {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::string CompileKey(const LaunchRecipe& r) {
  std::string key = absl::StrCat(r.template_hash, "|", r.arch, "|", absl::StrJoin(r.nvrtc_options, " "));
  for (const KernelLaunch& k : r.kernels) absl::StrAppend(&key, "|", k.name_expression);
  return key;
}

// Streams TuneEvents to one client. Events are queued by the tuning thread and
// written one at a time (gRPC allows a single outstanding write); the call ends
// after the last event with the tune's status.
class TuneStream final : public grpc::ServerWriteReactor<v1::TuneEvent> {
 public:
  void Push(v1::TuneEvent event) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(event));
    MaybeWriteLocked();
  }
  void Close(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    final_status_ = status;
    MaybeWriteLocked();
  }
  // Finishing with an error before anything ran (bad request).
  void Reject(const absl::Status& status) { Close(status); }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) broken_ = true;  // the client went away; drop what is queued
    MaybeWriteLocked();
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    broken_ = true;
  }
  // gRPC calls OnDone only after Finish, which happens after Close: the
  // tuning thread no longer touches the stream.
  void OnDone() override { delete this; }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (broken_) queue_.clear();
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (closed_) {
      finished_ = true;
      Finish(ToGrpcStatus(final_status_));
    }
  }

  absl::Mutex mu_;
  std::deque<v1::TuneEvent> queue_ ABSL_GUARDED_BY(mu_);
  v1::TuneEvent current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

KtuneServiceImpl::KtuneServiceImpl(Store* store, std::unique_ptr<Device> device,
                                   std::string compile_only_reason)
    : store_(store),
      entries_(store),
      device_(std::move(device)),
      compile_only_reason_(std::move(compile_only_reason)),
      target_(device_ ? device_->info() : CompileOnlyTarget()),
      started_(std::chrono::steady_clock::now()) {}

KtuneServiceImpl::~KtuneServiceImpl() {
  absl::MutexLock lock(&threads_mu_);
  threads_mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &running_threads_));
}

void KtuneServiceImpl::RunDetached(std::function<void()> work) {
  {
    absl::MutexLock lock(&threads_mu_);
    ++running_threads_;
  }
  std::thread([this, work = std::move(work)] {
    work();
    absl::MutexLock lock(&threads_mu_);
    --running_threads_;
  }).detach();
}

absl::StatusOr<KtuneServiceImpl::Resolved> KtuneServiceImpl::Resolve(
    const v1::Problem& problem) const {
  if (problem.has_gemm()) {
    return absl::UnimplementedError(
        "GEMM problems are part of the API but not served by this version of ktuned");
  }
  if (!problem.has_norm()) return absl::InvalidArgumentError("problem: missing (set problem.norm)");
  Resolved r;
  absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
  if (!norm.ok()) return norm.status();
  if (absl::Status s = ValidateNormProblem(*norm); !s.ok()) return s;
  r.problem = *norm;
  absl::StatusOr<const KernelSource*> source = FindKernelSource(NormTemplateId(r.problem));
  if (!source.ok()) return source.status();
  r.software.template_hash = (*source)->hash;
  r.software.nvrtc_version = NvrtcVersion();
  r.software.schema_version = kSchemaVersion;
  r.key = EntryKey{OpName(r.problem), CanonicalKey(r.problem), DeviceKey(target_),
                   SoftwareKey(r.software)};
  return r;
}

absl::StatusOr<std::string> KtuneServiceImpl::CubinFor(const v1::LaunchRecipe& stored) {
  LaunchRecipe recipe = RecipeFromProto(stored);
  const std::string key = CompileKey(recipe);
  {
    absl::MutexLock lock(&cubin_mu_);
    if (auto it = compiled_.find(key); it != compiled_.end()) return it->second.cubin;
  }
  CompileResult result = Compile(&recipe);
  if (!result.ok) {
    return absl::InternalError(absl::StrCat("recompiling stored recipe ", recipe.template_id,
                                            " failed: ", result.log));
  }
  absl::MutexLock lock(&cubin_mu_);
  compiled_.insert_or_assign(key, recipe);
  return recipe.cubin;
}

void KtuneServiceImpl::AnswerFromEntry(const v1::Entry& entry, bool include_cubin,
                                       v1::GetConfigResponse* response) {
  *response->mutable_config() = entry.config();
  response->set_source(v1::TUNED);
  *response->mutable_measurement() = entry.measurement();
  *response->mutable_recipe() = entry.recipe();
  *response->mutable_device() = entry.device();
  *response->mutable_software() = entry.software();
  if (include_cubin) {
    absl::StatusOr<std::string> cubin = CubinFor(entry.recipe());
    if (cubin.ok()) {
      response->mutable_recipe()->set_cubin(*cubin);
    } else {
      spdlog::warn("event=cubin_recompile_failed template={} error=\"{}\"",
                   entry.recipe().template_id(), std::string(cubin.status().message()));
    }
  }
}

absl::Status KtuneServiceImpl::AnswerHeuristic(const Resolved& r, bool include_cubin,
                                               v1::GetConfigResponse* response) {
  const NormConfig config = HeuristicNormConfig(r.problem, target_);
  absl::StatusOr<LaunchRecipe> recipe = NormLaunchRecipe(r.problem, config, target_);
  if (!recipe.ok()) return recipe.status();
  const std::string key = CompileKey(*recipe);
  bool cached = false;
  {
    absl::MutexLock lock(&cubin_mu_);
    if (auto it = compiled_.find(key); it != compiled_.end()) {
      *recipe = it->second;
      cached = true;
    }
  }
  if (!cached) {
    CompileResult result = Compile(&*recipe);
    if (!result.ok) {
      return absl::InternalError(
          absl::StrCat("heuristic config ", ToString(config), " failed to compile: ", result.log));
    }
    absl::MutexLock lock(&cubin_mu_);
    compiled_.insert_or_assign(key, *recipe);
  }
  *response->mutable_config()->mutable_norm() = NormConfigToProto(config);
  response->set_source(v1::HEURISTIC);
  *response->mutable_recipe() = RecipeToProto(*recipe, include_cubin);
  *response->mutable_device() = DeviceToProto(target_);
  *response->mutable_software() = SoftwareToProto(r.software);
  return absl::OkStatus();
}

absl::Status KtuneServiceImpl::TuneAndStore(const Resolved& r, int repetitions, bool force,
                                            bool include_cubin, const ProgressSink& progress,
                                            v1::GetConfigResponse* response) {
  if (compile_only()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this ktuned is compile-only (", compile_only_reason_,
        "): it answers CACHED_ONLY and HEURISTIC_ON_MISS but cannot tune"));
  }
  TuneOptions options;
  if (repetitions > 0) options.measure.repetitions = repetitions;
  auto on_progress = [&](const TuneProgress& p) {
    if (!progress) return;
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

  absl::StatusOr<TuneResult> result;
  {
    absl::MutexLock gpu_lock(&gpu_mu_);
    // Callers queued behind a tune of the same key get its result instead of
    // tuning again.
    if (!force) {
      absl::StatusOr<std::optional<v1::Entry>> hit = entries_.Lookup(r.key);
      if (hit.ok() && hit->has_value()) {
        AnswerFromEntry(**hit, include_cubin, response);
        return absl::OkStatus();
      }
    }
    spdlog::info("event=tune_start key=\"{}\"", r.key.problem_key);
    result = TuneNorm(r.problem, device_.get(), options, on_progress);
  }
  if (!result.ok()) {
    spdlog::error("event=tune_failed key=\"{}\" error=\"{}\"", r.key.problem_key,
                  std::string(result.status().message()));
    return result.status();
  }
  v1::Entry entry;
  *entry.mutable_problem()->mutable_norm() = NormProblemToProto(r.problem);
  *entry.mutable_device() = DeviceToProto(target_);
  *entry.mutable_software() = SoftwareToProto(r.software);
  *entry.mutable_config()->mutable_norm() = NormConfigToProto(result->config);
  *entry.mutable_recipe() = RecipeToProto(result->recipe, /*include_cubin=*/false);
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
  {
    absl::MutexLock lock(&cubin_mu_);
    compiled_.insert_or_assign(CompileKey(result->recipe), result->recipe);
  }
  spdlog::info("event=tune_done key=\"{}\" config=\"{}\" time_us={:.2f} tbs={:.3f} candidates={} "
               "seconds={:.2f}",
               r.key.problem_key, ToString(result->config), result->timing.median_us,
               result->throughput_tbs, result->candidates_measured, result->tune_seconds);
  AnswerFromEntry(entry, /*include_cubin=*/false, response);
  if (include_cubin) response->mutable_recipe()->set_cubin(result->recipe.cubin);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KtuneServiceImpl::GetConfig(grpc::CallbackServerContext* context,
                                                      const v1::GetConfigRequest* request,
                                                      v1::GetConfigResponse* response) {
  absl::StatusOr<Resolved> resolved = Resolve(request->problem());
  if (!resolved.ok()) return Finish(context, resolved.status());
  absl::StatusOr<std::optional<v1::Entry>> hit = entries_.Lookup(resolved->key);
  if (!hit.ok()) return Finish(context, hit.status());
  if (hit->has_value()) {
    AnswerFromEntry(**hit, request->include_cubin(), response);
    return Finish(context, absl::OkStatus());
  }
  switch (request->policy()) {
    case v1::CACHED_ONLY:
      return Finish(context, absl::NotFoundError(absl::StrCat(
                                 "no tuned entry for ", resolved->key.problem_key, " on ",
                                 compile_only() ? "this compile-only daemon" : target_.name)));
    case v1::TUNE_ON_MISS: {
      if (compile_only()) {
        return Finish(context, TuneAndStore(*resolved, 0, false, false, nullptr, response));
      }
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      RunDetached([this, r = *resolved, include_cubin = request->include_cubin(), response,
                   reactor] {
        reactor->Finish(ToGrpcStatus(TuneAndStore(r, 0, /*force=*/false, include_cubin, nullptr, response)));
      });
      return reactor;
    }
    case v1::POLICY_UNSPECIFIED:
    case v1::HEURISTIC_ON_MISS:
      return Finish(context, AnswerHeuristic(*resolved, request->include_cubin(), response));
    default:
      return Finish(context, absl::InvalidArgumentError(
                                 absl::StrCat("policy: unknown value ", request->policy())));
  }
}

grpc::ServerWriteReactor<v1::TuneEvent>* KtuneServiceImpl::Tune(
    grpc::CallbackServerContext* context, const v1::TuneRequest* request) {
  auto* stream = new TuneStream();
  absl::StatusOr<Resolved> resolved = Resolve(request->problem());
  if (!resolved.ok()) {
    stream->Reject(resolved.status());
    return stream;
  }
  const int repetitions = request->options().repetitions();
  if (repetitions != 0 && (repetitions < 20 || repetitions > 1000)) {
    stream->Reject(absl::InvalidArgumentError(absl::StrCat(
        "options.repetitions: must be 0 (default) or in [20, 1000], got ", repetitions)));
    return stream;
  }
  if (compile_only()) {
    v1::GetConfigResponse unused;
    stream->Reject(TuneAndStore(*resolved, 0, false, false, nullptr, &unused));
    return stream;
  }
  if (!request->options().force()) {
    absl::StatusOr<std::optional<v1::Entry>> hit = entries_.Lookup(resolved->key);
    if (hit.ok() && hit->has_value()) {
      v1::TuneEvent event;
      AnswerFromEntry(**hit, false, event.mutable_result());
      stream->Push(std::move(event));
      stream->Close(absl::OkStatus());
      return stream;
    }
  }
  RunDetached([this, stream, r = *resolved, repetitions, force = request->options().force()] {
    v1::TuneEvent result;
    absl::Status status = TuneAndStore(
        r, repetitions, force, /*include_cubin=*/false,
        [stream](const v1::TuneEvent& e) { stream->Push(e); }, result.mutable_result());
    if (status.ok()) stream->Push(std::move(result));
    stream->Close(status);
  });
  return stream;
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ListEntries(grpc::CallbackServerContext* context,
                                                        const v1::ListEntriesRequest* request,
                                                        v1::ListEntriesResponse* response) {
  if (!request->op().empty()) {
    NormOp op;
    NormPass pass;
    if (absl::Status s = ParseNormOpName(request->op(), &op, &pass); !s.ok()) {
      return Finish(context, absl::InvalidArgumentError(absl::StrCat("op: ", s.message())));
    }
  }
  absl::StatusOr<std::vector<v1::Entry>> all = store_->List(request->op());
  if (!all.ok()) return Finish(context, all.status());
  for (v1::Entry& e : *all) *response->add_entries() = std::move(e);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ExportBundle(grpc::CallbackServerContext* context,
                                                         const v1::ExportBundleRequest* request,
                                                         v1::ExportBundleResponse* response) {
  absl::StatusOr<std::vector<v1::Entry>> all = store_->List();
  if (!all.ok()) return Finish(context, all.status());
  response->set_bundle(EncodeBundle(*all, absl::StrCat("ktune ", KTUNE_VERSION),
                                    absl::ToUnixSeconds(absl::Now())));
  response->set_entries(static_cast<int32_t>(all->size()));
  spdlog::info("event=export entries={} bytes={}", all->size(), response->bundle().size());
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ImportBundle(grpc::CallbackServerContext* context,
                                                         const v1::ImportBundleRequest* request,
                                                         v1::ImportBundleResponse* response) {
  absl::StatusOr<v1::Bundle> bundle = DecodeBundle(request->bundle());
  if (!bundle.ok()) {
    spdlog::warn("event=import_refused error=\"{}\"", std::string(bundle.status().message()));
    return Finish(context, absl::Status(bundle.status().code(),
                                        absl::StrCat("bundle refused, nothing imported: ",
                                                     std::string(bundle.status().message()))));
  }
  std::vector<v1::Entry> entries(bundle->entries().begin(), bundle->entries().end());
  absl::StatusOr<PutAllStats> stats = entries_.InsertAll(entries);
  if (!stats.ok()) return Finish(context, stats.status());
  response->set_added(stats->added);
  response->set_replaced(stats->replaced);
  response->set_unchanged(stats->unchanged);
  spdlog::info("event=import added={} replaced={} unchanged={}", stats->added, stats->replaced,
               stats->unchanged);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* KtuneServiceImpl::GetStatus(grpc::CallbackServerContext* context,
                                                      const v1::GetStatusRequest* request,
                                                      v1::GetStatusResponse* response) {
  response->set_version(KTUNE_VERSION);
  response->set_compile_only(compile_only());
  if (compile_only()) {
    response->set_compile_only_reason(compile_only_reason_);
  } else {
    *response->add_devices() = DeviceToProto(target_);
  }
  absl::StatusOr<std::map<std::string, int64_t>> counts = store_->CountByOp();
  if (!counts.ok()) return Finish(context, counts.status());
  int64_t total = 0;
  for (const auto& [op, n] : *counts) {
    (*response->mutable_entries_by_op())[op] = n;
    total += n;
  }
  response->set_entries(total);
  response->set_db_path(store_->path());
  response->set_nvrtc_version(NvrtcVersion());
  response->set_uptime_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  return Finish(context, absl::OkStatus());
}

}  // namespace ktune
