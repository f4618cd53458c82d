#include "tuner/gemm/gemm_op.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/gemm_kind.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/sha256.h"
#include "tuner/core/wire.h"
#include "tuner/gemm/gemm_interface.h"
#include "tuner/gemm/gemm_runner.h"
#include "tuner/gemm/gemm_skinny_space.h"
#include "tuner/gemm/gemm_space.h"
#include "tuner/gemm/gemm_tuner.h"
#include "tuner/gemm/gemm_wgmma_space.h"
#include "tuner/gemm/gemm_wire.h"
#include "tuner/gpu/cublaslt.h"
#include "tuner/run/fake_runner.h"
#include "tuner/run/runner_libraries.h"

namespace ktune {
namespace {

constexpr char kGemmOp[] = "gemm";

// The GEMM software fingerprint, computed once per process: the answer
// depends on whichever source won, so on every template, the reference the
// candidates were checked against and the cuBLASLt library (0 when absent).
const SoftwareFingerprint& GemmSoftware() {
  static const SoftwareFingerprint software = [] {
    std::string parts;
    for (const char* id : {"gemm/gemm_mma", "gemm/gemm_wgmma", "gemm/gemm_skinny", "gemm/gemm_reference"}) {
      absl::StatusOr<const KernelSource*> source = FindKernelSource(id);
      absl::StrAppend(&parts, id, "=", source.ok() ? (*source)->hash : "missing", "\n");
    }
    absl::StrAppend(&parts, "cublaslt=", CublasLtLibraryVersion(), "\n");
    SoftwareFingerprint s;
    s.template_hash = Sha256Hex(parts);
    s.nvrtc_version = NvrtcVersion();
    s.schema_version = kSchemaVersion;
    return s;
  }();
  return software;
}

// The space's first config that is neither split nor promoted (see
// HeuristicConfig for why those are measured before they are answered).
std::optional<WgmmaTileConfig> BestUnsplit(const std::vector<WgmmaTileConfig>& space) {
  const auto it =
      std::find_if(space.begin(), space.end(), [](const WgmmaTileConfig& c) { return c.split_k == 1 && !c.promote; });
  if (it == space.end()) return std::nullopt;
  return *it;
}

class GemmOpImpl final : public Op {
 public:
  absl::string_view name() const override { return "GEMM"; }
  const ProblemKind& kind() const override { return GemmProblemKind(); }
  std::vector<std::string> entry_ops() const override { return {kGemmOp}; }

  // A GEMM key is only defined for a valid problem (GemmProblemKind's Key
  // validates it), so keying it is the whole request-edge check.
  absl::StatusOr<ProblemIdentity> Identify(const v1::Problem& problem) const override { return Key(problem); }

  ProblemFamily Family(const v1::Problem& problem, const std::string& device_key,
                       const std::string& software_key) const override {
    v1::GemmProblem family = problem.gemm();
    family.set_m(0);
    return {FamilyKeyText(kGemmOp, GemmCanonicalKey(family), device_key, software_key), problem.gemm().m()};
  }

  absl::StatusOr<SoftwareFingerprint> Software(absl::string_view entry_op) const override {
    if (entry_op != kGemmOp) return absl::InvalidArgumentError(absl::StrCat("not a GEMM op: ", entry_op));
    return GemmSoftware();
  }

