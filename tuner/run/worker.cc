#include "tuner/run/worker.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"
#include "tuner/core/wire.h"

extern char** environ;

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxFrameBytes = 512u << 20;
constexpr int kWorkerFd = 3;
constexpr std::chrono::milliseconds kFaultSettle(1500);

// ---------------------------------------------------------------- framing

absl::Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::AbortedError(absl::StrCat("worker pipe closed: ", std::strerror(errno)));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFrame(int fd, const google::protobuf::Message& message) {
  const std::string body = message.SerializeAsString();
  const uint32_t n = static_cast<uint32_t>(body.size());
  const char header[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                          static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  if (absl::Status s = WriteAll(fd, header, 4); !s.ok()) return s;
  return WriteAll(fd, body.data(), body.size());
}

// Reads exactly `size` bytes by `deadline` (Clock::time_point::max() = none).
// DEADLINE_EXCEEDED on timeout, ABORTED on end of stream.
absl::Status ReadAll(int fd, char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    int wait_ms = -1;
    if (deadline != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return absl::DeadlineExceededError("timed out");
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    if (ready == 0) continue;  // re-checks the deadline
    const ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::AbortedError("end of stream");
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ReadFrame(int fd, google::protobuf::Message* message, Clock::time_point deadline) {
  unsigned char header[4];
  if (absl::Status s = ReadAll(fd, reinterpret_cast<char*>(header), 4, deadline); !s.ok()) return s;
  const uint32_t n = header[0] | (header[1] << 8) | (header[2] << 16) | (uint32_t{header[3]} << 24);
  if (n > kMaxFrameBytes) return absl::DataLossError(absl::StrCat("frame of ", n, " bytes"));
  std::string body(n, '\0');
  if (absl::Status s = ReadAll(fd, body.data(), n, deadline); !s.ok()) return s;
  if (!message->ParseFromString(body)) return absl::DataLossError("unparsable frame");
  return absl::OkStatus();
}

// ---------------------------------------------------------------- worker side

void MaybeInjectFault(const LaunchRecipe& recipe) {
  const char* fault = std::getenv("KTUNE_WORKER_FAULT");
  if (fault == nullptr) return;
  const std::string spec = fault;
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return;
  const std::string kind = spec.substr(0, colon), needle = spec.substr(colon + 1);
  for (const KernelLaunch& k : recipe.kernels) {
    if (!absl::StrContains(k.name_expression, needle)) continue;
    if (kind == "crash") std::abort();
    if (kind == "hang") {
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
}

// A test hook's integer, `fallback` when unset or not a number.
int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  int value = 0;
  return text != nullptr && absl::SimpleAtoi(text, &value) ? value : fallback;
}

// The GPU this worker was given (the daemon starts each with
// CUDA_VISIBLE_DEVICES=<one GPU>), for the fake device's kind per ordinal;
// 0 when unset or not a number (a UUID).
int VisibleOrdinal() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return 0;
  return EnvInt("CUDA_VISIBLE_DEVICES", 0);
}

// Under KTUNE_WORKER_FAKE_DEVICE_DELAY_MS, each run sleeps that long, so
// tests can tell one fake GPU from two by wall time (fake timings are 10-20
// us, far below the daemon's own costs).
void MaybeFakeDelay() {
  const int ms = EnvInt("KTUNE_WORKER_FAKE_DELAY_MS", 0);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 10000)));
}

void SetStatus(const absl::Status& s, v1::WorkerReply* reply) {
  reply->set_code(static_cast<int>(s.code()));
  reply->set_message(std::string(s.message()));
}

}  // namespace

DeviceInfo FakeWorkerDevice() {
  DeviceInfo d = CompileOnlyTarget();  // an sm_90 part with H100/H200 limits
  d.name = "ktune fake device (tests only)";
  // A second fake GPU kind, for tests of fleets with several kinds; a comma
  // list names one kind per ordinal (a node of mixed GPUs), the last item
  // standing for the ordinals past the list.
  if (const char* kind = std::getenv("KTUNE_WORKER_FAKE_DEVICE_NAME"); kind != nullptr && *kind != '\0') {
    const std::vector<std::string> kinds = absl::StrSplit(kind, ',');
    const size_t ordinal = static_cast<size_t>(std::max(0, VisibleOrdinal()));
    d.name = absl::StrCat(d.name, " ", kinds[std::min(ordinal, kinds.size() - 1)]);
  }
  d.memory_bytes = uint64_t{80} << 30;
  d.driver_version = 13000;
  return d;
}

