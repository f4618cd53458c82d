// GetConfig under load, as many compiler frontends see it: N concurrent
// clients, each with its own channel (its own connection), calling back to
// back. For 1, 8 and 64 clients it measures three calls on the same kind of
// channel in one run:
//   empty      grpc.health.v1.Health/Check on the same daemon: the floor a
//              unary call cannot go below (gRPC, transport, scheduling)
//   hit        GetConfig of a stored entry (source TUNED)
//   heuristic  GetConfig of a miss, HEURISTIC_ON_MISS (compiled once, then
//              answered from the daemon's memo)
// Every call goes through the same generic client path (asynchronous calls
// on a completion queue per load thread, the request serialized once);
// GetConfig answers are parsed and checked, as a frontend would. Prints lookups/s, p50/p99/p99.9 latency, and
// the CPU each side spent per call (daemon from /proc, clients from rusage).
//
// By default it starts its own compile-only ktuned (temporary socket and
// database; the hit's entry imported as a bundle) pinned to --daemon-cpus,
// and pins itself to --client-cpus, so the load generator does not take the
// daemon's core.
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cache/bundle.h"
#include "client/client.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "ktune/v1/ktune.pb.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/compile/nvrtc_compiler.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/wire.h"
#include "tuner/norm/norm_space.h"

