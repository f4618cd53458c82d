// A real ktuned child process on a private Unix socket and database, for
// integration tests. Start() waits until it answers GetStatus; Stop() sends
// SIGTERM and returns its exit status (0 expected: a clean drain).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "tuner/core/wire.h"

namespace ktune::testing {

// A fresh directory under /tmp, removed with everything in it at destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ktune-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick).
inline int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// The ktuned binary: $KTUNED if set, else the build's, else the one beside
// this test binary (the packed layout used on the GPU machine).
inline std::string KtunedPath() {
  if (const char* env = std::getenv("KTUNED"); env != nullptr && *env != '\0') return env;
  if (std::filesystem::exists(KTUNED_PATH)) return KTUNED_PATH;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "ktuned").string();
}

class DaemonProcess {
 public:
  DaemonProcess(std::string dir, std::string db_path) : dir_(std::move(dir)), db_path_(std::move(db_path)) {}
  ~DaemonProcess() {
    if (pid_ > 0) Stop();
  }

  std::string socket_path() const { return dir_ + "/ktuned.sock"; }
  std::string address() const { return "unix:" + socket_path(); }
  std::string log_path() const { return dir_ + "/ktuned.log"; }
  const std::string& db_path() const { return db_path_; }
  pid_t pid() const { return pid_; }

  // Starts ktuned; true once it answers GetStatus (within 20 s).
  // `extra_flags` are appended to ktuned's command line; `env` ("NAME=value")
  // is added to its environment (and so its worker's).
  bool Start(const std::vector<std::string>& extra_flags = {}, const std::vector<std::string>& env = {}) {
    std::vector<std::string> args = {KtunedPath(), "--listen",           address(),        "--db",
                                     db_path_,     "--kernel-cache-dir", dir_ + "/kernels"};
    // Defaults a test may override in `extra_flags` (ktuned takes a flag once).
    for (auto [flag, value] : {std::pair{"--log-level", "debug"}, std::pair{"--drain-seconds", "1"}}) {
      if (std::find(extra_flags.begin(), extra_flags.end(), flag) == extra_flags.end()) {
        args.insert(args.end(), {flag, value});
      }
    }
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = log_path();
      FILE* out = std::freopen(log.c_str(), "a", stderr);
      (void)out;
      dup2(fileno(stderr), STDOUT_FILENO);
      for (const std::string& e : env) putenv(strdup(e.c_str()));
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      // A fresh channel per attempt: a channel that failed to connect backs
      // off for seconds before it tries again.
      if (std::filesystem::exists(socket_path()) && Client::Create(address(), 2)->GetStatus().ok()) {
        return true;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // SIGTERM, then waits; returns the exit code (-1 if it died of a signal).
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // SIGKILL, as a crash or the OOM killer would: nothing is flushed or closed.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  std::string Log() const {
    std::ifstream in(log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::unique_ptr<Client> NewClient() const { return Client::Create(address(), 60); }

 private:
  std::string dir_;
  std::string db_path_;
  pid_t pid_ = -1;
};

// The environment that gives ktuned's worker the fake device (tuner/run/worker.h).
inline constexpr char kFakeDeviceEnv[] = "KTUNE_WORKER_FAKE_DEVICE=1";

// A bf16 RMSNorm forward problem of m rows of width n.
inline v1::Problem RmsProblem(int64_t m, int64_t n) {
  NormProblem p;
  p.m = m;
  p.n = n;
  v1::Problem out;
  *out.mutable_norm() = NormProblemToProto(p);
  return out;
}

// `callers` threads, each with its own client, send `request` at once; their
// answers in thread order (single-flight tests).
inline std::vector<absl::StatusOr<v1::GetConfigResponse>> ConcurrentGetConfig(const DaemonProcess& daemon,
                                                                              const v1::GetConfigRequest& request,
                                                                              int callers) {
  std::vector<absl::StatusOr<v1::GetConfigResponse>> answers(callers, absl::UnknownError("unset"));
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i) {
    threads.emplace_back([&, i] { answers[i] = daemon.NewClient()->GetConfig(request); });
  }
  for (auto& t : threads) t.join();
  return answers;
}

// Runs a command through the shell; returns its exit code and stdout/stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline CommandResult RunCommand(const std::string& command, const std::string& scratch_dir) {
  const std::string out_path = scratch_dir + "/cmd.out", err_path = scratch_dir + "/cmd.err";
  const int raw = std::system((command + " >" + out_path + " 2>" + err_path).c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

}  // namespace ktune::testing