int RunWorker(int fd, const WorkerRunners& runners) {
  std::unique_ptr<Device> device;
  std::unique_ptr<CandidateExecutor> executor;
  const bool fake = std::getenv("KTUNE_WORKER_FAKE_DEVICE") != nullptr;
  while (true) {
    v1::WorkerRequest request;
    absl::Status read = ReadFrame(fd, &request, Clock::time_point::max());
    if (!read.ok()) return absl::IsAborted(read) ? 0 : 2;  // the daemon closed the pipe: done
    v1::WorkerReply reply;
    reply.set_id(request.id());
    bool exit_after_reply = false;
    if (request.has_hello()) {
      if (!executor) {
        if (fake) {
          // No GPU: the caller's fake runners. Like the real executor it
          // refuses to run before Prepare, so a worker restarted without its
          // problem fails here as it would on a GPU.
          const DeviceInfo fake_device = FakeWorkerDevice();
          executor = NewRunnerExecutor(fake_device, runners.fake(fake_device));
        } else {
          absl::StatusOr<std::unique_ptr<Device>> opened = OpenCudaDevice(0);
          if (opened.ok()) {
            device = *std::move(opened);
            executor = NewRunnerExecutor(device->info(), runners.real(device.get()));
          } else {
            SetStatus(opened.status(), &reply);
          }
        }
      }
      if (executor) {
        int count = 1;
        if (fake) {
          count = std::clamp(EnvInt("KTUNE_WORKER_FAKE_DEVICE_COUNT", 1), 1, 64);
        } else if (absl::StatusOr<int> seen = CudaDeviceCount(); seen.ok()) {
          count = *seen;
        }
        reply.set_device_count(count);
        *reply.mutable_device() = DeviceToProto(executor->device());
        reply.set_l2_bytes(executor->device().l2_bytes);
        reply.set_max_smem_per_block_optin(executor->device().max_smem_per_block_optin);
      }
    } else if (!executor) {
      SetStatus(absl::FailedPreconditionError("worker: hello first"), &reply);
    } else if (request.has_prepare()) {
      SetStatus(executor->Prepare(request.prepare().problem()), &reply);
    } else if (request.has_library()) {
      absl::StatusOr<std::vector<LaunchRecipe>> recipes = executor->LibraryCandidates(request.library().max());
      if (recipes.ok()) {
        for (const LaunchRecipe& r : *recipes) *reply.add_recipes() = RecipeToProto(r, /*include_cubin=*/false);
      }
      SetStatus(recipes.status(), &reply);
    } else if (request.has_run()) {
      const v1::WorkerRun& run = request.run();
      const LaunchRecipe recipe = RecipeFromProto(run.recipe());
      MaybeInjectFault(recipe);
      if (fake) MaybeFakeDelay();
      absl::Status s = absl::OkStatus();
      if (run.verify()) {
        absl::StatusOr<VerifyResult> v = executor->Verify(recipe);
        if (v.ok()) {
          reply.set_verified(true);
          reply.set_verify_ok(v->ok);
          reply.set_verify_detail(v->detail);
          reply.set_max_error(v->max_error);
        } else {
          s = v.status();
        }
      }
      if (s.ok() && run.time() && (!run.verify() || reply.verify_ok())) {
        MeasureOptions options;
        if (run.warmup() > 0) options.warmup = run.warmup();
        if (run.repetitions() > 0) options.repetitions = run.repetitions();
        absl::StatusOr<Timing> t = executor->Time(recipe, options);
        if (t.ok()) {
          reply.set_timed(true);
          reply.set_median_us(t->median_us);
          reply.set_p10_us(t->p10_us);
          reply.set_p90_us(t->p90_us);
          reply.set_spread(t->spread);
          reply.set_repetitions(t->repetitions);
        } else {
          s = t.status();
        }
      }
      SetStatus(s, &reply);
      // A launch error leaves the CUDA context unusable: this process is done.
      exit_after_reply = !s.ok();
    }
    if (!WriteFrame(fd, reply).ok()) return 2;
    if (exit_after_reply) return 3;
  }
}

// ---------------------------------------------------------------- daemon side

absl::StatusOr<std::unique_ptr<WorkerExecutor>> WorkerExecutor::Start(const WorkerOptions& options) {
  std::unique_ptr<WorkerExecutor> executor(new WorkerExecutor(options));
  if (absl::Status s = executor->Spawn(); !s.ok()) return s;
  return executor;
}

WorkerExecutor::~WorkerExecutor() { Kill(); }

