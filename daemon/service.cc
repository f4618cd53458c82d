#include "daemon/service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/reactors.h"
#include "daemon/status_mapping.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "spdlog/spdlog.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Finishes a unary call with `answer`'s value moved into `response`, or its error.
template <typename T>
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* context, absl::StatusOr<T> answer, T* response) {
  if (!answer.ok()) return Finish(context, answer.status());
  *response = *std::move(answer);
  return Finish(context, absl::OkStatus());
}

std::vector<GpuExecutor> OneGpu(std::unique_ptr<CandidateExecutor> executor) {
  std::vector<GpuExecutor> gpus;
  if (executor != nullptr) gpus.push_back({0, std::move(executor)});
  return gpus;
}

std::vector<DeviceKind> KindsOf(const std::vector<GpuExecutor>& gpus) {
  std::vector<std::pair<int, DeviceInfo>> devices;
  for (const GpuExecutor& gpu : gpus) devices.emplace_back(gpu.ordinal, gpu.executor->device());
  return GroupByKind(devices);
}

}  // namespace

KtuneServiceImpl::KtuneServiceImpl(Store* store, KernelCache* kernel_cache, std::unique_ptr<CandidateExecutor> executor,
                                   std::string compile_only_reason, const ServiceOptions& options)
    : KtuneServiceImpl(store, kernel_cache, OneGpu(std::move(executor)), std::move(compile_only_reason), options) {}

KtuneServiceImpl::KtuneServiceImpl(Store* store, KernelCache* kernel_cache, std::vector<GpuExecutor> gpus,
                                   std::string compile_only_reason, const ServiceOptions& options)
    : store_(store),
      options_(options),
      started_(std::chrono::steady_clock::now()),
      metrics_(store->ops(), gpus.empty()),
      // Answers per GPU kind, the first GPU's first (the default of a request).
      answers_(store->ops(), store, kernel_cache, KindsOf(gpus), &metrics_),
      // Every entry an import writes is published to the fleet store.
      bundles_(store, &answers_, gpus.empty(),
               [this](const std::vector<v1::Entry>& written) { fleet_.Publish(written); }),
      fleet_(options.fleet, &answers_, &bundles_, &metrics_),
      jobs_(store, kernel_cache, std::move(gpus), std::move(compile_only_reason), &answers_, &fleet_, &metrics_,
            TuneJobOptions{options.max_queued_tunes, options.search}) {
  // Nothing is read from the store here: entries are read when asked for
  // (EntryCache), so the daemon starts in the same time with any number.
}