  // A GEMM entry's config names its source, its recipe is that source's, and
  // one of our templates' configs can run the problem on the device it was
  // tuned on (judged as the tuner judged it, CanImplement*): a bundle made by
  // hand or by another version cannot bring in a kernel the template refuses
  // (split_k = 3, a skinny config at M = 2048, ...).
  absl::Status CheckConfig(absl::string_view prefix, const v1::Entry& entry,
                           const std::optional<DeviceInfo>& device) const override {
    const v1::Config& config = entry.config();
    const v1::LaunchRecipe& recipe = entry.recipe();
    const v1::GemmProblem& problem = entry.problem().gemm();
    if (!config.has_gemm()) return EntryFieldError(prefix, "config.gemm", "a GEMM problem needs a GEMM config");
    const v1::GemmConfig& g = config.gemm();
    // One of our templates: its config's fields, a recipe of that template, and
    // the template's verdict on (problem, config, device) (its LaunchRecipe
    // refuses, with CanImplement's reason, what it cannot run).
    auto own_template = [&](const absl::Status& fields, const char* source, const char* template_id) -> absl::Status {
      if (!fields.ok()) return EntryTunerError(prefix, "config.gemm", fields);
      if (recipe.template_id() != template_id) {
        return EntryFieldError(
            prefix, "recipe.template_id",
            absl::StrCat("a ", source, " config needs a ", template_id, " recipe, got '", recipe.template_id(), "'"));
      }
      if (!device.has_value()) return absl::OkStatus();
      const absl::StatusOr<LaunchRecipe> expected = OwnGemmRecipe(problem, g, *device);
      if (absl::IsFailedPrecondition(expected.status())) {
        return EntryFieldError(
            prefix, "config.gemm",
            absl::StrCat("cannot run this problem on ", Arch(*device), ": ", expected.status().message()));
      }
      return absl::OkStatus();
    };
    switch (g.source_case()) {
      case v1::GemmConfig::kMmaSync:
        return own_template(GemmTileConfigFromProto(g.mma_sync()).status(), "mma_sync", "gemm/gemm_mma");
      case v1::GemmConfig::kWgmma:
        return own_template(WgmmaTileConfigFromProto(g.wgmma()).status(), "wgmma", "gemm/gemm_wgmma");
      case v1::GemmConfig::kSkinny:
        return own_template(SkinnyConfigFromProto(g.skinny()).status(), "skinny", "gemm/gemm_skinny");
      case v1::GemmConfig::kCublaslt: {
        const v1::CublasLtAlgorithm& a = g.cublaslt();
        if (a.algo().size() != kCublasLtAlgoBytes) {
          return EntryFieldError(prefix, "config.gemm.cublaslt.algo",
                                 absl::StrCat("must be ", kCublasLtAlgoBytes, " bytes, got ", a.algo().size()));
        }
        if (a.version() == 0) return EntryFieldError(prefix, "config.gemm.cublaslt.version", "must be > 0");
        if (recipe.template_id() != kCublasLtTemplateId) {
          return EntryFieldError(prefix, "recipe.template_id", "a cuBLASLt config needs the cuBLASLt recipe");
        }
        if (recipe.cublaslt_algo() != a.algo()) {
          return EntryFieldError(prefix, "recipe.cublaslt_algo",
                                 "a cuBLASLt config needs the recipe of the same algorithm");
        }
        return absl::OkStatus();
      }
      default:
        return EntryFieldError(prefix, "config.gemm", "must name a source (mma_sync, wgmma, skinny or cublaslt)");
    }
  }

  absl::StatusOr<LaunchRecipe> TemplateRecipe(const v1::Problem& problem, const v1::Config& config,
                                              const DeviceInfo& device) const override {
    if (!config.has_gemm()) return absl::InvalidArgumentError("config.gemm: a GEMM problem needs a GEMM config");
    const v1::GemmConfig& g = config.gemm();
    if (g.has_cublaslt()) {
      // The call is wholly described by its config: algorithm, workspace and
      // the library version its bytes are for.
      LaunchRecipe r = CublasLtRecipe({g.cublaslt().algo(), g.cublaslt().workspace_bytes()}, g.cublaslt().version());
      r.arch = Arch(device);
      if (absl::Status s = WriteGemmInterface(problem.gemm(), &r); !s.ok()) return s;
      return r;
    }
    absl::StatusOr<LaunchRecipe> r = OwnGemmRecipe(problem.gemm(), g, device);
    if (absl::IsNotFound(r.status())) {
      return absl::InvalidArgumentError("config.gemm: must name a source (mma_sync, wgmma, skinny or cublaslt)");
    }
    return r;
  }

  absl::StatusOr<v1::Config> HeuristicConfig(const v1::Problem& problem, const DeviceInfo& device) const override {
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
    const v1::GemmProblem& gemm = problem.gemm();
    v1::Config config;
    if (const std::optional<SkinnyConfig> skinny = SkinnyUntunedConfig(gemm, device)) {
      *config.mutable_gemm()->mutable_skinny() = SkinnyConfigToProto(*skinny);
    } else if (const std::optional<WgmmaTileConfig> wgmma = BestUnsplit(WgmmaSearchSpace(gemm, device))) {
      *config.mutable_gemm()->mutable_wgmma() = WgmmaTileConfigToProto(*wgmma);
    } else if (const std::vector<GemmTileConfig> mma = GemmSearchSpace(gemm, device); !mma.empty()) {
      *config.mutable_gemm()->mutable_mma_sync() = GemmTileConfigToProto(mma.front());
    } else {
      return absl::FailedPreconditionError(
          "no heuristic answer for this GEMM: no template serves it unsplit (fp8: K over 4096 needs split-K, "
          "promotion or cuBLASLt, measured and checked on the GPU first); ask with TUNE_ON_MISS");
    }
    return config;
  }

  // The tuned config of another M, re-judged and re-written for this one; a
  // cuBLASLt algorithm is not (the caller would have to check it for this M).
  absl::StatusOr<v1::Config> NearestConfig(const v1::Problem&, const v1::Entry& nearest,
                                           const DeviceInfo&) const override {
    if (nearest.config().gemm().has_cublaslt()) return absl::NotFoundError("the nearest entry is a cuBLASLt algorithm");
    v1::Config config;
    *config.mutable_gemm() = nearest.config().gemm();
    return config;
  }

  absl::StatusOr<std::unique_ptr<ProblemRunner>> NewRunner(const v1::Problem& problem, Device* device, uint64_t seed,
                                                           RunnerLibraries* libraries) const override {
    return GemmProblemRunner(problem.gemm(), device, libraries->cublaslt(), seed);
  }