absl::Status WorkerExecutor::Spawn() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls until exec.
  std::vector<std::string> args = {options_.executable, "--worker-fd", std::to_string(kWorkerFd)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // extra_env replaces what the daemon's environment says of the same name
  // (getenv reads the first of two): a worker per GPU gets its own
  // CUDA_VISIBLE_DEVICES whatever the daemon's was.
  auto overridden = [this](const char* entry) {
    for (const std::string& e : options_.extra_env) {
      const size_t eq = e.find('=');
      if (eq != std::string::npos && std::strncmp(entry, e.data(), eq + 1) == 0) return true;
    }
    return false;
  };
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) env_strings.push_back(*e);
  }
  env_strings.insert(env_strings.end(), options_.extra_env.begin(), options_.extra_env.end());
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(sv[1], kWorkerFd);  // the copy does not inherit close-on-exec
    close_range(kWorkerFd + 1, ~0u, 0);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(sv[1]);
  pid_ = pid;
  fd_ = sv[0];
  prepared_ = false;

  v1::WorkerRequest hello;
  hello.mutable_hello();
  absl::StatusOr<v1::WorkerReply> reply = Call(hello, options_.start_timeout_s);
  if (!reply.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the GPU worker (", options_.executable, ") did not start: ", reply.status().message()));
  }
  if (reply->code() != 0) {
    Kill();
    return absl::FailedPreconditionError(reply->message());
  }
  device_ = DeviceFromProto(reply->device());
  device_.l2_bytes = reply->l2_bytes();
  device_.max_smem_per_block_optin = reply->max_smem_per_block_optin();
  device_count_ = std::max(1, reply->device_count());
  spdlog::info("event=worker_started pid={} device=\"{}\"", pid_.load(), device_.name);
  return absl::OkStatus();
}