KtuneServiceImpl::~KtuneServiceImpl() { jobs_.Shutdown(); }

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
    metrics_.CountAnswer(GetConfigAnswer::kError, start);
    return finish(absl::InvalidArgumentError(absl::StrCat("policy: unknown value ", request->policy())));
  }
  absl::StatusOr<Resolved> resolved = answers_.Resolve(request->problem(), request->device());
  if (!resolved.ok()) {
    metrics_.CountAnswer(GetConfigAnswer::kError, start);
    return finish(resolved.status());
  }
  if (reply->problem_key != nullptr) *reply->problem_key = resolved->key.problem_key;
  if (std::shared_ptr<const ServedEntry> hit = answers_.entries()->Lookup(resolved->key)) {
    if (hit->answer.ok() && !request->include_cubin()) {
      // The hot path: the entry's answer as serialized when it was read.
      *reply->wire = hit->answer_wire;  // shallow: shares the slices
      reply->source = v1::TUNED;
      metrics_.CountAnswer(GetConfigAnswer::kHit, start);
      return Finish(context, absl::OkStatus());
    }
    absl::Status served = answers_.AnswerFromEntry(*hit, request->include_cubin(), response);
    if (served.ok()) {
      metrics_.CountAnswer(GetConfigAnswer::kHit, start);
      return finish(absl::OkStatus());
    }
    // Not this build's recipe for its config (a store written by hand, or a
    // device whose recipe differs): answered as a miss, never as stored.
    spdlog::error("event=entry_not_served key=\"{}\" error=\"{}\"", resolved->key.problem_key,
                  std::string(served.message()));
    response->Clear();
  } else if (std::shared_ptr<const ServedEntry> fetched = fleet_.FetchOnMiss(*resolved)) {
    // A local miss the fleet store had: imported (the import's checks), now
    // stored here and served as any stored entry.
    if (answers_.AnswerFromEntry(*fetched, request->include_cubin(), response).ok()) {
      metrics_.CountAnswer(GetConfigAnswer::kHit, start);
      return finish(absl::OkStatus());
    }
    response->Clear();
  }
  const bool include_cubin = request->include_cubin();
  switch (request->policy()) {
    case v1::CACHED_ONLY:
      metrics_.CountAnswer(GetConfigAnswer::kNotFound, start);
      return finish(
          absl::NotFoundError(absl::StrCat("no tuned entry for ", resolved->key.problem_key, " on ",
                                           compile_only() ? "this compile-only daemon" : resolved->kind->device.name)));
    case v1::TUNE_ON_MISS: {
      reply->pending = true;
      auto attach = [this, include_cubin, problem = resolved->proto,
                     device = &resolved->kind->device](v1::GetConfigResponse* r) -> absl::Status {
        return include_cubin ? answers_.AttachVerifiedCode(problem, *device, r) : absl::OkStatus();
      };
      // Counted once the answer is sent, by what it was: a tuned answer, a
      // refusal (compile-only, queue full), a caller that left, or an error.
      auto count = [this, start](const absl::Status& status) {
        const GetConfigAnswer answer = status.ok() ? GetConfigAnswer::kTuned
                                       : absl::IsFailedPrecondition(status) || absl::IsResourceExhausted(status)
                                           ? GetConfigAnswer::kRefused
                                       : absl::IsCancelled(status) ? GetConfigAnswer::kCancelled
                                                                   : GetConfigAnswer::kError;
        metrics_.CountAnswer(answer, start);
      };
      auto* pending = new PendingAnswer(reply->wire, std::move(attach), std::move(count));
      absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> ticket =
          jobs_.Join(*resolved, JobPriority::kInteractive, 0, false, pending->Done(), nullptr);
      if (!ticket.ok()) {
        pending->Fail(ticket.status());
      } else {
        pending->Hold(*std::move(ticket));
      }
      return pending;
    }
    case v1::POLICY_UNSPECIFIED:
    case v1::HEURISTIC_ON_MISS: {
      absl::StatusOr<GetConfigAnswer> answered =
          answers_.AnswerUntuned(*resolved, request->nearest_on_miss(), include_cubin, response);
      if (answered.ok() && !compile_only() && options_.background_tunes) {
        // Nobody waits for it: the next call for this problem finds it tuned.
        absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> background =
            jobs_.Join(*resolved, JobPriority::kBackground, 0, false, nullptr, nullptr);
        response->set_tune_queued(background.ok());
      }
      metrics_.CountAnswer(answered.ok() ? *answered : GetConfigAnswer::kError, start);
      return finish(answered.status());
    }
    default:  // refused above; a value added to the enum and not served here
      metrics_.CountAnswer(GetConfigAnswer::kError, start);
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
  absl::StatusOr<Resolved> resolved = answers_.Resolve(request->problem(), request->device());
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
    if (std::shared_ptr<const ServedEntry> hit = answers_.entries()->Lookup(resolved->key)) {
      v1::TuneEvent event;
      if (answers_.AnswerFromEntry(*hit, false, event.mutable_result()).ok()) {
        stream->Push(std::move(event));
        stream->Close(absl::OkStatus());
        return stream;
      }
    }
  }
  absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> ticket =
      jobs_.Join(*resolved, JobPriority::kInteractive, repetitions, force, stream->Done(), stream->Progress());
  if (!ticket.ok()) {
    stream->Close(ticket.status());
  } else {
    stream->Hold(*std::move(ticket));
  }
  return stream;
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ListEntries(grpc::CallbackServerContext* context,
                                                        const v1::ListEntriesRequest* request,
                                                        v1::ListEntriesResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) return Finish(context, s);
  return FinishWith(context, bundles_.List(*request), response);
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ExportBundle(grpc::CallbackServerContext* context,
                                                         const v1::ExportBundleRequest* request,
                                                         v1::ExportBundleResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) return Finish(context, s);
  return FinishWith(context, bundles_.Export(*request, [context] { return context->IsCancelled(); }), response);
}

