// The store at scale: fills a database with synthetic valid entries (the
// shapes of tests/cache/test_entries.h, M varied; norms and GEMMs), then
// measures what issue 29 set targets for at 1,000,000 entries: ktuned's start
// (until the socket answers), its idle RSS, `ktune status` and `ktune ls
// --limit 100` as a user runs them (whole CLI processes, median), a GetConfig
// hit read from the store and then from memory, and a full streamed export
// (time, the daemon's peak RSS, the CLI's peak RSS). Prints a Markdown table.
//
//   ktune_store_scale_bench --entries 1000000 --dir /tmp/ktune-scale
//
// CPU only: the daemon runs compile-only. The database is kept in --dir, and
// reused when it already holds --entries entries.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cache/store.h"
#include "client/client.h"
#include "tests/cache/test_entries.h"
#include "tuner/builtin_ops.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/wire.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Entry i of the synthetic store: four kinds in turn (RMSNorm and LayerNorm
// forward, a GEMM of the mma.sync template, a cuBLASLt GEMM), M distinct per kind.
ktune::v1::Entry Synthetic(int64_t i) {
  const int64_t m = i / 4 + 1;
  switch (i % 4) {
    case 0: {
      // Keyed as this compile-only daemon keys its own answers (its target,
      // the build's template), so that GetConfig finds them: hits.
      ktune::v1::Entry e = ktune::testutil::MakeTestEntry(m, 4096);
      static const ktune::v1::DeviceFingerprint device = ktune::DeviceToProto(ktune::CompileOnlyTarget());
      static const ktune::v1::SoftwareFingerprint software = [] {
        absl::StatusOr<const ktune::KernelSource*> source = ktune::FindKernelSource("norm/rmsnorm_fwd");
        return ktune::SoftwareToProto({(*source)->hash, ktune::NvrtcVersion(), ktune::kSchemaVersion});
      }();
      *e.mutable_device() = device;
      *e.mutable_software() = software;
      return e;
    }
    case 1: {
      ktune::v1::Entry e = ktune::testutil::MakeTestEntry(m, 8192);
      e.mutable_problem()->mutable_norm()->set_op(ktune::v1::LAYERNORM);
      return e;
    }
    case 2:
      return ktune::testutil::MakeTestGemmEntry(m, 4096, 4096);
    default:
      return ktune::testutil::MakeTestGemmEntry(m, 14336, 4096, /*cublaslt=*/true);
  }
}

int Fill(const std::string& db, int64_t entries) {
  absl::StatusOr<std::unique_ptr<ktune::Store>> store = ktune::Store::Open(ktune::BuiltinOps(), db);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::map<std::string, int64_t>> counts = (*store)->CountByOp();
  int64_t have = 0;
  if (counts.ok()) {
    for (const auto& [op, n] : *counts) have += n;
  }
  if (have == entries) {
    std::fprintf(stderr, "reusing %s (%lld entries)\n", db.c_str(), static_cast<long long>(have));
    return 0;
  }
  if (have != 0) {
    std::fprintf(stderr, "%s holds %lld entries, not %lld: remove it first\n", db.c_str(), static_cast<long long>(have),
                 static_cast<long long>(entries));
    return 1;
  }
  const auto t0 = Clock::now();
  constexpr int64_t kBatch = 50000;  // one transaction each, prepared statements
  for (int64_t start = 0; start < entries; start += kBatch) {
    std::vector<ktune::v1::Entry> batch;
    for (int64_t i = start; i < std::min(entries, start + kBatch); ++i) batch.push_back(Synthetic(i));
    absl::StatusOr<ktune::PutAllStats> stats = (*store)->PutAll(batch);
    if (!stats.ok()) {
      std::fprintf(stderr, "fill: %s\n", stats.status().ToString().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "filled %lld entries in %.1f s (%.0f MB on disk)\n", static_cast<long long>(entries),
               Ms(Clock::now() - t0) / 1000, std::filesystem::file_size(db) / 1e6);
  return 0;
}

// VmRSS or VmHWM of a process, in MB.
double ProcMb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024;
  }
  return -1;
}

pid_t Spawn(const std::vector<std::string>& args, const std::string& out) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(out.c_str(), "w", stdout);
    (void)f;
    dup2(fileno(stdout), STDERR_FILENO);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Runs a command to completion: wall ms, and its peak RSS in MB.
