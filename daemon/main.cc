// ktuned: the ktune daemon, norms and GEMM. Parses and checks its flags,
// listen addresses and token files, opens the store and the compiled-kernel
// cache, and starts a GPU worker per GPU of --gpus (daemon/gpus.h): this
// binary re-executed with --worker-fd (tuner/run/worker.h), so candidates run
// out of process. Without a worker (no GPU, no driver) it is compile-only:
// cached and heuristic answers, no tuning.
// It then imports --import-bundle if one is given, serves gRPC (and /metrics
// with --metrics-listen), tells systemd READY=1, and runs until SIGTERM or
// SIGINT; then it drains for up to --drain-seconds, cancels the tunes left and
// exits 0. SIGHUP re-reads the token files (one that cannot be read keeps the
// previous tokens); the TLS files are re-read on their own, every
// --tls-refresh-seconds. Exit 2: a usage error, a bad flag, token file,
// TLS certificate or key, listen or metrics address, or a bundle that is
// there but bad; exit 1: the store, the kernel cache or a listener could not
// be opened. A start that fails leaves no database file it created.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cache/bundle_merge.h"
#include "cache/fleet_store.h"
#include "cache/store.h"
#include "daemon/auth.h"
#include "daemon/fleet_sync.h"
#include "daemon/gpus.h"
#include "daemon/metrics.h"
#include "daemon/sd_notify.h"
#include "daemon/server.h"
#include "daemon/service.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tuner/builtin_ops.h"
#include "tuner/compile/kernel_cache.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/input_file.h"
#include "tuner/core/paths.h"
#include "tuner/problem_runners.h"
#include "tuner/run/worker.h"

namespace {

// Removes the SQLite database at `path` (and its -wal, -shm and -journal
// files) on destruction, unless it was there before or Keep() was called.
class RemoveIfStartFails {
 public:
  explicit RemoveIfStartFails(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    existed_ = std::filesystem::exists(path_, ec) || ec;  // unsure: leave it alone
  }
  RemoveIfStartFails(const RemoveIfStartFails&) = delete;
  RemoveIfStartFails& operator=(const RemoveIfStartFails&) = delete;
  ~RemoveIfStartFails() {
    if (existed_ || kept_) return;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      std::error_code ec;
      std::filesystem::remove(path_ + suffix, ec);
    }
  }
  void Keep() { kept_ = true; }

 private:
  std::string path_;
  bool existed_ = false;
  bool kept_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  // The GPU worker: ktuned re-executes itself to run candidates out of process
  // (tuner/run/worker.h). Not a user-facing mode.
  if (argc == 3 && std::string(argv[1]) == "--worker-fd")
    return ktune::RunWorker(std::atoi(argv[2]), ktune::BuiltinWorkerRunners());

