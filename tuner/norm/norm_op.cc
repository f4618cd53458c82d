#include "tuner/norm/norm_op.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/fmt/fmt.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/norm_kind.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_runner.h"
#include "tuner/norm/norm_space.h"
#include "tuner/norm/norm_tuner.h"
#include "tuner/run/fake_runner.h"
#include "tuner/run/runner_libraries.h"

namespace ktune {
namespace {

constexpr int kMaxWarpsPerCta = 32;

class NormOpImpl final : public Op {
 public:
  absl::string_view name() const override { return "norm"; }
  const ProblemKind& kind() const override { return NormProblemKind(); }

  std::vector<std::string> entry_ops() const override {
    std::vector<std::string> ops;
    for (NormOp op : {NormOp::kRMSNorm, NormOp::kLayerNorm}) {
      for (NormPass pass : {NormPass::kForward, NormPass::kBackward}) ops.push_back(OpName(op, pass));
    }
    return ops;
  }

  absl::StatusOr<ProblemIdentity> Identify(const v1::Problem& problem) const override {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    if (absl::Status s = ValidateNormProblem(*norm); !s.ok()) return s;
    return ProblemIdentity{OpName(*norm), CanonicalKey(*norm)};
  }

  ProblemFamily Family(const v1::Problem& problem, const std::string& device_key,
                       const std::string& software_key) const override {
    NormProblem family = NormProblemFromProto(problem.norm()).value();
    const int64_t m = family.m;
    family.m = 0;
    return {FamilyKeyText(OpName(family), CanonicalKey(family), device_key, software_key), m};
  }

  absl::StatusOr<SoftwareFingerprint> Software(absl::string_view entry_op) const override {
    NormProblem p;
    if (absl::Status s = ParseNormOpName(entry_op, &p.op, &p.pass); !s.ok()) return s;
    absl::StatusOr<const KernelSource*> source = FindKernelSource(NormTemplateId(p));
    if (!source.ok()) return source.status();
    return SoftwareFingerprint{(*source)->hash, NvrtcVersion(), kSchemaVersion};
  }

