// The GPU worker process: candidates run there, so that a kernel that faults
// (illegal address, misaligned access: the CUDA context is then unusable) or
// hangs takes down a process the daemon restarts, never the daemon.
//
// WorkerExecutor is the daemon's side: a CandidateExecutor that spawns the
// worker (the same ktuned binary, run with `--worker-fd N`), talks to it over
// a socketpair (proto/ktune/v1/worker.proto), and cuts every call at a
// watchdog deadline. After a crash or a hang it restarts the worker and
// prepares the current problem again, and reports that candidate ABORTED or
// DEADLINE_EXCEEDED, so the tune carries on with the next candidate.
//
// Test hooks, read by the worker from its environment (tests only):
//   KTUNE_WORKER_FAULT=crash:SUBSTR | hang:SUBSTR   a run whose kernel name
//       expression contains SUBSTR aborts the worker / never answers.
//   KTUNE_WORKER_FAKE_DEVICE=1   no GPU: verification passes and timings are
//       made up from the name expression (10-20 us; a GEMM over 10 us at 500
//       TFLOP/s takes up to twice that), so the process plumbing (restarts,
//       watchdog, queueing) can be exercised on machines without a GPU.
//   KTUNE_WORKER_FAKE_DEVICE_NAME=X   with the above: a fake GPU kind named X;
//       X,Y,...: one kind per ordinal (CUDA_VISIBLE_DEVICES), a mixed node.
//   KTUNE_WORKER_FAKE_DEVICE_COUNT=N  with the above: hello reports N GPUs
//       (default 1), so a daemon starts N workers, each a fake GPU.
//   KTUNE_WORKER_FAKE_DELAY_MS=D      with the above: every run sleeps D ms,
//       so the wall time of a tune is measurable (one GPU against two).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/run/executor.h"

namespace ktune {

// The device a worker reports under KTUNE_WORKER_FAKE_DEVICE=1 (tests only).
DeviceInfo FakeWorkerDevice();

// The runners a worker process makes, at its first hello: `real` over the GPU
// it opened, `fake` under KTUNE_WORKER_FAKE_DEVICE=1 (tests: no GPU, the
// device FakeWorkerDevice()). The worker itself knows no op: ktuned passes
// every op's (BuiltinWorkerRunners, tuner/problem_runners.h).
struct WorkerRunners {
  std::function<ProblemRunnerFactory(Device* device)> real;
  std::function<ProblemRunnerFactory(const DeviceInfo& fake_device)> fake;
};

// Serves worker requests on `fd` until the other end closes it. Returns the
// process exit code. Called by ktuned's main for `--worker-fd N`.
int RunWorker(int fd, const WorkerRunners& runners);

struct WorkerOptions {
  std::string executable;  // the ktuned binary
  // "NAME=value", added to the worker's environment, replacing the daemon's
  // value of NAME (e.g. CUDA_VISIBLE_DEVICES=3: a worker for GPU 3).
  std::vector<std::string> extra_env;
  double start_timeout_s = 120;     // spawn, open the device, answer hello
  double prepare_timeout_s = 120;   // allocate and fill one problem's buffers
  double candidate_timeout_s = 30;  // the watchdog for one verify or time call
  uint64_t seed = 1;
};

class WorkerExecutor final : public CandidateExecutor {
 public:
  // Spawns the worker and asks for its device. FAILED_PRECONDITION with the
  // worker's reason when it has no GPU (the daemon is then compile-only).
  static absl::StatusOr<std::unique_ptr<WorkerExecutor>> Start(const WorkerOptions& options);
  ~WorkerExecutor() override;

  const DeviceInfo& device() const override { return device_; }
  absl::Status Prepare(const v1::Problem& problem) override;
  absl::StatusOr<std::vector<LaunchRecipe>> LibraryCandidates(int max) override;
  absl::StatusOr<VerifyResult> Verify(const LaunchRecipe& recipe) override;
  absl::StatusOr<Timing> Time(const LaunchRecipe& recipe, const MeasureOptions& options) override;

  // How many GPUs the worker's driver saw when it last started (hello's
  // device_count; 1 from an older worker).
  int device_count() const { return device_count_; }
  // How many times the worker was restarted after a fault or hang. Like
  // pid(), safe to read from any thread while another runs candidates.
  int restarts() const override { return restarts_.load(std::memory_order_relaxed); }
  pid_t pid() const override { return pid_.load(std::memory_order_relaxed); }

 private:
  explicit WorkerExecutor(WorkerOptions options) : options_(std::move(options)) {}
  absl::Status Spawn();
  void Kill();
  // One request, one reply, within `timeout_s`. A dead worker is ABORTED, a
  // silent one DEADLINE_EXCEEDED (and killed); the worker is then down.
  absl::StatusOr<v1::WorkerReply> Call(v1::WorkerRequest request, double timeout_s);
  // One candidate run; a run that faults right after another candidate's
  // fault is retried once (the first fault can spill over, see RunOnce).
  absl::StatusOr<v1::WorkerReply> Run(const LaunchRecipe& recipe, bool verify, bool time,
                                      const MeasureOptions& options);
  // `faulted`: the worker went down with a fault (not a hang).
  absl::StatusOr<v1::WorkerReply> RunOnce(const LaunchRecipe& recipe, bool verify, bool time,
                                          const MeasureOptions& options, bool* faulted);
  // After a candidate took the worker down: restart it and prepare again.
  absl::Status Recover();

  const WorkerOptions options_;
  DeviceInfo device_;
  std::atomic<pid_t> pid_{-1};
  int device_count_ = 1;
  int fd_ = -1;
  uint64_t next_id_ = 0;
  std::atomic<int> restarts_{0};
  bool prepared_ = false;
  bool last_run_faulted_ = false;
  v1::WorkerPrepare prepare_;  // the prepared problem, for restarts
};

}  // namespace ktune
