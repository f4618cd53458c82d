// `ktune prewarm`: the command-line front of the prewarm engine
// (client/prewarm.h). It builds the problem list from a shapes file
// (client/shapes_file.h) or a model config (client/model_shapes.h), takes
// this job's --shard, runs the engine over --servers / --servers-file (or the
// global --server) and prints the summary (text, or --json on stdout).
// Exit codes: 0 every problem done, 1 some failed or not done (or no usable
// server), 2 usage error (bad flags, shapes file or model config: nothing is
// tuned then). With --answers it tunes nothing itself: it asks one daemon
// each problem's answer now (GetConfig, heuristic on a miss) and prints a
// row per problem; exit 1 if any was refused.
// Thread-safety: one per process; Add before parsing, Run after.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "client/client.h"

namespace CLI {
class App;
}

namespace ktune {

class PrewarmCommand {
 public:
  // Registers the `prewarm` subcommand and its flags on `app`.
  static std::unique_ptr<PrewarmCommand> Add(CLI::App* app);

  // True when the command line chose `prewarm`.
  bool parsed() const;

  // `default_server` and `client` are the global --server, --timeout, token
  // and TLS options.
  int Run(const std::string& default_server, const ClientOptions& client) const;

 private:
  PrewarmCommand() = default;

  CLI::App* command_ = nullptr;
  std::string shapes_path_;
  std::string model_path_;
  std::string tokens_ = "1,16,128,2048,8192";
  bool backward_ = false;
  std::string dtype_;
  std::string servers_;
  std::string servers_file_;
  std::string shard_;
  int repetitions_ = 0;
  bool json_ = false;
  bool dry_run_ = false;
  bool answers_ = false;
};

}  // namespace ktune
