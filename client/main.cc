// ktune: the command-line client of ktuned.
//
//   ktune [--server ADDR] status|get|tune|ls|rm|prune|export|import|bundle ...
//
// Every read command takes --json and then prints exactly one JSON document on
// stdout. Any error exits non-zero with a one-line reason on stderr.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/answer_text.h"
#include "client/bundle_command.h"
#include "client/cli_util.h"
#include "client/client.h"
#include "client/prewarm_command.h"
#include "google/protobuf/util/json_util.h"
#include "tuner/core/gemm_problem.h"
#include "tuner/core/input_file.h"
#include "tuner/core/paths.h"
#include "tuner/core/problem.h"
#include "tuner/core/wire.h"

namespace {

using ktune::v1::GetConfigResponse;

struct ProblemFlags {
  std::string op;
  int64_t m = 0, n = 0, k = 0;
  std::string dtype = "bf16";
  std::string out_dtype;
  std::string weight_dtype;
  bool no_weight = false;
  bool bias = false;
  float eps = 0;
  std::string b_layout;  // gemm: "nk" (B is [N, K], nn.Linear) or "kn"
  // The norm variants (ktune.proto's NormProblem).
  bool residual = false;
  bool weight_offset = false;
  float scale = 0;  // fp8 output: the scale candidates are verified with (not part of the key)
};

void AddProblemFlags(CLI::App* cmd, ProblemFlags* f) {
  cmd->add_option("op", f->op, "rmsnorm.fwd, rmsnorm.bwd, layernorm.fwd, layernorm.bwd or gemm")->required();
  cmd->add_option("--m", f->m, "rows (norms) / M (gemm)")->required();
  cmd->add_option("--n", f->n, "normalized width (norms) / N (gemm)")->required();
  cmd->add_option("--k", f->k, "K (gemm only)");
  cmd->add_option("--dtype", f->dtype, "bf16, fp16 or fp32 (norms); bf16 or fp8e4m3 (gemm)")->capture_default_str();
  cmd->add_option("--out-dtype", f->out_dtype, "output dtype (default: --dtype; bf16 for an fp8e4m3 gemm)");
  cmd->add_option("--weight-dtype", f->weight_dtype, "weight/bias dtype: --dtype or fp32 (default: --dtype)");
  cmd->add_flag("--no-weight", f->no_weight, "the norm has no weight (gamma)");
  cmd->add_flag("--bias", f->bias, "LayerNorm has a bias (beta)");
  cmd->add_option("--eps", f->eps, "epsilon (default 1e-6)");
  cmd->add_flag("--residual", f->residual,
                "RMSNorm fused with the residual add: h = x + residual, written back to residual; y = norm(h)");
  cmd->add_flag("--weight-offset", f->weight_offset, "the norm multiplies by (1 + w), as Gemma's do");
  cmd->add_option("--scale", f->scale,
                  "--out-dtype fp8e4m3 (RMSNorm forward): the static scale y = norm(x) * w / scale is verified with "
                  "(default 1; the kernel reads it at launch, so one answer serves every scale)");
  cmd->add_option("--b-layout", f->b_layout,
                  "gemm: nk (B is [N, K], the nn.Linear weight; the default, as in shapes files and --from-model) "
                  "or kn")
      ->check(CLI::IsMember({"nk", "kn"}));
}

// Which of the daemon's GPU kinds a get or tune is for (v1::DeviceSelector):
// a daemon serving GPUs of two kinds keeps answers per kind.
struct DeviceFlags {
  int gpu = -1;             // --gpu: a GPU ordinal as the daemon numbers them
  std::string device_name;  // --device: a GPU kind by name
};

void AddDeviceFlags(CLI::App* cmd, DeviceFlags* f) {
  CLI::Option* gpu = cmd->add_option("--gpu", f->gpu,
                                     "answer for the kind of this GPU of the daemon (its ordinal, as `ktune status` "
                                     "lists it; default: the kind of the daemon's first GPU)")
                         ->check(CLI::Range(0, 1023));
  cmd->add_option("--device", f->device_name, "the GPU kind by name, e.g. \"NVIDIA H200\" (default: the first)")
      ->excludes(gpu);
}

ktune::v1::DeviceSelector DeviceSelectorOf(const DeviceFlags& f) {
  ktune::v1::DeviceSelector device;
  if (f.gpu >= 0) device.set_gpu(f.gpu);
  if (!f.device_name.empty()) device.set_name(f.device_name);
  return device;
}

// `value` parsed as a dtype, or `fallback` when the flag was not given.
absl::StatusOr<ktune::DType> DTypeFlag(const char* flag, const std::string& value, ktune::DType fallback) {
  if (value.empty()) return fallback;
  absl::StatusOr<ktune::DType> parsed = ktune::ParseDType(value);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", parsed.status().message()));
  return parsed;
}

absl::StatusOr<ktune::v1::Problem> BuildProblem(const ProblemFlags& f) {
  ktune::v1::Problem problem;
  absl::StatusOr<ktune::DType> dtype = DTypeFlag("--dtype", f.dtype, ktune::DType::kBF16);
  if (!dtype.ok()) return dtype.status();
  // An fp8 GEMM's D is bf16 (the only one it has), so that is its default.
  const bool fp8_gemm = f.op == "gemm" && *dtype == ktune::DType::kFP8E4M3;
  absl::StatusOr<ktune::DType> out = DTypeFlag("--out-dtype", f.out_dtype, fp8_gemm ? ktune::DType::kBF16 : *dtype);
  if (!out.ok()) return out.status();
  absl::StatusOr<ktune::DType> weight = DTypeFlag("--weight-dtype", f.weight_dtype, *dtype);
  if (!weight.ok()) return weight.status();
  if (f.op == "gemm") {
    if (f.k == 0) return absl::InvalidArgumentError("--k: required for gemm");
    if (f.residual || f.weight_offset || f.scale != 0) {
      return absl::InvalidArgumentError("--residual, --weight-offset and --scale: norms only");
    }
    ktune::v1::GemmProblem* g = problem.mutable_gemm();
    g->set_m(f.m);
    g->set_n(f.n);
    g->set_k(f.k);
    g->set_batch(1);
    g->set_a_dtype(ktune::DTypeToProto(*dtype));
    g->set_b_dtype(ktune::DTypeToProto(*dtype));
    g->set_d_dtype(ktune::DTypeToProto(*out));
    g->set_a_layout(ktune::v1::ROW_MAJOR);
    // [N, K] unless asked otherwise: what shapes files and --from-model
    // prewarm, so that looking a prewarmed shape up finds it.
    g->set_b_layout(f.b_layout == "kn" ? ktune::v1::ROW_MAJOR : ktune::v1::COL_MAJOR);
    // Sizes are checked here, as ktuned would, so a bad value is a usage
    // error; which dtypes and layouts are served is the daemon's answer.
    if (absl::Status s = ktune::ValidateGemmShape(*g); !s.ok()) return s;
    return problem;
  }
  if (!f.b_layout.empty()) return absl::InvalidArgumentError("--b-layout: only gemm has a B operand");
  ktune::NormProblem p;
  if (absl::Status s = ktune::ParseNormOpName(f.op, &p.op, &p.pass); !s.ok()) return s;
  if (f.k != 0) return absl::InvalidArgumentError("--k: only gemm takes K");
  p.m = f.m;
  p.n = f.n;
  p.input_dtype = *dtype;
  p.output_dtype = *out;
  p.weight_dtype = *weight;
  p.has_weight = !f.no_weight;
  p.has_bias = f.bias;
  p.eps = f.eps == 0 ? ktune::kDefaultNormEps : f.eps;
  p.residual = f.residual;
  p.weight_offset = f.weight_offset;
  p.out_scale = f.scale;
  if (absl::Status s = ktune::ValidateNormProblem(p); !s.ok()) return s;
  *problem.mutable_norm() = ktune::NormProblemToProto(p);
  return problem;
}

void PrintAnswer(const GetConfigResponse& r) {
  std::printf("source       %s\n", ktune::v1::Source_Name(r.source()).c_str());
  std::printf("config       %s\n", ktune::DescribeConfig(r.config()).c_str());
  if (r.source() == ktune::v1::TUNED) {
    std::printf("time         %.2f us (spread %.1f%%, %d reps%s), %.3f %s\n", r.measurement().time_us(),
                100 * r.measurement().spread(), r.measurement().repetitions(),
                r.measurement().sustained() ? ", sustained" : "", r.measurement().throughput(),
                r.measurement().throughput_unit().c_str());
  }
  std::printf("device       %s\n", r.device().name().c_str());
  const ktune::v1::LaunchRecipe& recipe = r.recipe();
  std::printf("template     %s (%s)\n", recipe.template_id().c_str(), recipe.template_hash().substr(0, 16).c_str());
  for (const auto& k : recipe.kernels()) {
    std::printf("kernel       %s\n", k.lowered_name().c_str());
    std::printf("  grid       %u,%u,%u  block %u,%u,%u  smem %u B%s\n", k.grid(0), k.grid(1), k.grid(2), k.block(0),
                k.block(1), k.block(2), k.dynamic_smem_bytes(),
                k.programmatic_dependent() ? "  programmatic dependent" : "");
  }
  if (!recipe.cubin().empty()) std::printf("cubin        %zu bytes\n", recipe.cubin().size());
}

// The innermost subcommand the command line selected (the app itself if none).
const CLI::App* Innermost(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return Innermost(*sub);
  return &app;
}

// Reports a command line CLI11 refused and returns the exit code: 0 for
// --help and --version, kExitUsage for every error (CLI11's own codes, 105
// and up, never leak). A word where a subcommand was expected is named, with
// the subcommands there are.
int ParseFailure(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  const CLI::App* at = Innermost(app);
  const std::vector<std::string> extra = at->remaining();
  if (!at->get_subcommands({}).empty() && !extra.empty() && !absl::StartsWith(extra.front(), "-")) {
    std::string names;
    for (const CLI::App* sub : at->get_subcommands({})) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", sub->get_name());
    }
    const std::string path = at == &app ? "" : absl::StrCat(at->get_name(), " ");
    std::fprintf(stderr, "ktune: error: unknown command '%s%s' (commands: %s)\n", path.c_str(), extra.front().c_str(),
                 names.c_str());
    return ktune::kExitUsage;
  }
  std::fprintf(stderr, "ktune: error: %s\n", e.what());
  return ktune::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ktune: talk to ktuned, the kernel autotuning daemon"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ktune " KTUNE_VERSION);
  std::string server = ktune::DefaultServerAddress();
  double timeout_s = 600;
  app.add_option("--server", server, "ktuned address (unix:/path or host:port)")->capture_default_str();
  app.add_option("--timeout", timeout_s, "seconds per call")->check(CLI::Range(0.1, 86400.0));
  std::string token_file;
  app.add_option("--token-file", token_file,
                 "send this token with every call (TCP daemons, imports); default $KTUNE_TOKEN")
      ->check(CLI::ExistingFile);
  std::string tls_ca, tls_server_name;
  app.add_option("--tls-ca", tls_ca, "reach TCP daemons over TLS, trusting the CA certificate (PEM) in this file")
      ->envname("KTUNE_TLS_CA")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-server-name", tls_server_name,
                 "the name the daemon's certificate must carry (default: the --server host)")
      ->envname("KTUNE_TLS_SERVER_NAME");

  bool json = false;
  CLI::App* status_cmd = app.add_subcommand("status", "daemon version, GPU or compile-only, entries");
  status_cmd->add_flag("--json", json, "print JSON");
  CLI::App* fleet_cmd = app.add_subcommand("fleet", "the fleet store the daemon shares (ktuned --fleet-store)");
  CLI::App* fleet_status_cmd =
      fleet_cmd->add_subcommand("status", "reachable or not, queued publishes, entries per GPU kind and publisher");
  fleet_status_cmd->add_flag("--json", json, "print JSON");
  fleet_cmd->require_subcommand(1);

  ProblemFlags get_flags;
  std::string policy = "heuristic";
  std::string cubin_out;
  CLI::App* get_cmd = app.add_subcommand("get", "the config for one problem");
  AddProblemFlags(get_cmd, &get_flags);
  DeviceFlags get_device;
  AddDeviceFlags(get_cmd, &get_device);
  get_cmd->add_option("--policy", policy, "cached, heuristic or tune")
      ->check(CLI::IsMember({"cached", "heuristic", "tune"}))
      ->capture_default_str();
  get_cmd->add_option("--cubin-out", cubin_out, "also fetch the cubin and write it here");
  get_cmd->add_flag("--json", json, "print JSON");
  bool brief = false;
  get_cmd->add_flag("--brief", brief, "print one table row: problem, source, config, time, TB/s");

  ProblemFlags tune_flags;
  int repetitions = 0;
  bool force = false;
  CLI::App* tune_cmd = app.add_subcommand("tune", "tune one problem now, showing progress");
  AddProblemFlags(tune_cmd, &tune_flags);
  DeviceFlags tune_device;
  AddDeviceFlags(tune_cmd, &tune_device);
  tune_cmd->add_option("--repetitions", repetitions, "timed repetitions per candidate (>= 20)");
  tune_cmd->add_flag("--force", force, "re-tune even if an entry exists");
  bool show_candidates = false;
  tune_cmd->add_flag("--candidates", show_candidates,
                     "print each norm candidate's outcome to stderr as it comes (tab-separated: "
                     "candidate, config, status, median us)");
  tune_cmd->add_flag("--json", json, "print JSON");

  std::string ls_op;
  CLI::App* ls_cmd = app.add_subcommand("ls", "list tuned entries");
  ls_cmd->add_option("--op", ls_op, "only this op (rmsnorm.fwd, ...)");
  ls_cmd->add_flag("--json", json, "print JSON");
  bool ls_stale = false;
  ls_cmd->add_flag("--stale", ls_stale, "only entries of an older software fingerprint (not served)");
  int64_t ls_limit = 0;
  ls_cmd->add_option("--limit", ls_limit, "list at most this many entries (0: all, read page by page)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  std::string ls_page_token;
  ls_cmd->add_option("--page-token", ls_page_token, "continue a listing cut by --limit where it stopped");

  ProblemFlags rm_flags;
  bool dry_run = false;
  CLI::App* rm_cmd = app.add_subcommand("rm", "delete the stored entries of one problem (admin token)");
  AddProblemFlags(rm_cmd, &rm_flags);
  rm_cmd->add_flag("--dry-run", dry_run, "say what would be deleted, delete nothing");
  rm_cmd->add_flag("--json", json, "print JSON");
  bool prune_stale = false;
  CLI::App* prune_cmd = app.add_subcommand("prune", "delete entries no longer served (admin token)");
  prune_cmd->add_flag("--stale", prune_stale, "the entries of an older software fingerprint (`ktune ls --stale`)")
      ->required();
  prune_cmd->add_flag("--dry-run", dry_run, "say what would be deleted, delete nothing");
  prune_cmd->add_flag("--json", json, "print JSON");

  ktune::BundleCommands bundle_commands(&app);  // export, import, bundle inspect|merge
  auto prewarm_command = ktune::PrewarmCommand::Add(&app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }

  // Every client this process makes (prewarm makes one per daemon) uses these.
  ktune::ClientOptions client_options;
  client_options.timeout_s = timeout_s;
  if (const char* token = std::getenv("KTUNE_TOKEN"); token != nullptr) client_options.token = token;
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ktune::ReadInputFile(token_file, ktune::kTokenFile);
    if (!token.ok()) return ktune::PrintUsageError(token.status());
    client_options.token = std::string(absl::StripAsciiWhitespace(*token));
  }
  if (!tls_server_name.empty() && tls_ca.empty()) {
    std::fprintf(stderr, "ktune: error: --tls-server-name needs --tls-ca (or KTUNE_TLS_CA)\n");
    return 2;
  }
  if (!tls_ca.empty()) {
    absl::StatusOr<std::string> pem = ktune::ReadInputFile(tls_ca, ktune::kPemFile);
    if (!pem.ok()) return ktune::PrintUsageError(pem.status());
    if (pem->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      std::fprintf(stderr, "ktune: error: --tls-ca %s: not a PEM certificate\n", tls_ca.c_str());
      return 2;
    }
    client_options.tls_ca_pem = *std::move(pem);
    client_options.tls_ca_file = tls_ca;
    client_options.tls_server_name = tls_server_name;
  }
  if (prewarm_command->parsed()) return prewarm_command->Run(server, client_options);
  auto client = ktune::Client::Create(server, client_options);
  auto fail = [](const absl::Status& s) { return ktune::PrintError(s); };

  if (status_cmd->parsed()) {
    auto r = client->GetStatus();
    if (!r.ok()) return fail(r.status());
    if (json) {
      std::printf("%s\n", ktune::ToJson(*r).c_str());
      return 0;
    }
    std::printf("ktuned %s at %s\n", r->version().c_str(), server.c_str());
    if (r->compile_only()) {
      std::printf("mode         compile-only (%s)\n", r->compile_only_reason().c_str());
    }
    // One line per GPU (an older ktuned lists its one device only).
    for (const auto& g : r->gpus()) {
      const ktune::v1::DeviceFingerprint& d = g.device();
      std::printf("gpu %-8d %s (sm_%d%d, %d SMs, driver %d) %s%s, worker %d%s\n", g.ordinal(), d.name().c_str(),
                  d.cc_major(), d.cc_minor(), d.sm_count(), d.driver_version(), g.busy() ? "busy: " : "idle",
                  g.tuning().c_str(), g.worker_pid(),
                  g.worker_restarts() > 0 ? absl::StrCat(", restarted ", g.worker_restarts(), "x").c_str() : "");
    }
    if (r->devices_size() > 1) {
      std::printf("gpu kinds    %d, answers kept per kind (get/tune --gpu N or --device NAME; default the first)\n",
                  r->devices_size());
    }
    if (r->gpus().empty()) {
      for (const auto& d : r->devices()) {
        std::printf("gpu          %s (sm_%d%d, %d SMs, driver %d)\n", d.name().c_str(), d.cc_major(), d.cc_minor(),
                    d.sm_count(), d.driver_version());
      }
    }
    std::printf("nvrtc        %d\n", r->nvrtc_version());
    std::printf("database     %s\n", r->db_path().c_str());
    std::printf("entries      %lld\n", static_cast<long long>(r->entries()));
    if (r->stale_entries() > 0) {
      std::printf("stale        %lld (another software fingerprint: `ktune ls --stale`, re-tune them)\n",
                  static_cast<long long>(r->stale_entries()));
    }
    for (const auto& [op, n] : r->entries_by_op()) {
      std::printf("  %-11s %lld\n", op.c_str(), static_cast<long long>(n));
    }
    std::printf("tunes        %d running, %d queued\n", r->running_tunes(), r->queued_tunes());
    if (r->fleet_store().configured()) {
      const ktune::v1::FleetStoreStatus& f = r->fleet_store();
      std::printf("fleet store  %s, %lld publishes queued%s%s\n", f.reachable() ? "reachable" : "UNREACHABLE",
                  static_cast<long long>(f.queued_publishes()), f.last_error().empty() ? "" : ": ",
                  f.last_error().c_str());
    } else {
      std::printf("fleet store  none\n");
    }
    std::printf("uptime       %.0f s\n", r->uptime_s());
    if (!r->metrics().empty()) {
      std::printf("metrics\n");
      std::map<std::string, double> sorted(r->metrics().begin(), r->metrics().end());
      for (const auto& [name, value] : sorted) {
        if (value != 0) std::printf("  %-58s %g\n", name.c_str(), value);
      }
    }
    return 0;
  }

  if (fleet_status_cmd->parsed()) {
    ktune::v1::GetStatusRequest request;
    request.set_fleet_counts(true);
    auto r = client->GetStatus(request);
    if (!r.ok()) return fail(r.status());
    const ktune::v1::FleetStoreStatus& f = r->fleet_store();
    if (json) {
      std::printf("%s\n", ktune::ToJson(f).c_str());
      return f.configured() ? 0 : 1;
    }
    if (!f.configured()) {
      std::fprintf(stderr, "ktune: error: ktuned at %s has no fleet store (ktuned --fleet-store URL)\n",
                   server.c_str());
      return 1;
    }
    std::printf("fleet store  %s\n", f.reachable() ? "reachable" : "UNREACHABLE");
    if (!f.last_error().empty()) std::printf("last error   %s\n", f.last_error().c_str());
    std::printf("publishes    %lld sent, %lld queued, %lld dropped\n", static_cast<long long>(f.published()),
                static_cast<long long>(f.queued_publishes()), static_cast<long long>(f.dropped()));
    if (!f.counts_error().empty()) {
      std::printf("entries      unknown (%s)\n", f.counts_error().c_str());
      return 0;
    }
    std::printf("%-40s %-40s %s\n", "GPU", "PUBLISHER", "ENTRIES");
    for (const auto& c : f.counts()) {
      std::printf("%-40s %-40s %lld\n", c.device_name().c_str(), c.publisher().c_str(),
                  static_cast<long long>(c.entries()));
    }
    return 0;
  }

  if (get_cmd->parsed()) {
    auto problem = BuildProblem(get_flags);
    if (!problem.ok()) return ktune::PrintUsageError(problem.status());
    ktune::v1::GetConfigRequest request;
    *request.mutable_problem() = *problem;
    request.set_policy(policy == "cached" ? ktune::v1::CACHED_ONLY
                       : policy == "tune" ? ktune::v1::TUNE_ON_MISS
                                          : ktune::v1::HEURISTIC_ON_MISS);
    request.set_include_cubin(!cubin_out.empty());
    *request.mutable_device() = DeviceSelectorOf(get_device);
    auto r = client->GetConfig(request);
    if (!r.ok()) return fail(r.status());
    if (!cubin_out.empty()) {
      if (absl::Status s = ktune::WriteFileAtomically(cubin_out, r->recipe().cubin()); !s.ok()) return fail(s);
      r->mutable_recipe()->clear_cubin();
    }
    if (json) {
      std::printf("%s\n", ktune::ToJson(*r).c_str());
    } else if (brief) {
      std::printf("%s\n", ktune::AnswerRow(*problem, *r).c_str());
    } else {
      PrintAnswer(*r);
    }
    return 0;
  }

  if (tune_cmd->parsed()) {
    auto problem = BuildProblem(tune_flags);
    if (!problem.ok()) return ktune::PrintUsageError(problem.status());
    ktune::v1::TuneRequest request;
    *request.mutable_problem() = *problem;
    request.mutable_options()->set_repetitions(repetitions);
    request.mutable_options()->set_force(force);
    *request.mutable_device() = DeviceSelectorOf(tune_device);
    const bool live = !json && isatty(STDERR_FILENO);
    auto r = client->Tune(request, [&](const ktune::v1::TuneEvent& e) {
      if (show_candidates && e.has_candidate()) {
        const auto& c = e.candidate();
        // Tab-separated: candidate, config, status, median microseconds (0: not timed).
        std::fprintf(stderr, "candidate\t%s\t%s\t%.2f\n", ktune::DescribeConfig(c.config()).c_str(), c.status().c_str(),
                     c.has_measurement() ? c.measurement().time_us() : 0.0);
      }
      if (json || !e.has_progress()) return;
      const auto& p = e.progress();
      std::string best = p.best_time_us() > 0 ? absl::StrFormat("  best %.2f us", p.best_time_us()) : "";
      if (live) {
        std::fprintf(stderr, "\r\033[K%-9s %4d/%-4d%s  %s", p.stage().c_str(), p.done(), p.total(), best.c_str(),
                     p.message().c_str());
        std::fflush(stderr);
      } else if (p.done() == p.total()) {
        std::fprintf(stderr, "%s %d/%d%s %s\n", p.stage().c_str(), p.done(), p.total(), best.c_str(),
                     p.message().c_str());
      }
    });
    if (live) std::fprintf(stderr, "\n");
    if (!r.ok()) return fail(r.status());
    if (json) {
      std::printf("%s\n", ktune::ToJson(*r).c_str());
    } else {
      PrintAnswer(*r);
    }
    return 0;
  }

  if (ls_cmd->parsed()) {
    // Page by page, so a store of any size lists; --limit stops early and
    // says how to go on.
    ktune::v1::ListEntriesRequest request;
    request.set_op(ls_op);
    request.set_stale_only(ls_stale);
    request.set_page_token(ls_page_token);
    ktune::v1::ListEntriesResponse all;
    int64_t listed = 0;
    if (!json) {
      // Throughput in the entry's unit: TB/s for norms, TFLOP/s for GEMM.
      std::printf("%-34s %-20s %-44s %10s %16s  %s\n", "problem", "device", "config", "time_us", "throughput",
                  "tuned_at (UTC)");
    }
    std::string next;
    while (true) {
      constexpr int64_t kPage = 1000;
      request.set_page_size(static_cast<int32_t>(ls_limit > 0 ? std::min(kPage, ls_limit - listed) : kPage));
      auto r = client->ListEntries(request);
      if (!r.ok()) return fail(r.status());
      for (auto& e : *r->mutable_entries()) {
        ++listed;
        if (json) {
          *all.add_entries() = std::move(e);
          continue;
        }
        const std::string throughput =
            absl::StrFormat("%.3f %s", e.measurement().throughput(), e.measurement().throughput_unit());
        std::printf(
            "%-34s %-20s %-44s %10.2f %16s  %s\n", ktune::DescribeProblem(e.problem()).c_str(),
            e.device().name().c_str(), ktune::DescribeConfig(e.config()).c_str(), e.measurement().time_us(),
            throughput.c_str(),
            absl::FormatTime("%Y-%m-%d %H:%M", absl::FromUnixSeconds(e.tuned_at_unix()), absl::UTCTimeZone()).c_str());
      }
      next = r->next_page_token();
      if (next.empty() || (ls_limit > 0 && listed >= ls_limit)) break;
      request.set_page_token(next);
    }
    if (json) {
      all.set_next_page_token(next);
      std::printf("%s\n", ktune::ToJson(all).c_str());
      return 0;
    }
    std::printf("%lld entries\n", static_cast<long long>(listed));
    if (!next.empty())
      std::printf("more: ktune ls --limit %lld --page-token %s\n", static_cast<long long>(ls_limit), next.c_str());
    return 0;
  }

  if (rm_cmd->parsed() || prune_cmd->parsed()) {
    ktune::v1::DeleteEntriesRequest request;
    if (rm_cmd->parsed()) {
      auto problem = BuildProblem(rm_flags);
      if (!problem.ok()) return fail(problem.status());
      *request.add_problems() = *problem;
    }
    request.set_stale(prune_stale);
    request.set_dry_run(dry_run);
    auto r = client->DeleteEntries(request);
    if (!r.ok()) return fail(r.status());
    if (json) {
      std::printf("%s\n", ktune::ToJson(*r).c_str());
      return 0;
    }
    for (const auto& e : r->entries()) {
      std::printf("%s %s %s  on %s  (%s)\n", r->dry_run() ? "would delete" : "deleted", e.op().c_str(),
                  e.problem_key().c_str(), e.device_key().c_str(), e.software_key().c_str());
    }
    if (r->entries_size() < r->deleted()) {
      std::printf("... and %lld more\n", static_cast<long long>(r->deleted() - r->entries_size()));
    }
    std::printf("%s %lld entries\n", r->dry_run() ? "would delete" : "deleted", static_cast<long long>(r->deleted()));
    return 0;
  }

  if (bundle_commands.parsed()) return bundle_commands.Run(client.get());
  return 0;
}