  // A norm entry's config is one the norm templates can run for its problem
  // on the device it was tuned on (CanImplement, as the tuner judged it).
  absl::Status CheckConfig(absl::string_view prefix, const v1::Entry& entry,
                           const std::optional<DeviceInfo>& tuned_on) const override {
    const v1::Config& config = entry.config();
    if (!config.has_norm()) return EntryFieldError(prefix, "config.norm", "a norm problem needs a norm config");
    absl::StatusOr<NormProblem> problem = NormProblemFromProto(entry.problem().norm());
    if (!problem.ok()) return EntryTunerError(prefix, "problem", problem.status());
    // Checks that every knob is >= 1 (split_size >= 0).
    absl::StatusOr<NormConfig> parsed = NormConfigFromProto(config.norm());
    if (!parsed.ok()) return EntryTunerError(prefix, "config.norm", parsed.status());
    const NormConfig& c = *parsed;
    auto bad = [&](absl::string_view field, const std::string& why) { return EntryFieldError(prefix, field, why); };
    if (c.num_warps > kMaxWarpsPerCta) {
      return bad("config.norm.num_warps", absl::StrCat("must be <= ", kMaxWarpsPerCta, ", got ", c.num_warps));
    }
    // Fewer threads than rows would leave threads_per_row() at zero, and every
    // derived quantity (chunks, grid) undefined.
    if (c.x_block > c.threads()) {
      return bad("config.norm.x_block", absl::StrCat("must be <= num_warps * 32 = ", c.threads(), ", got ", c.x_block));
    }
    const bool forward = problem->pass == NormPass::kForward;
    if (forward && c.split_size != 0) {
      return bad("config.norm.split_size", absl::StrCat("must be 0 for a forward problem, got ", c.split_size));
    }
    if (forward && c.reduce_rows != 0) {
      return bad("config.norm.reduce_rows", absl::StrCat("must be 0 for a forward problem, got ", c.reduce_rows));
    }
    if (c.reduce_rows > 32 || (c.reduce_rows & (c.reduce_rows - 1)) != 0) {
      return bad("config.norm.reduce_rows", absl::StrCat("must be 0 or a power of two <= 32, got ", c.reduce_rows));
    }
    if (forward && c.cluster != 1) {
      return bad("config.norm.cluster", absl::StrCat("must be 0 or 1 for a forward problem, got ", c.cluster));
    }
    if (c.cluster > 8 || (c.cluster & (c.cluster - 1)) != 0) {
      return bad("config.norm.cluster", absl::StrCat("must be 0, 1, 2, 4 or 8, got ", c.cluster));
    }
    if (problem->pass == NormPass::kBackward && c.split_size < 1) {
      return bad("config.norm.split_size", absl::StrCat("must be >= 1 for a backward problem, got ", c.split_size));
    }
    // An unknown architecture: the field checks above are all that can be said.
    if (tuned_on.has_value()) {
      if (absl::Status s = CanImplement(*problem, c, *tuned_on); !s.ok()) {
        return bad("config.norm", absl::StrCat("cannot run this problem on ", Arch(*tuned_on), ": ", s.message()));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<LaunchRecipe> TemplateRecipe(const v1::Problem& problem, const v1::Config& config,
                                              const DeviceInfo& device) const override {
    if (!config.has_norm()) return absl::InvalidArgumentError("config.norm: a norm problem needs a norm config");
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    absl::StatusOr<NormConfig> c = NormConfigFromProto(config.norm());
    if (!c.ok()) return c.status();
    return NormLaunchRecipe(*norm, *c, device);
  }

  absl::StatusOr<v1::Config> HeuristicConfig(const v1::Problem& problem, const DeviceInfo& device) const override {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    v1::Config config;
    *config.mutable_norm() = NormConfigToProto(HeuristicNormConfig(*norm, device));
    return config;
  }

  // Another M's tuned config, if the templates can run it for this M.
  absl::StatusOr<v1::Config> NearestConfig(const v1::Problem& problem, const v1::Entry& nearest,
                                           const DeviceInfo& device) const override {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    absl::StatusOr<NormConfig> config = NormConfigFromProto(nearest.config().norm());
    if (!config.ok()) return absl::NotFoundError(config.status().message());
    if (absl::Status s = CanImplement(*norm, *config, device); !s.ok()) return absl::NotFoundError(s.message());
    v1::Config out;
    *out.mutable_norm() = NormConfigToProto(*config);
    return out;
  }

  absl::StatusOr<std::unique_ptr<ProblemRunner>> NewRunner(const v1::Problem& problem, Device* device, uint64_t seed,
                                                           RunnerLibraries*) const override {
    return NormProblemRunner(problem.norm(), device, seed);
  }

  absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeRunner(const v1::Problem& problem,
                                                               const DeviceInfo& device) const override {
    if (absl::Status s = NormProblemKind().CheckShape(problem); !s.ok()) return s;
    return ktune::NewFakeRunner(device, FakeWork{});
  }

  absl::StatusOr<OpTuneResult> Tune(const v1::Problem& problem, CandidateExecutor* executor,
                                    const OpTuneRequest& request) const override {
    absl::StatusOr<NormProblem> norm = NormProblemFromProto(problem.norm());
    if (!norm.ok()) return norm.status();
    TuneOptions options;
    if (request.repetitions > 0) options.measure.repetitions = request.repetitions;
    options.search = request.search.descent ? SearchKind::kCoordinateDescent : SearchKind::kGrid;
    options.budget.max_candidates = request.search.max_candidates;
    options.budget.max_seconds = request.search.max_seconds;
    options.kernel_cache = request.kernel_cache;
    options.cancelled = request.cancelled;
    options.quarantined = request.quarantined;
    options.on_quarantine = request.on_quarantine;
    auto on_progress = [&](const TuneProgress& p) {
      if (!request.progress) return;
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
        request.progress(event);
        event.Clear();
      }
      v1::TuneEvent::Progress* pr = event.mutable_progress();
      pr->set_stage(p.stage);
      pr->set_done(p.done);
      pr->set_total(p.total);
      pr->set_best_time_us(p.best_time_us);
      pr->set_message(p.message);
      request.progress(event);
    };
    absl::StatusOr<TuneResult> result = TuneNorm(*norm, executor, options, on_progress);
    if (!result.ok()) return result.status();
    OpTuneResult out;
    *out.problem.mutable_norm() = NormProblemToProto(*norm);
    *out.config.mutable_norm() = NormConfigToProto(result->config);
    out.measured_recipe = result->recipe;
    v1::Measurement& m = out.measurement;
    m.set_time_us(result->timing.median_us);
    m.set_spread(result->timing.spread);
    m.set_repetitions(result->timing.repetitions);
    m.set_throughput(result->throughput_tbs);
    m.set_throughput_unit("TB/s");
    out.candidates_measured = result->candidates_measured;
    out.tune_seconds = result->tune_seconds;
    out.compile_seconds = result->compile_seconds;
    out.run_seconds = result->run_seconds;
    out.kernel_cache_hits = result->kernel_cache_hits;
    out.compiled = result->compiled;
    for (const CandidateOutcome& o : result->outcomes) {
      if (o.status != CandidateStatus::kNotMeasured) out.candidate_statuses.push_back(CandidateStatusName(o.status));
    }
    out.summary = fmt::format(
        "config=\"{}\" time_us={:.2f} tbs={:.3f} strategy={} "
        "candidates={} measured={} compiled={} cache_hits={} seconds={:.2f} "
        "compile_seconds={:.2f} run_seconds={:.2f} prepare_seconds={:.3f} verify_seconds={:.3f} "
        "time_seconds={:.3f}",
        ToString(result->config), result->timing.median_us, result->throughput_tbs, result->strategy,
        result->candidates_generated, result->candidates_measured, result->compiled, result->kernel_cache_hits,
        result->tune_seconds, result->compile_seconds, result->run_seconds, result->prepare_seconds,
        result->verify_seconds, result->time_seconds);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> MakeNormOp() { return std::make_unique<NormOpImpl>(); }

}  // namespace ktune