void WorkerExecutor::Kill() {
  if (fd_ >= 0) close(fd_);  // a healthy worker exits on end of stream
  fd_ = -1;
  if (pid_ > 0) {
    int status = 0;
    // Give a healthy worker a moment to exit on its own, then make sure.
    for (int i = 0; i < 50 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (kill(pid_, 0) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  pid_ = -1;
}

absl::StatusOr<v1::WorkerReply> WorkerExecutor::Call(v1::WorkerRequest request, double timeout_s) {
  if (fd_ < 0) return absl::UnavailableError("the worker is not running");
  request.set_id(++next_id_);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  absl::Status s = WriteFrame(fd_, request);
  v1::WorkerReply reply;
  if (s.ok()) s = ReadFrame(fd_, &reply, deadline);
  if (s.ok() && reply.id() != request.id()) s = absl::DataLossError("reply out of order");
  if (s.ok()) return reply;

  // The worker is gone or stuck: say which, and make sure it is gone.
  const pid_t pid = pid_;
  if (absl::IsDeadlineExceeded(s)) {
    kill(pid, SIGKILL);
    Kill();
    return absl::DeadlineExceededError(
        absl::StrCat("no answer within ", timeout_s, " s (worker ", pid, " killed by the watchdog)"));
  }
  int status = 0;
  close(fd_);
  fd_ = -1;
  for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  std::string how = "exited";
  if (WIFSIGNALED(status)) {
    how = absl::StrCat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  } else if (WIFEXITED(status)) {
    how = absl::StrCat("exited with code ", WEXITSTATUS(status));
  }
  return absl::AbortedError(absl::StrCat("the worker ", how, ": ", s.message()));
}

absl::Status WorkerExecutor::Recover() {
  restarts_.fetch_add(1, std::memory_order_relaxed);
  // Spawn() forgets the problem (a new process has no buffers): remember
  // whether the old worker had one, and give it to the new worker.
  const bool was_prepared = prepared_;
  Kill();
  if (absl::Status s = Spawn(); !s.ok()) return s;
  if (!was_prepared) return absl::OkStatus();
  v1::WorkerRequest prepare;
  *prepare.mutable_prepare() = prepare_;
  absl::StatusOr<v1::WorkerReply> reply = Call(prepare, options_.prepare_timeout_s);
  if (!reply.ok()) return reply.status();
  if (reply->code() != 0) return absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message());
  prepared_ = true;
  return absl::OkStatus();
}

absl::Status WorkerExecutor::Prepare(const v1::Problem& problem) {
  if (fd_ < 0) {
    if (absl::Status s = Recover(); !s.ok()) return s;
  }
  *prepare_.mutable_problem() = problem;
  prepare_.set_seed(options_.seed);
  prepared_ = false;
  v1::WorkerRequest request;
  *request.mutable_prepare() = prepare_;
  absl::StatusOr<v1::WorkerReply> reply = Call(request, options_.prepare_timeout_s);
  if (!reply.ok()) return reply.status();
  if (reply->code() != 0) return absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message());
  prepared_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LaunchRecipe>> WorkerExecutor::LibraryCandidates(int max) {
  if (fd_ < 0) {
    if (absl::Status s = Recover(); !s.ok()) return s;
  }
  v1::WorkerRequest request;
  request.mutable_library()->set_max(max);
  absl::StatusOr<v1::WorkerReply> reply = Call(request, options_.prepare_timeout_s);
  if (!reply.ok()) return reply.status();
  if (reply->code() != 0) return absl::Status(static_cast<absl::StatusCode>(reply->code()), reply->message());
  std::vector<LaunchRecipe> out;
  for (const v1::LaunchRecipe& r : reply->recipes()) out.push_back(RecipeFromProto(r));
  return out;
}

absl::StatusOr<v1::WorkerReply> WorkerExecutor::RunOnce(const LaunchRecipe& recipe, bool verify, bool time,
                                                        const MeasureOptions& options, bool* faulted) {
  *faulted = false;
  if (fd_ < 0) {
    if (absl::Status s = Recover(); !s.ok()) return s;
  }
  v1::WorkerRequest request;
  v1::WorkerRun* run = request.mutable_run();
  *run->mutable_recipe() = RecipeToProto(recipe, /*include_cubin=*/true);
  run->set_verify(verify);
  run->set_time(time);
  run->set_warmup(options.warmup);
  run->set_repetitions(options.repetitions);
  // Timing runs warm-up plus every repetition: scale the watchdog with them.
  const double timeout = options_.candidate_timeout_s * (time ? std::max(1, options.repetitions / 30 + 1) : 1);
  absl::StatusOr<v1::WorkerReply> reply = Call(request, timeout);
  absl::Status failed = absl::OkStatus();
  if (!reply.ok()) {
    failed = reply.status();  // the worker died or hung
  } else if (reply->code() != 0) {
    // The worker exits after a launch error (its context is unusable).
    failed = absl::AbortedError(reply->message());
  }
  if (failed.ok()) return reply;
  *faulted = absl::IsAborted(failed);
  if (*faulted) {
    // The driver tears the faulted context down asynchronously; a context
    // created at once can still see the fault (seen on the H200: the next
    // candidate, a correct one, failed with CUDA_ERROR_ILLEGAL_ADDRESS).
    std::this_thread::sleep_for(kFaultSettle);
  }
  // The candidate took the worker down; bring it back for the next one.
  if (absl::Status r = Recover(); !r.ok()) {
    return absl::UnavailableError(absl::StrCat(failed.message(), "; restarting the worker failed: ", r.message()));
  }
  return failed;
}

absl::StatusOr<v1::WorkerReply> WorkerExecutor::Run(const LaunchRecipe& recipe, bool verify, bool time,
                                                    const MeasureOptions& options) {
  const bool after_fault = last_run_faulted_;
  bool faulted = false;
  absl::StatusOr<v1::WorkerReply> reply = RunOnce(recipe, verify, time, options, &faulted);
  if (faulted && after_fault) {
    // Right after another candidate's fault, a fault may not be this one's:
    // give the GPU time to settle and run it once more before blaming it.
    std::this_thread::sleep_for(kFaultSettle);
    reply = RunOnce(recipe, verify, time, options, &faulted);
  }
  last_run_faulted_ = faulted;
  return reply;
}

absl::StatusOr<VerifyResult> WorkerExecutor::Verify(const LaunchRecipe& recipe) {
  absl::StatusOr<v1::WorkerReply> reply = Run(recipe, /*verify=*/true, /*time=*/false, MeasureOptions());
  if (!reply.ok()) return reply.status();
  VerifyResult v;
  v.ok = reply->verify_ok();
  v.detail = reply->verify_detail();
  v.max_error = reply->max_error();
  return v;
}

absl::StatusOr<Timing> WorkerExecutor::Time(const LaunchRecipe& recipe, const MeasureOptions& options) {
  absl::StatusOr<v1::WorkerReply> reply = Run(recipe, /*verify=*/false, /*time=*/true, options);
  if (!reply.ok()) return reply.status();
  Timing t;
  t.median_us = reply->median_us();
  t.p10_us = reply->p10_us();
  t.p90_us = reply->p90_us();
  t.spread = reply->spread();
  t.repetitions = reply->repetitions();
  return t;
}

}  // namespace ktune
