// The bundle commands of the ktune CLI:
//
//   ktune export -o FILE [--op OP] [--gpu NAME] [--since YYYY-MM-DD]
//   ktune import FILE [--policy keep-faster|prefer-incoming|prefer-existing] [--dry-run] [--json]
//   ktune bundle inspect FILE [--json]                      (offline)
//   ktune bundle merge A B [C...] -o OUT [--policy ...] [--json]   (offline)
//
// export and import talk to a daemon; inspect and merge read files only and
// validate them exactly as an import does (DecodeBundle), so a bad file gets
// the same clear error and nothing is written. Reports print as a table, or
// with --json as one ImportBundleResponse (merge, import) or Bundle (inspect).
// Not thread-safe: one instance per process, used from main.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/client.h"

namespace ktune {

struct ExportedFile {
  int64_t entries = 0;
  uint64_t bytes = 0;
};
// Streams the daemon's export into the bundle file `path` (replaced only when
// the whole bundle arrived and matches its checksum).
absl::StatusOr<ExportedFile> ExportToFile(Client* client, const v1::ExportBundleRequest& request,
                                          const std::string& path);

class BundleCommands {
 public:
  // Registers the subcommands on `app`, which must outlive this object.
  explicit BundleCommands(CLI::App* app);

  // True when the command line named one of these subcommands.
  bool parsed() const;

  // Runs the parsed subcommand; returns the process exit code (0 ok, 1 error
  // with a one-line reason on stderr). `client` is used by export and import
  // only; it is not connected until then.
  int Run(Client* client);

 private:
  int Export(Client* client);
  int Import(Client* client);
  int Inspect();
  int Merge();

  CLI::App* export_cmd_ = nullptr;
  CLI::App* import_cmd_ = nullptr;
  CLI::App* inspect_cmd_ = nullptr;
  CLI::App* merge_cmd_ = nullptr;

  std::string output_;  // export -o, merge -o
  std::string op_;
  std::string gpu_;
  std::string since_;
  std::string policy_ = "keep-faster";
  bool dry_run_ = false;
  bool json_ = false;
  std::string file_;                 // import, inspect
  std::vector<std::string> inputs_;  // merge
};

}  // namespace ktune
