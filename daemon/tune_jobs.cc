#include "daemon/tune_jobs.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/recipe_check.h"
#include "spdlog/spdlog.h"
#include "tuner/core/safe_text.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace {

// Sets entry->recipe to the one this build's template writes for the entry's
// problem and config on `device`, after checking that `measured` (the recipe
// the tuner measured, when given) is that recipe: what is stored is exactly
// what was timed, and what every later answer will re-derive.
absl::Status SetTemplateRecipe(const Op& op, const DeviceInfo& device, const LaunchRecipe* measured, v1::Entry* entry) {
  absl::StatusOr<LaunchRecipe> recipe = op.TemplateRecipe(entry->problem(), entry->config(), device);
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
  // Stored as stored entries are (without the interface); every answer
  // derives it afresh from the template.
  *entry->mutable_recipe() = StoredRecipe(RecipeToProto(*recipe, /*include_cubin=*/false));
  return absl::OkStatus();
}

// Slot i's GPU kind, as `answers` numbers the kinds: slot i takes only the
// jobs of problems resolved to its kind.
std::vector<int> SlotKinds(const std::vector<GpuExecutor>& gpus, const Answers& answers) {
  std::vector<int> kinds;
  for (const GpuExecutor& gpu : gpus) {
    const DeviceKind* kind = answers.KindOfKey(DeviceKey(gpu.executor->device()));
    kinds.push_back(kind != nullptr ? kind->index : -1);  // -1: no job is of it (a GPU answers do not know)
  }
  return kinds;
}

}  // namespace

TuneJobs::TuneJobs(Store* store, KernelCache* kernel_cache, std::vector<GpuExecutor> gpus,
                   std::string compile_only_reason, Answers* answers, FleetSync* fleet, ServiceMetrics* metrics,
                   const TuneJobOptions& options)
    : store_(store),
      kernel_cache_(kernel_cache),
      gpus_(std::move(gpus)),
      compile_only_reason_(std::move(compile_only_reason)),
      answers_(answers),
      fleet_(fleet),
      metrics_(metrics),
      tuning_(gpus_.size()),
      options_(options),
      queue_(options.max_queued_tunes, SlotKinds(gpus_, *answers)) {}

TuneJobs::~TuneJobs() { queue_.Shutdown(); }

std::vector<GpuState> TuneJobs::Gpus() {
  std::vector<GpuState> out;
  absl::MutexLock lock(&tuning_mu_);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    GpuState g;
    g.ordinal = gpus_[i].ordinal;
    g.device = gpus_[i].executor->device();
    g.tuning = tuning_[i];
    g.worker_pid = gpus_[i].executor->pid();
    g.worker_restarts = gpus_[i].executor->restarts();
    out.push_back(std::move(g));
  }
  return out;
}

std::set<std::string> TuneJobs::QuarantinedFor(const Resolved& r) {
  std::set<std::string> out;
  if (absl::StatusOr<std::vector<QuarantineRecord>> q = store_->Quarantined(r.key.device_key, r.key.software_key);
      q.ok()) {
    for (const QuarantineRecord& record : *q) out.insert(record.candidate);
  }
  return out;
}

std::function<void(const std::string&, const std::string&, const std::string&)> TuneJobs::QuarantineFn(
    const Resolved& r, int ordinal) {
  // Keyed by the GPU kind's fingerprint (the key's device key): a candidate
  // that faulted on one GPU is run on no GPU of its kind (the same part, driver
  // and code), and still on the node's other kinds.
  return
      [this, key = r.key, ordinal](const std::string& candidate, const std::string& reason, const std::string& detail) {
        spdlog::error("event=candidate_quarantined key=\"{}\" gpu={} reason={} candidate=\"{}\" detail=\"{}\"",
                      key.problem_key, ordinal, reason, SafeText(candidate), SafeText(detail, 2000));
        metrics_->CountQuarantine(reason);
        absl::Status s = store_->Quarantine({key.device_key, key.software_key, candidate, reason,
                                             detail.substr(0, 2000), absl::ToUnixSeconds(absl::Now())});
        if (!s.ok()) spdlog::error("event=quarantine_store_failed error=\"{}\"", std::string(s.message()));
      };
}