grpc::ServerWriteReactor<v1::ExportBundleChunk>* KtuneServiceImpl::ExportBundleStream(
    grpc::CallbackServerContext* context, const v1::ExportBundleRequest* request) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) {
    return BundleService::FailedExportStream(s);
  }
  return bundles_.ExportStream(*request);
}

grpc::ServerUnaryReactor* KtuneServiceImpl::DeleteEntries(grpc::CallbackServerContext* context,
                                                          const v1::DeleteEntriesRequest* request,
                                                          v1::DeleteEntriesResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kAdmin); !s.ok()) return Finish(context, s);
  return FinishWith(context, bundles_.Delete(*request), response);
}

grpc::ServerUnaryReactor* KtuneServiceImpl::ImportBundle(grpc::CallbackServerContext* context,
                                                         const v1::ImportBundleRequest* request,
                                                         v1::ImportBundleResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kAdmin); !s.ok()) return Finish(context, s);
  return FinishWith(context, bundles_.Import(*request), response);
}

grpc::ServerReadReactor<v1::ImportBundleRequest>* KtuneServiceImpl::ImportBundleStream(
    grpc::CallbackServerContext* context, v1::ImportBundleResponse* response) {
  return new ImportStream(options_.auth.Check(*context, Authorizer::Access::kAdmin), response,
                          [this](const v1::ImportBundleRequest& request) { return bundles_.Import(request); });
}

grpc::ServerUnaryReactor* KtuneServiceImpl::GetStatus(grpc::CallbackServerContext* context,
                                                      const v1::GetStatusRequest* request,
                                                      v1::GetStatusResponse* response) {
  if (absl::Status s = options_.auth.Check(*context, Authorizer::Access::kUse); !s.ok()) return Finish(context, s);
  response->set_version(KTUNE_VERSION);
  response->set_compile_only(compile_only());
  if (compile_only()) {
    response->set_compile_only_reason(jobs_.compile_only_reason());
  } else {
    for (const DeviceKind& kind : kinds()) *response->add_devices() = DeviceToProto(kind.device);
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
    if (answers_.KindOfKey(g.device_key) == nullptr) continue;  // a GPU's this daemon does not serve
    auto current = answers_.current_software().find(g.op);
    if (current != answers_.current_software().end() && current->second != g.software_key) stale += g.entries;
  }
  response->set_entries(total);
  response->set_stale_entries(stale);
  response->set_db_path(store_->path());
  response->set_nvrtc_version(NvrtcVersion());
  response->set_uptime_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  const TuneQueue::Stats queue = jobs_.stats();
  response->set_queued_tunes(queue.queued);
  response->set_running_tunes(queue.running);
  for (const GpuState& g : jobs_.Gpus()) {
    v1::GpuStatus* gpu = response->add_gpus();
    gpu->set_ordinal(g.ordinal);
    *gpu->mutable_device() = DeviceToProto(g.device);
    gpu->set_busy(!g.tuning.empty());
    gpu->set_tuning(g.tuning);
    gpu->set_worker_pid(g.worker_pid);
    gpu->set_worker_restarts(g.worker_restarts);
  }
  *response->mutable_fleet_store() = fleet_.Status(request->fleet_counts());
  RefreshGauges();
  for (const auto& [name, value] : metrics()->Snapshot()) (*response->mutable_metrics())[name] = value;
  return Finish(context, absl::OkStatus());
}

}  // namespace ktune