namespace {

using Clock = std::chrono::steady_clock;

enum class Call { kEmpty, kHit, kHeuristic };
const char* CallName(Call c) { return c == Call::kEmpty ? "empty" : c == Call::kHit ? "hit" : "heuristic"; }

grpc::ByteBuffer Serialize(const google::protobuf::Message& m) {
  grpc::ByteBuffer buffer;
  bool own = false;
  grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(m, &buffer, &own);
  return buffer;
}

ktune::v1::GetConfigRequest NormRequest(int64_t m, int64_t n, ktune::v1::Policy policy) {
  ktune::v1::GetConfigRequest request;
  *request.mutable_problem()->mutable_norm() = ktune::NormProblemToProto([&] {
    ktune::NormProblem p;
    p.m = m;
    p.n = n;
    return p;
  }());
  request.set_policy(policy);
  return request;
}

// The entry the hit asks for, as this build stores it on a compile-only daemon.
ktune::v1::Entry HitEntry(int64_t m, int64_t n) {
  ktune::NormProblem p;
  p.m = m;
  p.n = n;
  const ktune::DeviceInfo target = ktune::CompileOnlyTarget();
  const ktune::NormConfig config = ktune::HeuristicNormConfig(p, target);
  ktune::v1::Entry e;
  *e.mutable_problem()->mutable_norm() = ktune::NormProblemToProto(p);
  *e.mutable_device() = ktune::DeviceToProto(target);
  absl::StatusOr<const ktune::KernelSource*> source = ktune::FindKernelSource(ktune::NormTemplateId(p));
  if (!source.ok()) {
    std::fprintf(stderr, "load_bench: %s\n", source.status().ToString().c_str());
    std::exit(1);
  }
  *e.mutable_software() = ktune::SoftwareToProto({(*source)->hash, ktune::NvrtcVersion(), ktune::kSchemaVersion});
  *e.mutable_config()->mutable_norm() = ktune::NormConfigToProto(config);
  absl::StatusOr<ktune::LaunchRecipe> recipe = ktune::NormLaunchRecipe(p, config, target);
  if (!recipe.ok()) {
    std::fprintf(stderr, "load_bench: %s\n", recipe.status().ToString().c_str());
    std::exit(1);
  }
  *e.mutable_recipe() = ktune::RecipeToProto(*recipe, false);
  ktune::v1::Measurement* meas = e.mutable_measurement();
  meas->set_time_us(20);
  meas->set_spread(0.01);
  meas->set_repetitions(30);
  meas->set_throughput(3);
  meas->set_throughput_unit("TB/s");
  e.set_tuned_at_unix(1764400000);
  e.set_candidates_measured(1);
  e.set_ktune_version(KTUNE_VERSION);
  return e;
}

bool PinTo(const std::string& cpus) {
  if (cpus.empty()) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (absl::string_view part : absl::StrSplit(cpus, ',')) {
    int cpu = 0;
    if (!absl::SimpleAtoi(part, &cpu)) return false;
    CPU_SET(cpu, &set);
  }
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

// CPU seconds (user + system) a process has used, from /proc/PID/stat.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::atof(field.c_str());  // utime, stime
  }
  return ticks / sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

// One client: its own channel (a local subchannel pool, so no two clients
// share a connection) and at most one call in flight. Clients are driven
// asynchronously from a few load threads (one completion queue each), so 64
// clients do not need 64 threads contending for the load generator's core.
class LoadClient {
 public:
  explicit LoadClient(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  // Starts a call; its completion arrives on `cq` with this client as tag.
  void Start(Call call, const grpc::ByteBuffer& request, grpc::CompletionQueue* cq) {
    static const std::string kHealth = "/grpc.health.v1.Health/Check";
    static const std::string kGetConfig = "/ktune.v1.KtuneService/GetConfig";
    call_ = call;
    context_ = std::make_unique<grpc::ClientContext>();
    response_.Clear();
    started_ = Clock::now();
    rpc_ = stub_->PrepareUnaryCall(context_.get(), call == Call::kEmpty ? kHealth : kGetConfig, request, cq);
    rpc_->StartCall();
    rpc_->Finish(&response_, &status_, this);
  }

  // After the completion: false (and `error` set) unless the call succeeded
  // as it should; `latency_us` is its round trip.
  bool Check(bool ok, float* latency_us, std::string* error) {
    *latency_us = std::chrono::duration<float, std::micro>(Clock::now() - started_).count();
    if (!ok || !status_.ok()) {
      *error = status_.ok() ? "completion queue failed" : status_.error_message();
      return false;
    }
    if (call_ == Call::kEmpty) return true;
    ktune::v1::GetConfigResponse answer;
    if (!grpc::GenericDeserialize<grpc::ProtoBufferReader, ktune::v1::GetConfigResponse>(&response_, &answer).ok()) {
      *error = "undecodable GetConfigResponse";
      return false;
    }
    const ktune::v1::Source want = call_ == Call::kHit ? ktune::v1::TUNED : ktune::v1::HEURISTIC;
    if (answer.source() != want || answer.recipe().kernels_size() == 0) {
      *error = "unexpected answer source " + ktune::v1::Source_Name(answer.source());
      return false;
    }
    return true;
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
  Call call_ = Call::kEmpty;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> rpc_;
  grpc::ByteBuffer response_;
  grpc::Status status_;
  Clock::time_point started_;
};

struct RunResult {
  double calls_per_s = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double daemon_cpu_us = 0, client_cpu_us = 0;  // per call
  double daemon_kinstructions = 0;              // per call, with --perf
};

// `perf stat` counting the daemon's instructions (user and kernel) until
// Stop(): a per-call cost that other load on the machine does not distort.
class InstructionCounter {
 public:
  InstructionCounter(pid_t daemon, const std::string& out) : out_(out) {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string target = std::to_string(daemon);
      execlp("perf", "perf", "stat", "-x,", "-e", "instructions", "-p", target.c_str(), "-o", out.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // attached
  }
  // The instructions counted, 0 if perf failed.
  double Stop() {
    kill(pid_, SIGINT);
    int status = 0;
    waitpid(pid_, &status, 0);
    std::ifstream in(out_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("instructions") == std::string::npos) continue;
      return std::atof(line.substr(0, line.find(',')).c_str());
    }
    return 0;
  }

 private:
  std::string out_;
  pid_t pid_ = -1;
};

RunResult Run(std::vector<std::unique_ptr<LoadClient>>& clients, int load_threads, Call call,
              const grpc::ByteBuffer& request, double warmup_s, double seconds, pid_t daemon_pid,
              const std::string& perf_out) {
  const int n = static_cast<int>(clients.size());
  const int t_count = std::max(1, std::min(load_threads, n));
  std::atomic<int> phase{0};  // 0 warm-up, 1 measure, 2 stop
  std::vector<std::vector<float>> latencies(t_count);
  std::atomic<bool> failed{false};
  std::atomic<int64_t> completed{0};  // every call, for the instruction count's window
  std::vector<std::thread> threads;
  for (int t = 0; t < t_count; ++t) {
    latencies[t].reserve(400000);
    threads.emplace_back([&, t] {
      grpc::CompletionQueue cq;
      int in_flight = 0;
      for (int i = t; i < n; i += t_count, ++in_flight) clients[i]->Start(call, request, &cq);
      std::string error;
      void* tag = nullptr;
      bool ok = false;
      while (in_flight > 0 && cq.Next(&tag, &ok)) {
        auto* client = static_cast<LoadClient*>(tag);
        float us = 0;
        if (!client->Check(ok, &us, &error)) {
          if (!failed.exchange(true))
            std::fprintf(stderr, "load_bench: %s call failed: %s\n", CallName(call), error.c_str());
          phase = 2;
        }
        completed.fetch_add(1, std::memory_order_relaxed);
        const int now = phase.load(std::memory_order_relaxed);
        if (now == 1) latencies[t].push_back(us);
        if (now == 2) {
          --in_flight;  // this client is done
          continue;
        }
        client->Start(call, request, &cq);
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));
  std::unique_ptr<InstructionCounter> counter;
  if (!perf_out.empty() && daemon_pid > 0) counter = std::make_unique<InstructionCounter>(daemon_pid, perf_out);
  const int64_t counted0 = completed.load();
  const double daemon_cpu0 = daemon_pid > 0 ? ProcessCpuSeconds(daemon_pid) : 0, client_cpu0 = SelfCpuSeconds();
  const auto t0 = Clock::now();
  phase = 1;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const int64_t counted = completed.load() - counted0;
  const double instructions = counter ? counter->Stop() : 0;
  phase = 2;
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const double daemon_cpu = daemon_pid > 0 ? ProcessCpuSeconds(daemon_pid) - daemon_cpu0 : 0;
  const double client_cpu = SelfCpuSeconds() - client_cpu0;
  for (auto& t : threads) t.join();
  if (failed) std::exit(1);
  std::vector<float> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  RunResult r;
  if (all.empty()) return r;
  auto pct = [&](double q) { return static_cast<double>(all[static_cast<size_t>(q * (all.size() - 1))]); };
  r.calls_per_s = all.size() / elapsed;
  r.p50_us = pct(0.5);
  r.p99_us = pct(0.99);
  r.p999_us = pct(0.999);
  r.daemon_cpu_us = daemon_cpu / all.size() * 1e6;
  r.client_cpu_us = client_cpu / all.size() * 1e6;
  if (counted > 0) r.daemon_kinstructions = instructions / counted / 1000;
  return r;
}

pid_t StartDaemon(const std::string& ktuned, const std::string& dir, const std::string& cpus, const std::string& wrap) {
  std::vector<std::string> args;
  for (absl::string_view word : absl::StrSplit(wrap, ' ', absl::SkipEmpty())) args.emplace_back(word);
  const std::vector<std::string> own = {ktuned,           "--listen",        "unix:" + dir + "/ktuned.sock",
                                        "--db",           dir + "/cache.db", "--kernel-cache-dir",
                                        dir + "/kernels", "--log-level",     "warn"};
  args.insert(args.end(), own.begin(), own.end());
  const pid_t pid = fork();
  if (pid == 0) {
    if (!PinTo(cpus)) _exit(126);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (freopen((dir + "/ktuned.log").c_str(), "a", stderr) == nullptr) _exit(125);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    if (std::filesystem::exists(dir + "/ktuned.sock") &&
        ktune::Client::Create("unix:" + dir + "/ktuned.sock", 2)->GetStatus().ok()) {
      return pid;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::fprintf(stderr, "load_bench: ktuned did not start (see %s/ktuned.log)\n", dir.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  // As in ktuned: abseil's deadlock detection would put a process-wide lock
  // in every gRPC mutex of the load generator.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"ktune_load_bench: GetConfig lookups/s and latency under 1, 8 and 64 concurrent clients"};
  std::string server;
  std::string ktuned =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "daemon" / "ktuned").string();
  std::string daemon_cpus = "0", client_cpus = "1";
  std::vector<int> client_counts = {1, 8, 64};
  double seconds = 3, warmup = 0.5;
  int64_t m = 4096, n = 4096;
  std::vector<std::string> only = {"empty", "hit", "heuristic"};
  bool perf = false;
  std::string wrap;
  int load_threads = 1;
  int rounds = 1;
  app.add_option("--server", server, "an already running ktuned holding the hit's entry (default: start one)");
  app.add_option("--ktuned", ktuned, "the ktuned to start")->capture_default_str();
  app.add_option("--daemon-cpus", daemon_cpus, "CPUs the started ktuned is pinned to (\"\" = any)")
      ->capture_default_str();
  app.add_option("--client-cpus", client_cpus, "CPUs the load generator is pinned to (\"\" = any)")
      ->capture_default_str();
  app.add_option("--clients", client_counts, "concurrent clients, one run each")->capture_default_str();
  app.add_option("--seconds", seconds, "measured seconds per run")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "unmeasured seconds before each run")->capture_default_str();
  app.add_option("--calls", only, "which calls to run: empty, hit, heuristic")->capture_default_str();
  app.add_option("--load-threads", load_threads, "threads driving the clients (asynchronously)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--rounds", rounds,
                 "rounds of the calls, alternated (empty, hit, heuristic, then again); each row is the median "
                 "over rounds, and 'vs empty' the median of the ratios within a round, with their range")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--wrap", wrap, "a command the started ktuned runs under, e.g. \"valgrind --tool=callgrind\"");
  app.add_flag("--perf", perf, "also count the daemon's instructions per call (perf stat)");
  app.add_option("--m", m, "rows of the RMSNorm the hit asks for")->capture_default_str();
  app.add_option("--n", n, "width of the RMSNorm")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string dir;
  pid_t daemon_pid = -1;
  if (server.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "ktune-load-XXXXXX").string();
    dir = mkdtemp(pattern.data());
    daemon_pid = StartDaemon(ktuned, dir, daemon_cpus, wrap);
    server = "unix:" + dir + "/ktuned.sock";
    absl::StatusOr<ktune::v1::ImportBundleResponse> imported =
        ktune::Client::Create(server, 30)
            ->ImportBundle(ktune::EncodeBundle({HitEntry(m, n)}, "load_bench", 1764400000));
    if (!imported.ok() || imported->added() != 1) {
      std::fprintf(stderr, "load_bench: importing the hit's entry failed: %s\n",
                   imported.ok() ? "not added" : imported.status().ToString().c_str());
      return 1;
    }
  }
  if (!PinTo(client_cpus)) {
    std::fprintf(stderr, "load_bench: cannot pin to CPUs %s\n", client_cpus.c_str());
    return 1;
  }
  const grpc::ByteBuffer empty_request = Serialize(ktune::v1::GetStatusRequest());  // = an empty HealthCheckRequest
  const grpc::ByteBuffer hit_request = Serialize(NormRequest(m, n, ktune::v1::CACHED_ONLY));
  // A width with no stored entry, so every call is a miss.
  const grpc::ByteBuffer heuristic_request = Serialize(NormRequest(m, n / 2, ktune::v1::HEURISTIC_ON_MISS));

  std::printf(
      "ktune_load_bench: %s, daemon CPUs %s, load generator CPUs %s (%d load thread%s), %.1f s per run, "
      "%d round%s\n",
      server.c_str(), daemon_pid > 0 ? (daemon_cpus.empty() ? "any" : daemon_cpus.c_str()) : "(not started here)",
      client_cpus.empty() ? "any" : client_cpus.c_str(), load_threads, load_threads == 1 ? "" : "s", seconds, rounds,
      rounds == 1 ? "" : "s");
  std::printf("%-10s %8s %12s %9s %9s %9s %12s %12s %9s%s\n", "call", "clients", "calls/s", "p50 us", "p99 us",
              "p99.9 us", "daemon us/c", "client us/c", "vs empty", perf ? "  daemon kinstr/c" : "");
  const std::string perf_out = perf ? (std::filesystem::temp_directory_path() / "ktune-load-perf.txt").string() : "";
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  for (int count : client_counts) {
    std::vector<std::unique_ptr<LoadClient>> clients;
    for (int i = 0; i < count; ++i) clients.push_back(std::make_unique<LoadClient>(server));
    std::vector<Call> calls;
    for (Call call : {Call::kEmpty, Call::kHit, Call::kHeuristic}) {
      if (std::find(only.begin(), only.end(), CallName(call)) != only.end()) calls.push_back(call);
    }
    // results[c][round]: the calls alternate within a round, so a drift of
    // the machine over the run moves all of them alike.
    std::vector<std::vector<RunResult>> results(calls.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t c = 0; c < calls.size(); ++c) {
        const grpc::ByteBuffer& request = calls[c] == Call::kEmpty ? empty_request
                                          : calls[c] == Call::kHit ? hit_request
                                                                   : heuristic_request;
        results[c].push_back(Run(clients, load_threads, calls[c], request, warmup, seconds, daemon_pid, perf_out));
      }
    }
    const bool have_empty = !calls.empty() && calls[0] == Call::kEmpty;
    for (size_t c = 0; c < calls.size(); ++c) {
      auto stat = [&](double RunResult::*field) {
        std::vector<double> v;
        for (const RunResult& r : results[c]) v.push_back(r.*field);
        return median(v);
      };
      std::vector<double> ratios;
      for (int round = 0; round < rounds && have_empty; ++round) {
        const double empty_rate = results[0][round].calls_per_s;
        ratios.push_back(empty_rate > 0 ? results[c][round].calls_per_s / empty_rate : 0);
      }
      std::printf("%-10s %8d %12.0f %9.0f %9.0f %9.0f %12.1f %12.1f %9.2f", CallName(calls[c]), count,
                  stat(&RunResult::calls_per_s), stat(&RunResult::p50_us), stat(&RunResult::p99_us),
                  stat(&RunResult::p999_us), stat(&RunResult::daemon_cpu_us), stat(&RunResult::client_cpu_us),
                  median(ratios));
      if (rounds > 1 && !ratios.empty()) {
        std::printf("  [%.2f-%.2f]", *std::min_element(ratios.begin(), ratios.end()),
                    *std::max_element(ratios.begin(), ratios.end()));
      }
      const double kinstructions = stat(&RunResult::daemon_kinstructions);
      if (perf && kinstructions > 0) std::printf("  %16.1f", kinstructions);
      if (perf && kinstructions == 0) std::printf("  %16s", "n/a");  // no hardware counters
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (daemon_pid > 0) {
    kill(daemon_pid, SIGTERM);
    int status = 0;
    waitpid(daemon_pid, &status, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return 0;
}