  // Three made-up cuBLASLt algorithms beside the templates, as cuBLASLt's
  // heuristic offers some on a GPU.
  absl::StatusOr<std::unique_ptr<ProblemRunner>> NewFakeRunner(const v1::Problem& problem,
                                                               const DeviceInfo& device) const override {
    if (absl::Status s = ValidateGemmProblem(problem.gemm()); !s.ok()) return s;
    return ktune::NewFakeRunner(device, FakeWork{GemmFlops(problem.gemm()), /*library_candidates=*/3});
  }

  absl::StatusOr<OpTuneResult> Tune(const v1::Problem& problem, CandidateExecutor* executor,
                                    const OpTuneRequest& request) const override {
    const v1::GemmProblem& gemm = problem.gemm();
    const std::string key = GemmCanonicalKey(gemm);
    GemmTuneOptions options;
    if (request.repetitions > 0) options.measure.repetitions = request.repetitions;
    options.cancelled = request.cancelled;
    options.kernel_cache = request.kernel_cache;
    options.quarantined = request.quarantined;
    options.on_quarantine = request.on_quarantine;
    // The GEMM tuner reports once it is done: its candidates are then replayed
    // as progress, in order.
    auto say = [&](const std::string& stage, int done, int total, const std::string& message) {
      if (!request.progress) return;
      v1::TuneEvent event;
      event.mutable_progress()->set_stage(stage);
      event.mutable_progress()->set_done(done);
      event.mutable_progress()->set_total(total);
      event.mutable_progress()->set_message(message);
      request.progress(event);
    };
    say("generated", 0, 0, absl::StrCat("GEMM candidates for ", key, ": our templates and cuBLASLt"));
    absl::StatusOr<GemmTuneResult> result = TuneGemm(gemm, executor, options);
    if (!result.ok()) return result.status();
    OpTuneResult out;
    out.tune_seconds = result->tune_seconds;
    out.compile_seconds = result->compile_seconds;
    out.kernel_cache_hits = result->kernel_cache_hits;
    out.compiled = result->compiled;
    int measured = 0;
    const int outcomes = static_cast<int>(result->outcomes.size());
    for (int i = 0; i < outcomes; ++i) {
      const GemmCandidateOutcome& o = result->outcomes[i];
      out.candidate_statuses.push_back(o.status.substr(0, o.status.find(':')));
      measured += o.status == "ok";
      say("measured", i + 1, outcomes,
          absl::StrCat(o.name, ": ", o.status.substr(0, 300),
                       o.status == "ok" ? absl::StrFormat(" %.2f us", o.timing.median_us) : "",
                       o.sustained ? absl::StrFormat(", %.2f us sustained", o.sustained->median_us) : ""));
    }
    if (result->tie_break) {
      spdlog::info("event=tie_break key=\"{}\" challenger=\"{}\" ratio={:.3f} rounds={} won={}", key,
                   result->tie_break_challenger, result->tie_break->median_ratio, result->tie_break->ratios.size(),
                   HeadToHeadFavoursFirst(*result->tie_break));
    }
    *out.problem.mutable_gemm() = gemm;
    const GemmCandidate& w = result->winner;
    v1::GemmConfig* config = out.config.mutable_gemm();
    if (w.tile.has_value()) {
      *config->mutable_mma_sync() = GemmTileConfigToProto(*w.tile);
    } else if (w.wgmma.has_value()) {
      *config->mutable_wgmma() = WgmmaTileConfigToProto(*w.wgmma);
    } else if (w.skinny.has_value()) {
      *config->mutable_skinny() = SkinnyConfigToProto(*w.skinny);
    } else {
      v1::CublasLtAlgorithm* a = config->mutable_cublaslt();
      a->set_algo(w.recipe.cublaslt_algo);
      a->set_version(CublasLtLibraryVersion());
      a->set_workspace_bytes(w.recipe.workspace_bytes);
    }
    // A cuBLASLt call is wholly its config; a template's recipe is checked to
    // be the one the template writes for the config that won.
    if (w.is_template()) out.measured_recipe = w.recipe;
    v1::Measurement& m = out.measurement;
    m.set_time_us(result->winner_timing.median_us);
    m.set_spread(result->winner_timing.spread);
    m.set_repetitions(result->winner_timing.repetitions);
    m.set_throughput(GemmFlops(gemm) / (result->winner_timing.median_us * 1e6));
    m.set_throughput_unit("TFLOP/s");
    m.set_sustained(result->sustained);
    out.candidates_measured = std::max(measured, 1);
    out.summary = fmt::format("answer=\"{}\" time_us={:.2f} sustained={} tflops={:.1f} candidates={}+{} seconds={:.2f}",
                              w.Name(), result->winner_timing.median_us, result->sustained, m.throughput(),
                              result->template_candidates, result->cublaslt_candidates, result->tune_seconds);
    return out;
  }
};

}  // namespace

std::unique_ptr<Op> MakeGemmOp() { return std::make_unique<GemmOpImpl>(); }

}  // namespace ktune