std::pair<double, double> Run(const std::vector<std::string>& args, const std::string& out) {
  const auto t0 = Clock::now();
  pid_t pid = Spawn(args, out);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  const double ms = Ms(Clock::now() - t0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s failed (see %s)\n", args[0].c_str(), out.c_str());
    std::exit(1);
  }
  return {ms, usage.ru_maxrss / 1024.0};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ktune_store_scale_bench: the store at 1,000,000 entries"};
  int64_t entries = 1000000;
  std::string dir = "/tmp/ktune-store-scale";
  std::string ktuned = KTUNED_PATH, ktune = KTUNE_CLI_PATH;
  app.add_option("--entries", entries)->check(CLI::Range(int64_t{4}, int64_t{100000000}))->capture_default_str();
  app.add_option("--dir", dir)->capture_default_str();
  app.add_option("--ktuned", ktuned)->capture_default_str();
  app.add_option("--ktune", ktune)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::filesystem::create_directories(dir);
  const std::string db = dir + "/cache.db";
  if (int rc = Fill(db, entries); rc != 0) return rc;
  const std::string sock = dir + "/ktuned.sock";
  const std::string address = "unix:" + sock;
  std::filesystem::remove(sock);

  const auto t0 = Clock::now();
  pid_t daemon =
      Spawn({ktuned, "--listen", address, "--db", db, "--kernel-cache-dir", dir + "/kernels"}, dir + "/ktuned.log");
  double start_ms = -1;
  while (Ms(Clock::now() - t0) < 120000) {
    if (std::filesystem::exists(sock) && ktune::Client::Create(address, 1)->GetStatus().ok()) {
      start_ms = Ms(Clock::now() - t0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (start_ms < 0) {
    std::fprintf(stderr, "ktuned did not answer (see %s/ktuned.log)\n", dir.c_str());
    kill(daemon, SIGKILL);
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double idle_rss = ProcMb(daemon, "VmRSS");

  auto client = ktune::Client::Create(address, 60);
  std::vector<double> rpc_status;
  for (int i = 0; i < 20; ++i) {
    const auto s0 = Clock::now();
    auto r = client->GetStatus();
    rpc_status.push_back(Ms(Clock::now() - s0));
    if (!r.ok() || r->entries() != entries) {
      std::fprintf(stderr, "status: wrong answer\n");
      return 1;
    }
  }
  std::vector<double> cli_status, cli_ls, cli_floor;
  for (int i = 0; i < 20; ++i) cli_floor.push_back(Run({ktune, "--help"}, dir + "/help.out").first);
  for (int i = 0; i < 20; ++i) {
    cli_status.push_back(Run({ktune, "--server", address, "status"}, dir + "/status.out").first);
  }
  for (int i = 0; i < 20; ++i) {
    cli_ls.push_back(Run({ktune, "--server", address, "ls", "--limit", "100"}, dir + "/ls.out").first);
  }

  // A hit: the first read comes from SQLite, the rest from memory.
  ktune::v1::GetConfigRequest hit;
  *hit.mutable_problem() = Synthetic(entries / 2 / 4 * 4).problem();
  hit.set_policy(ktune::v1::CACHED_ONLY);
  std::vector<double> hot;
  double cold = 0;
  for (int i = 0; i < 201; ++i) {
    const auto s0 = Clock::now();
    auto r = client->GetConfig(hit);
    const double ms = Ms(Clock::now() - s0);
    if (!r.ok()) {
      // The synthetic entries' device is an H200's: a compile-only daemon
      // keys its answers by its own target, so such a lookup misses.
      break;
    }
    if (i == 0)
      cold = ms;
    else
      hot.push_back(ms);
  }

  const std::string bundle = dir + "/all.ktb";
  auto [export_ms, cli_peak] =
      Run({ktune, "--server", address, "--timeout", "3600", "export", "-o", bundle}, dir + "/export.out");
  const double daemon_peak = ProcMb(daemon, "VmHWM");
  const double after_rss = ProcMb(daemon, "VmRSS");
  kill(daemon, SIGTERM);
  waitpid(daemon, nullptr, 0);

  std::printf("| measure (%lld entries, %.0f MB database) | value |\n|---|---|\n", static_cast<long long>(entries),
              std::filesystem::file_size(db) / 1e6);
  std::printf("| ktuned start, until GetStatus answers | %.0f ms |\n", start_ms);
  std::printf("| ktuned idle RSS, 1 s after start | %.0f MB |\n", idle_rss);
  std::printf("| GetStatus RPC, median of 20 | %.2f ms |\n", Median(rpc_status));
  std::printf("| `ktune --help` (the CLI process alone, no call: the floor), median of 20 | %.1f ms |\n",
              Median(cli_floor));
  std::printf("| `ktune status` (whole CLI process), median of 20 | %.1f ms |\n", Median(cli_status));
  std::printf("| `ktune ls --limit 100` (whole CLI process), median of 20 | %.1f ms |\n", Median(cli_ls));
  if (!hot.empty()) {
    std::printf("| GetConfig hit, first (from SQLite) | %.3f ms |\n", cold);
    std::printf("| GetConfig hit, from memory, median of 200 | %.3f ms |\n", Median(hot));
  }
  std::printf("| `ktune export` of everything, streamed | %.1f s, %.0f MB file |\n", export_ms / 1000,
              std::filesystem::file_size(bundle) / 1e6);
  std::printf("| ktuned peak RSS (VmHWM, through the export) | %.0f MB |\n", daemon_peak);
  std::printf("| ktuned RSS after the export | %.0f MB |\n", after_rss);
  std::printf("| `ktune export` CLI peak RSS | %.0f MB |\n", cli_peak);
  return 0;
}
