// Files named on the command line, end to end through the ktune and ktuned
// binaries: anything but a regular file of bounded size is refused at once,
// as a usage error (exit 2), before any daemon is contacted; prewarm checks
// every problem as ktuned would before calling anyone.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::RunCommand;
using testing::TempDir;

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A sparse file of `bytes`: costs no disk.
void Sparse(const std::string& path, uint64_t bytes) {
  WriteText(path, "");
  std::filesystem::resize_file(path, bytes);
}

TEST_CASE("every ktune command that reads a file refuses a FIFO, a device, a directory or an oversized file at once",
          "[e2e][cli]") {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const std::string subdir = dir.path() + "/subdir";
  std::filesystem::create_directory(subdir);
  const std::string big_bundle = dir.path() + "/big.ktb";
  Sparse(big_bundle, (uint64_t{256} << 20) + 1);
  const std::string big_text = dir.path() + "/big.yaml";
  Sparse(big_text, (uint64_t{16} << 20) + 1);

  // No daemon: each refusal must come before any call. `timeout` bounds a
  // command that would block on the FIFO (exit 124).
  const std::string cli = absl::StrCat("timeout 20 ", KTUNE_CLI_PATH, " --server unix:", dir.path(), "/none.sock ");
  struct Case {
    std::string args;  // %s is the file
    bool text_file;    // shapes file / model config / token file: the 16 MiB sparse file is its oversized one
  };
  const std::vector<Case> commands = {
      {"bundle inspect %s", false},
      {"bundle merge %s %s -o " + dir.path() + "/out.ktb", false},
      {"import %s", false},
      {"prewarm %s --dry-run", true},
      {"prewarm --from-model %s --dry-run", true},
      {"--token-file %s status", true},
  };
  for (const Case& c : commands) {
    for (const auto& [file, why] :
         {std::pair{fifo, std::string("it is a FIFO, not a regular file")},
          std::pair{std::string("/dev/zero"), std::string("it is a character device, not a regular file")},
          std::pair{subdir, std::string("directory")},
          std::pair{c.text_file ? big_text : big_bundle, std::string("bytes, more than the")}}) {
      std::string args = c.args;
      for (size_t at; (at = args.find("%s")) != std::string::npos;) args.replace(at, 2, file);
      INFO(args);
      const auto start = std::chrono::steady_clock::now();
      const auto r = RunCommand(cli + args, dir.path());
      INFO(r.err);
      CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 10);
      CHECK(r.exit_code == 2);
      CHECK(r.err.find(why) != std::string::npos);
      CHECK(r.err.find("cannot reach") == std::string::npos);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
  }
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/out.ktb"));
}

TEST_CASE("ktuned --import-bundle of a FIFO or a device stops the start at once, naming it", "[e2e][bundle]") {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& file : {fifo, std::string("/dev/zero")}) {
    INFO(file);
    // It used to block on the FIFO for good (and then ignore SIGTERM), or
    // die of bad_alloc on /dev/zero; `timeout` turns a hang into exit 124.
    const auto r = RunCommand(absl::StrCat("timeout -s KILL 20 ", testing::KtunedPath(), " --listen unix:", dir.path(),
                                           "/s.sock --db ", dir.path(), "/x.db --import-bundle ", file),
                              dir.path());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("event=import_bundle_failed") != std::string::npos);
    CHECK(r.err.find("not a regular file") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path() + "/s.sock"));
  }
}

TEST_CASE("prewarm --dry-run refuses a problem ktuned would refuse, before calling anyone", "[e2e][prewarm]") {
  TempDir dir;
  const std::string cli = absl::StrCat(KTUNE_CLI_PATH, " --server unix:", dir.path(), "/none.sock prewarm ");
  // intermediate_size 2^62: 2 * 2^62 wrapped to a GEMM with n = -2^63 that
  // --dry-run listed.
  const std::string model = dir.path() + "/config.json";
  WriteText(model, R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "rms_norm_eps": 1e-6,
                       "intermediate_size": 4611686018427387904})");
  const auto huge = RunCommand(cli + "--from-model " + model + " --dry-run", dir.path());
  CHECK(huge.exit_code == 2);
  CHECK(huge.err.find("intermediate_size: must be at most 16777216") != std::string::npos);
  CHECK(huge.out.empty());
  // A shapes file's GEMM beyond ktuned's bounds (shapes files check only
  // that dimensions are positive).
  const std::string shapes = dir.path() + "/shapes.yaml";
  WriteText(shapes, "- {op: rmsnorm.fwd, m: 8, n: 64}\n- {op: gemm, m: 64, n: 4194304, k: 64}\n");
  const auto wide = RunCommand(cli + shapes + " --dry-run", dir.path());
  CHECK(wide.exit_code == 2);
  CHECK(wide.err.find("problem.gemm.n: must be in [1, 1048576], got 4194304") != std::string::npos);
  CHECK(wide.out.empty());
}

}  // namespace
}  // namespace ktune