  // absl::Mutex's deadlock detection is on in this build of abseil: every
  // lock (gRPC's included) then takes a process-wide graph lock, a measurable
  // share of a cache hit under concurrent callers
  // (bench/results/2026-12-01-load-2core-414c014.md).
  // Why: bench/results/decisions/getconfig-hit-path.md
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"ktuned: kernel autotuning daemon (RMSNorm and LayerNorm, forward and backward, and GEMM)"};
  app.set_version_flag("--version", "ktuned " KTUNE_VERSION);
  std::vector<std::string> listen;
  std::string db_path = ktune::DefaultDatabasePath();
  std::string log_level = "info";
  std::string tls_cert, tls_key;
  double drain_s = 30;
  std::string metrics_listen;
  bool metrics_allow_remote = false;
  ktune::ServiceOptions service_options;
  bool no_background_tunes = false;
  double candidate_timeout_s = 30;
  std::string kernel_cache_dir = ktune::DefaultKernelCacheDir();
  int64_t kernel_cache_mb = 2048;
  std::string search = "grid";
  std::string token_file, admin_token_file;
  std::string import_bundle;
  std::string import_policy = "keep-faster";
  std::string fleet_store, fleet_password_file;
  int fleet_lookup_ms = 50;
  double fleet_tune_wait_s = 300;
  std::string gpus_flag = "all";
  app.add_option("--listen", listen,
                 "unix:/path or host:port; repeatable (default " + ktune::DefaultServerAddress() + ")");
  app.add_option("--db", db_path, "SQLite cache database")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--tls-cert", tls_cert, "PEM certificate for TCP listeners")->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls_key, "PEM private key for TCP listeners")->check(CLI::ExistingFile);
  unsigned tls_refresh_s = 60;
  // Hidden: how often the TLS files are re-read (tests rotate them in seconds).
  app.add_option("--tls-refresh-seconds", tls_refresh_s)->check(CLI::Range(1, 86400))->group("");
  app.add_option("--drain-seconds", drain_s, "grace period for in-flight calls at shutdown")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--max-queued-tunes", service_options.max_queued_tunes,
                 "tuning jobs that may wait; more get RESOURCE_EXHAUSTED")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--no-background-tunes", no_background_tunes,
               "HEURISTIC_ON_MISS answers do not queue a tune of the problem");
  app.add_option("--metrics-listen", metrics_listen,
                 "host:port for Prometheus metrics at /metrics (off by default; plain HTTP, loopback "
                 "unless --metrics-allow-remote)");
  app.add_flag("--metrics-allow-remote", metrics_allow_remote,
               "let --metrics-listen bind beyond loopback (the endpoint has no TLS and no token: use a "
               "cluster-internal address)");
  app.add_option("--candidate-timeout", candidate_timeout_s,
                 "seconds one candidate may run before the watchdog kills its worker")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--kernel-cache-dir", kernel_cache_dir, "compiled kernels kept between tunes")->capture_default_str();
  app.add_option("--kernel-cache-max-mb", kernel_cache_mb, "bound on the kernel cache (LRU eviction)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--token-file", token_file,
                 "a token TCP callers must present (authorization: Bearer); needed beyond loopback")
      ->check(CLI::ExistingFile);
  app.add_option("--admin-token-file", admin_token_file,
                 "the token bundle imports need; without it imports come over the Unix socket only")
      ->check(CLI::ExistingFile);
  app.add_option("--search", search, "grid (every pruned candidate) or descent (coordinate descent)")
      ->check(CLI::IsMember({"grid", "descent"}))
      ->capture_default_str();
  app.add_option("--search-max-candidates", service_options.search.max_candidates,
                 "descent: stop after this many candidates (0 = no limit)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--search-max-seconds", service_options.search.max_seconds,
                 "descent: stop proposing after this many seconds (0 = no limit)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--import-bundle", import_bundle,
                 "import this bundle before serving (a missing file is skipped with a warning; "
                 "a bad one stops the start)");
  app.add_option("--import-policy", import_policy, "merge policy for --import-bundle")
      ->check(CLI::IsMember({"keep-faster", "prefer-incoming", "prefer-existing"}))
      ->capture_default_str();
  app.add_option("--fleet-store", fleet_store,
                 "postgresql:// URL of the PostgreSQL store a fleet's daemons share (misses look there, tuned and "
                 "imported entries are published, each key is tuned once per fleet); sslmode and the rest pass "
                 "to libpq; never a password: see --fleet-store-password-file");
  app.add_option("--fleet-store-password-file", fleet_password_file,
                 "file holding the fleet store's password (one line)");
  app.add_option("--fleet-lookup-ms", fleet_lookup_ms,
                 "how long a local miss waits for the fleet store before answering without it")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--fleet-tune-wait-seconds", fleet_tune_wait_s,
                 "TUNE_ON_MISS: how long to wait for a key another daemon is tuning before tuning it here too")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--gpus", gpus_flag,
                 "the GPUs to tune on, a worker process each: all, a count N (the first N), or ordinals (0,2,5); "
                 "of any kinds: answers are per GPU kind, a request picks one (the first GPU's by default)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, whatever
    // CLI11's own code for it (105, 106, 109, ...).
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    std::fprintf(stderr, "ktuned: error: %s\n", e.what());
    return 2;
  }
  service_options.background_tunes = !no_background_tunes;
  service_options.search.descent = search != "grid";
  if (listen.empty()) listen.push_back(ktune::DefaultServerAddress());

  // Logs go to stderr (journald and kubectl logs pick it up); stdout stays quiet.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ktuned"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z ktuned level=%l %v");

  // Block the shutdown and reload signals before any thread starts, so that
  // only the sigwait below receives them (SIGHUP's default would kill the
  // daemon and leave its socket behind).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Bad flags change nothing: check every address and token before touching
  // the database.
  const bool have_tls = !tls_cert.empty() && !tls_key.empty();
  std::string token, admin_token;
  // Both token files, or the first error; at start and on SIGHUP.
  auto read_tokens = [&]() -> absl::Status {
    std::string read_token, read_admin_token;
    for (auto [path, out] : {std::pair{&token_file, &read_token}, std::pair{&admin_token_file, &read_admin_token}}) {
      if (path->empty()) continue;
      absl::StatusOr<std::string> read = ktune::ReadTokenFile(*path);
      if (!read.ok()) return read.status();
      *out = *read;
    }
    token = std::move(read_token);
    admin_token = std::move(read_admin_token);
    return absl::OkStatus();
  };
  if (absl::Status s = read_tokens(); !s.ok()) {
    spdlog::critical("event=bad_flag error=\"{}\"", std::string(s.message()));
    return 2;
  }
  for (const std::string& address : listen) {
    absl::Status s = ktune::ValidateListenAddress(address, have_tls);
    if (s.ok() && address.rfind("unix:", 0) != 0 && !ktune::IsLoopbackTcp(address) && token.empty()) {
      s = absl::InvalidArgumentError(
          absl::StrCat("--listen ", address, ": TCP beyond loopback needs a token too (--token-file)"));
    }
    if (!s.ok()) {
      spdlog::critical("event=bad_flag error=\"{}\"", std::string(s.message()));
      return 2;
    }
  }
  if (absl::Status s = ktune::CheckTlsFiles(tls_cert, tls_key); !s.ok()) {
    spdlog::critical("event=bad_flag error=\"{}\"", std::string(s.message()));
    return 2;
  }
  if (!metrics_listen.empty() && !ktune::IsLoopbackTcp(metrics_listen) && !metrics_allow_remote) {
    spdlog::critical(
        "event=bad_flag error=\"--metrics-listen {}: beyond loopback the metrics endpoint is "
        "readable by anyone who can reach it (plain HTTP, no token); pass "
        "--metrics-allow-remote to mean it\"",
        metrics_listen);
    return 2;
  }
  absl::StatusOr<ktune::GpuSelection> gpu_selection = ktune::ParseGpuFlag(gpus_flag);
  if (!gpu_selection.ok()) {
    spdlog::critical("event=bad_flag error=\"{}\"", std::string(gpu_selection.status().message()));
    return 2;
  }
  service_options.auth = ktune::Authorizer(token, admin_token);
  if (fleet_store.empty() && !fleet_password_file.empty()) {
    spdlog::critical("event=bad_flag error=\"--fleet-store-password-file needs --fleet-store\"");
    return 2;
  }
  if (!fleet_store.empty()) {
    absl::Status s = ktune::CheckFleetUrl(fleet_store);
    if (s.ok() && !fleet_password_file.empty()) s = ktune::ReadFleetPasswordFile(fleet_password_file).status();
    if (!s.ok()) {
      spdlog::critical("event=bad_flag error=\"{}\"", std::string(s.message()));
      return 2;
    }
    service_options.fleet.store.url = fleet_store;
    service_options.fleet.store.password_file = fleet_password_file;
    service_options.fleet.store.publisher = ktune::DefaultFleetPublisher();
    service_options.fleet.lookup_timeout = absl::Milliseconds(fleet_lookup_ms);
    service_options.fleet.tune_wait = absl::Seconds(fleet_tune_wait_s);
  }

  // What can only fail once the database is open (a bundle that does not
  // import, a port already taken) must change nothing either: a database
  // file this start created is removed again unless the daemon comes up.
  // Declared before the store, so the store is closed first.
  RemoveIfStartFails new_database(db_path);
  absl::StatusOr<std::unique_ptr<ktune::Store>> store = ktune::Store::Open(ktune::BuiltinOps(), db_path);
  if (!store.ok()) {
    spdlog::critical("event=store_open_failed db=\"{}\" error=\"{}\"", db_path, std::string(store.status().message()));
    return 1;
  }

  absl::StatusOr<std::unique_ptr<ktune::KernelCache>> kernel_cache =
      ktune::KernelCache::Open(kernel_cache_dir, static_cast<uint64_t>(kernel_cache_mb) << 20);
  if (!kernel_cache.ok()) {
    spdlog::critical("event=kernel_cache_open_failed error=\"{}\"", std::string(kernel_cache.status().message()));
    return 1;
  }

  // Candidates run in worker processes (this binary, re-executed), one per
  // GPU, so a kernel that faults or hangs never takes the daemon down, nor
  // another GPU's tune.
  ktune::WorkerOptions worker_options;
  worker_options.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  worker_options.candidate_timeout_s = candidate_timeout_s;
  absl::StatusOr<ktune::NodeGpus> node = ktune::StartGpuWorkers(worker_options, *gpu_selection);
  if (!node.ok()) {  // --gpus names GPUs this node lacks
    spdlog::critical("event=bad_flag error=\"{}\"", std::string(node.status().message()));
    return 2;
  }
  for (const ktune::GpuExecutor& gpu : node->gpus) {
    const ktune::DeviceInfo& info = gpu.executor->device();
    spdlog::info("event=device gpu={} name=\"{}\" cc={}.{} sms={} driver={} worker_pid={}", gpu.ordinal, info.name,
                 info.cc_major, info.cc_minor, info.sm_count, info.driver_version, gpu.executor->pid());
  }
  if (!node->gpus.empty() && node->gpus.front().executor->device().name.find("fake") != std::string::npos) {
    spdlog::warn(
        "event=fake_device gpus={} note=\"KTUNE_WORKER_FAKE_DEVICE is set: timings are made up "
        "(tests only)\"",
        node->gpus.size());
  }
  if (node->gpus.empty()) {
    spdlog::warn(
        "event=compile_only reason=\"{}\" note=\"serving cached and heuristic answers; "
        "tuning is refused\"",
        node->compile_only_reason);
  }

  ktune::KtuneServiceImpl service(store->get(), kernel_cache->get(), std::move(node->gpus), node->compile_only_reason,
                                  service_options);
  if (!import_bundle.empty()) {
    // A fleet bundle is published after the first prewarm, which needs the
    // daemons running: so a missing file is the normal first start, while a
    // file that is there but bad is a deploy error that must not go unseen.
    // The read never blocks (a FIFO is refused, not waited on), so a SIGTERM
    // sent now is acted on as soon as the start is over.
    absl::StatusOr<std::string> bytes = ktune::ReadInputFile(import_bundle, ktune::kBundleFile);
    if (absl::IsNotFound(bytes.status())) {
      spdlog::warn("event=import_bundle_missing path=\"{}\" note=\"starting without it\"", import_bundle);
    } else {
      absl::StatusOr<ktune::v1::ImportBundleResponse> report = absl::UnknownError("not read");
      if (bytes.ok()) {
        ktune::v1::ImportBundleRequest request;
        request.set_bundle(*std::move(bytes));
        request.set_policy(*ktune::ParseMergePolicy(import_policy));  // checked by the flag
        report = service.Import(request);
      } else {
        report = bytes.status();
      }
      if (!report.ok()) {
        spdlog::critical("event=import_bundle_failed path=\"{}\" error=\"{}\"", import_bundle,
                         std::string(report.status().message()));
        return 2;
      }
      spdlog::info(
          "event=import_bundle path=\"{}\" added={} replaced={} unchanged={} kept={} "
          "rejected={}",
          import_bundle, report->added(), report->replaced(), report->unchanged(), report->kept(), report->rejected());
    }
  }

  ktune::MetricsServer metrics_server;
  if (!metrics_listen.empty()) {
    absl::Status s = metrics_server.Start(metrics_listen, service.metrics(), [&service] { service.RefreshGauges(); });
    if (!s.ok()) {
      spdlog::critical("event=metrics_listen_failed error=\"{}\"", std::string(s.message()));
      return 2;
    }
    spdlog::info("event=metrics_listening address=\"{}\" path=/metrics", metrics_listen);
  }
  ktune::ServerOptions options{listen, tls_cert, tls_key, tls_refresh_s, service_options.auth};
  absl::StatusOr<std::unique_ptr<ktune::Server>> server = ktune::Server::Start(options, &service);
  if (!server.ok()) {
    spdlog::critical("event=listen_failed error=\"{}\"", std::string(server.status().message()));
    return 1;
  }
  new_database.Keep();
  for (const std::string& address : listen) {
    spdlog::info("event=listening address=\"{}\" db=\"{}\" mode={} nvrtc={}", address, db_path,
                 service.compile_only() ? "compile-only" : "gpu", ktune::NvrtcVersion());
  }
  std::fflush(nullptr);
  // Only now do Type=notify units (and what is ordered after them) start.
  if (absl::Status s = ktune::SdNotify("READY=1\nSTATUS=serving"); !s.ok()) {
    spdlog::warn("event=sd_notify_failed error=\"{}\"", std::string(s.message()));
  }

  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    // A token file that cannot be read now keeps the tokens in force: a
    // half-written rotation must not lock every caller out (or let them in).
    if (absl::Status s = read_tokens(); !s.ok()) {
      spdlog::error("event=tokens_reload_failed error=\"{}\" note=\"the previous tokens stay in force\"",
                    std::string(s.message()));
      continue;
    }
    service_options.auth.Reload(token, admin_token);  // shared with the service's copy
    spdlog::info("event=tokens_reloaded token={} admin_token={}", token.empty() ? "none" : "set",
                 admin_token.empty() ? "none" : "set");
  }
  spdlog::info("event=shutdown signal={} drain_seconds={}", signal_number, drain_s);
  (void)ktune::SdNotify("STOPPING=1");
  // New calls are refused from here on; those already accepted finish,
  // including TUNE_ON_MISS calls waiting on a tune still queued, since the
  // queue keeps running until the server has drained (or the grace period
  // has cancelled what is left). Only then are the tunes nobody waits for
  // (background ones) dropped.
  (*server)->Shutdown(drain_s);
  service.StopTuning();  // queued tunes are cancelled; a running one stops at its next candidate
  if (!service.FlushFleet(absl::Seconds(std::min(drain_s, 5.0)))) {
    spdlog::warn("event=fleet_publishes_unsent note=\"the fleet store did not take them before shutdown\"");
  }
  metrics_server.Stop();
  spdlog::info("event=stopped");
  return 0;
}
