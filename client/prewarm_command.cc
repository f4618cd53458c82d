#include "client/prewarm_command.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/answer_text.h"
#include "client/model_shapes.h"
#include "client/prewarm.h"
#include "client/prewarm_list.h"
#include "client/prewarm_progress.h"
#include "client/shapes_file.h"

namespace ktune {
namespace {

constexpr int kExitDone = 0;
constexpr int kExitIncomplete = 1;
constexpr int kExitUsage = 2;

int UsageError(const absl::Status& s) {
  std::fprintf(stderr, "ktune prewarm: error: %s\n", std::string(s.message()).c_str());
  return kExitUsage;
}

// --answers: what `server` answers for each problem now, one row each.
int PrintAnswers(const std::vector<PrewarmProblem>& problems, const std::string& server, const ClientOptions& options) {
  std::unique_ptr<Client> client = Client::Create(server, options);
  std::printf("%s\n", AnswerHeader().c_str());
  int refused = 0;
  for (const PrewarmProblem& p : problems) {
    v1::GetConfigRequest request;
    *request.mutable_problem() = p.problem;
    request.set_policy(v1::HEURISTIC_ON_MISS);
    absl::StatusOr<v1::GetConfigResponse> answer = client->GetConfig(request);
    if (answer.ok()) {
      std::printf("%s\n", AnswerRow(p.problem, *answer).c_str());
    } else {
      ++refused;
      std::printf("%-36s %s\n", DescribeProblem(p.problem).c_str(), answer.status().ToString().c_str());
    }
  }
  std::fflush(stdout);
  if (refused > 0) std::fprintf(stderr, "ktune prewarm: %d of %zu problems got no answer\n", refused, problems.size());
  return refused > 0 ? kExitIncomplete : kExitDone;
}

void PrintSummary(const PrewarmReport& r) {
  std::printf("prewarm: %d problems x %zu GPU kind(s) in %.1f s\n", r.problems, r.kinds.size(), r.seconds);
  std::printf("  tuned            %d\n", r.count(PrewarmOutcome::kTuned));
  std::printf("  already tuned    %d\n", r.count(PrewarmOutcome::kAlreadyTuned));
  if (r.count(PrewarmOutcome::kNotServed) > 0) {
    std::printf("  not served       %d (the daemon does not serve these ops: an older ktuned?)\n",
                r.count(PrewarmOutcome::kNotServed));
  }
  std::printf("  failed           %d\n", r.count(PrewarmOutcome::kFailed));
  std::printf("  not done         %d\n", r.count(PrewarmOutcome::kNotDone));
  for (const PrewarmProblemReport& p : r.results) {
    if (p.outcome != PrewarmOutcome::kFailed && p.outcome != PrewarmOutcome::kNotDone) continue;
    std::printf("    %-8s %s [%s]%s%s: %s\n", PrewarmOutcomeName(p.outcome), p.key.c_str(), p.kind.c_str(),
                p.server.empty() ? "" : " @ ", p.server.c_str(), p.detail.c_str());
  }
  std::printf("servers\n");
  for (const PrewarmServerReport& s : r.servers) {
    auto count = [&](PrewarmOutcome o) {
      auto it = s.counts.find(o);
      return it == s.counts.end() ? 0 : it->second;
    };
    std::printf("  %-40s %-12s tuned %d, already %d, failed %d  %s%s%s\n", s.address.c_str(),
                PrewarmServerStateName(s.state), count(PrewarmOutcome::kTuned), count(PrewarmOutcome::kAlreadyTuned),
                count(PrewarmOutcome::kFailed), s.kind.c_str(), s.error.empty() ? "" : "  ", s.error.c_str());
  }
}

}  // namespace

std::unique_ptr<PrewarmCommand> PrewarmCommand::Add(CLI::App* app) {
  std::unique_ptr<PrewarmCommand> c(new PrewarmCommand());
  CLI::App* cmd = app->add_subcommand(
      "prewarm", "tune a list of problems (shapes file or model config) across one or many daemons");
  c->command_ = cmd;
  cmd->add_option("shapes", c->shapes_path_, "shapes file (YAML or JSON; see deploy/shapes-example.yaml)");
  cmd->add_option("--from-model", c->model_path_, "derive the problems from a Hugging Face config.json");
  cmd->add_option("--tokens", c->tokens_, "--from-model: token counts (rows), comma-separated")->capture_default_str();
  cmd->add_flag("--backward", c->backward_, "--from-model: backward problems too");
  cmd->add_option("--dtype", c->dtype_, "--from-model: bf16, fp16 or fp32 (default: the config's torch_dtype)");
  cmd->add_option("--servers", c->servers_, "daemons to use, comma-separated (default: --server)");
  cmd->add_option("--servers-file", c->servers_file_, "daemons to use, one address per line");
  cmd->add_option("--shard", c->shard_, "i/n: only the problems whose key hashes to i mod n");
  cmd->add_option("--repetitions", c->repetitions_, "timed repetitions per candidate (>= 20; 0: default)");
  cmd->add_flag("--json", c->json_, "print the summary as JSON on stdout");
  cmd->add_flag("--dry-run", c->dry_run_, "list the problems (after --shard) and exit; contacts no daemon");
  cmd->add_flag("--answers", c->answers_,
                "tune nothing: print what the daemon answers for each problem now (heuristic on a miss)");
  return c;
}

bool PrewarmCommand::parsed() const { return command_->parsed(); }

int PrewarmCommand::Run(const std::string& default_server, const ClientOptions& client) const {
  // The problem list; any error here tunes nothing.
  const bool from_model = !model_path_.empty();
  if (from_model == !shapes_path_.empty()) {
    return UsageError(absl::InvalidArgumentError("give either a shapes file or --from-model CONFIG.json"));
  }
  if (!from_model) {
    for (const char* flag : {"--tokens", "--backward", "--dtype"}) {
      if (command_->count(flag) > 0) {
        return UsageError(absl::InvalidArgumentError(absl::StrCat(flag, " needs --from-model")));
      }
    }
  }
  absl::StatusOr<std::vector<PrewarmProblem>> problems;
  if (from_model) {
    absl::StatusOr<ModelConfig> config = LoadModelConfig(model_path_);
    if (!config.ok()) return UsageError(config.status());
    ModelShapeOptions options;
    options.backward = backward_;
    absl::StatusOr<std::vector<int64_t>> tokens = ParseTokenList(tokens_);
    if (!tokens.ok()) return UsageError(tokens.status());
    options.tokens = *tokens;
    if (!dtype_.empty()) {
      absl::StatusOr<DType> dtype = ParseDType(dtype_);
      if (!dtype.ok())
        return UsageError(absl::InvalidArgumentError(absl::StrCat("--dtype: ", dtype.status().message())));
      options.dtype = *dtype;
    }
    problems = DeriveModelProblems(*config, options);
  } else {
    problems = LoadShapesFile(shapes_path_);
  }
  if (!problems.ok()) return UsageError(problems.status());
  if (absl::Status s = ValidatePrewarmProblems(*problems); !s.ok()) return UsageError(s);
  if (!shard_.empty()) {
    absl::StatusOr<Shard> shard = ParseShard(shard_);
    if (!shard.ok()) return UsageError(shard.status());
    *problems = SelectShard(*problems, *shard);
  }
  if (repetitions_ != 0 && repetitions_ < 20) {
    return UsageError(absl::InvalidArgumentError("--repetitions: must be >= 20 (or 0 for the default)"));
  }

  // The servers.
  if (!servers_.empty() && !servers_file_.empty()) {
    return UsageError(absl::InvalidArgumentError("give --servers or --servers-file, not both"));
  }
  std::vector<std::string> servers = {default_server};
  if (!servers_.empty()) servers = SplitServerList(servers_);
  if (!servers_file_.empty()) {
    absl::StatusOr<std::vector<std::string>> listed = ReadServersFile(servers_file_);
    if (!listed.ok()) return UsageError(listed.status());
    servers = *listed;
  }
  if (servers.empty()) return UsageError(absl::InvalidArgumentError("--servers: no address given"));

  if (answers_ && servers.size() > 1) {
    return UsageError(absl::InvalidArgumentError("--answers asks one daemon: give one server"));
  }
  if (answers_ && (dry_run_ || json_)) {
    return UsageError(absl::InvalidArgumentError("--answers prints a table: not with --dry-run or --json"));
  }

  const std::string counts = CountByKind(*problems);
  if (answers_) return PrintAnswers(*problems, servers.front(), client);
  if (dry_run_) {
    for (const PrewarmProblem& p : *problems) {
      std::printf("%s\n", p.key.c_str());
    }
    std::printf("%zu problems (%s)\n", problems->size(), counts.c_str());
    return kExitDone;
  }
  std::fprintf(stderr, "ktune prewarm: %zu problems (%s)\n", problems->size(), counts.c_str());

  PrewarmOptions options;
  options.call_timeout_s = client.timeout_s;
  options.client = client;
  options.repetitions = repetitions_;
  PrewarmProgress progress(stderr, isatty(STDERR_FILENO) != 0);
  const PrewarmReport report = Prewarm(*problems, servers, options, &progress);
  progress.Finish();
  if (json_) {
    std::printf("%s\n", PrewarmReportJson(report).c_str());
  } else {
    PrintSummary(report);
  }
  if (report.kinds.empty()) {
    std::fprintf(stderr, "ktune prewarm: error: no usable server (every one unreachable or compile-only)\n");
  }
  return report.complete() ? kExitDone : kExitIncomplete;
}

}  // namespace ktune