TuneQueue::Result TuneJobs::TuneAndStore(const GpuExecutor& gpu, const Resolved& r, JobPriority priority,
                                         int repetitions, bool force, const std::atomic<bool>& cancelled,
                                         const TuneQueue::ProgressFn& progress) {
  // A key stored while this job waited in the queue (e.g. a background tune
  // that ran first) is answered, not tuned again.
  if (!force) {
    if (std::shared_ptr<const ServedEntry> hit = answers_->entries()->Lookup(r.key);
        hit != nullptr && hit->answer.ok()) {
      return *hit->answer;
    }  // else not servable: tuned again, and replaced
    // Tuned elsewhere in the fleet meanwhile.
    if (std::shared_ptr<const ServedEntry> fetched = fleet_->FetchOnMiss(r);
        fetched != nullptr && fetched->answer.ok()) {
      return *fetched->answer;
    }
  }
  if (cancelled) return absl::CancelledError("every caller waiting for this tune went away");
  // One tune per key across the fleet: the lock, held until this job ends.
  if (fleet_->ClaimTune(r.key) == FleetSync::Claim::kTunedElsewhere) {
    // Nobody waits for a background tune (unless a caller joined it since).
    if (priority == JobPriority::kBackground && !queue_.HasWaiters(FlatKey(r.key))) {
      spdlog::info("event=tune_left_to_fleet key=\"{}\"", r.key.problem_key);
      return absl::FailedPreconditionError(
          "another daemon of the fleet is tuning this problem; its entry is picked up when it is published");
    }
    bool claimed = false;
    spdlog::info("event=tune_waits_for_fleet key=\"{}\"", r.key.problem_key);
    if (std::shared_ptr<const ServedEntry> got = fleet_->AwaitPublished(r, cancelled, &claimed); got != nullptr) {
      return *got->answer;
    }
    if (cancelled) return absl::CancelledError("every caller waiting for this tune went away");
    if (!claimed) spdlog::warn("event=fleet_tune_wait_over key=\"{}\" note=\"tuning here too\"", r.key.problem_key);
  }
  struct ReleaseLock {
    FleetSync* fleet;
    const EntryKey& key;
    ~ReleaseLock() { fleet->Release(key); }
  } release{fleet_, r.key};
  OpTuneRequest request;
  request.repetitions = repetitions;
  request.kernel_cache = kernel_cache_;
  request.cancelled = &cancelled;
  request.quarantined = QuarantinedFor(r);
  request.on_quarantine = QuarantineFn(r, gpu.ordinal);
  request.progress = progress;
  request.search = options_.search;
  spdlog::info("event=tune_start key=\"{}\" gpu={}", r.key.problem_key, gpu.ordinal);
  absl::StatusOr<OpTuneResult> result = r.op->Tune(r.proto, gpu.executor.get(), request);
  metrics_->CountTune(r.key.problem_key, result);
  if (!result.ok()) return result.status();

  const DeviceInfo& target = r.kind->device;  // the GPU's: slots take only jobs of their kind
  v1::Entry entry;
  *entry.mutable_problem() = std::move(result->problem);
  *entry.mutable_device() = DeviceToProto(target);
  *entry.mutable_software() = SoftwareToProto(r.software);
  *entry.mutable_config() = std::move(result->config);
  // A library call is wholly its config; a template's recipe is checked to be
  // the one the template writes for the config that won.
  const LaunchRecipe* measured = result->measured_recipe.has_value() ? &*result->measured_recipe : nullptr;
  if (absl::Status s = SetTemplateRecipe(*r.op, target, measured, &entry); !s.ok()) return s;
  *entry.mutable_measurement() = std::move(result->measurement);
  entry.set_tuned_at_unix(absl::ToUnixSeconds(absl::Now()));
  entry.set_candidates_measured(result->candidates_measured);
  entry.set_ktune_version(KTUNE_VERSION);
  if (absl::Status s = answers_->entries()->Insert(entry); !s.ok()) return s;
  fleet_->Publish({entry});
  if (measured != nullptr) answers_->RememberCode(*measured);
  spdlog::info("event=tune_done key=\"{}\" gpu={} {}", r.key.problem_key, gpu.ordinal, result->summary);
  return answers_->EntryAnswer(entry);
}

absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> TuneJobs::Join(const Resolved& r, JobPriority priority,
                                                                  int repetitions, bool force, TuneQueue::DoneFn done,
                                                                  TuneQueue::ProgressFn progress) {
  if (compile_only()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this ktuned is compile-only (", compile_only_reason_,
                     "): it answers CACHED_ONLY and HEURISTIC_ON_MISS but cannot tune"));
  }
  auto work = [this, r, priority, repetitions, force](int slot, const std::atomic<bool>& cancelled,
                                                      const TuneQueue::ProgressFn& progress) {
    const size_t i = static_cast<size_t>(slot);
    {
      absl::MutexLock lock(&tuning_mu_);
      tuning_[i] = r.key.problem_key;
    }
    TuneQueue::Result result = TuneAndStore(gpus_[i], r, priority, repetitions, force, cancelled, progress);
    absl::MutexLock lock(&tuning_mu_);
    tuning_[i].clear();
    return result;
  };
  absl::StatusOr<std::unique_ptr<TuneQueue::Ticket>> ticket =
      queue_.Join(FlatKey(r.key), priority, std::move(work), std::move(done), std::move(progress), r.kind->index);
  if (!ticket.ok() && absl::IsResourceExhausted(ticket.status())) {
    spdlog::warn("event=tune_rejected key=\"{}\" error=\"{}\"", r.key.problem_key,
                 std::string(ticket.status().message()));
  }
  return ticket;
}

}  // namespace ktune
