// The GPUs of a node: which ones ktuned serves (--gpus), and a worker
// process per GPU (tuner/run/worker.h), each started with
// CUDA_VISIBLE_DEVICES naming its one GPU, so a fault on one restarts only
// that worker. The daemon never opens CUDA itself: a first worker, started
// as the daemon's environment is, reports how many GPUs the driver sees
// (its hello's device_count).
//
// One ktuned serves every GPU it selects, of whatever kinds: answers are a
// function of (problem, store, device), so they are kept per GPU kind
// (daemon/device_kinds.h) and a request names its kind (the first GPU's by
// default).
//
// Thread-compatible: called once, at start.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/run/executor.h"
#include "tuner/run/worker.h"

namespace ktune {

// --gpus: "all" (the default), a count N (the first N GPUs), or a comma list
// of ordinals ("0,2,5", or "3," for GPU 3 alone; as the driver numbers them
// under the daemon's own CUDA_VISIBLE_DEVICES).
struct GpuSelection {
  bool all = true;
  int count = 0;              // when not all and ordinals is empty
  std::vector<int> ordinals;  // when not all, ascending as given
};

// The flag's syntax alone (no GPU is asked): INVALID_ARGUMENT naming the
// flag, the text and what is expected.
absl::StatusOr<GpuSelection> ParseGpuFlag(const std::string& text);
// The ordinals `selection` names on a node with `device_count` GPUs, in
// ascending order; INVALID_ARGUMENT when it names a GPU the node lacks.
absl::StatusOr<std::vector<int>> SelectGpus(const GpuSelection& selection, int device_count);
// What CUDA_VISIBLE_DEVICES a worker for `ordinal` gets: the ordinal, or, when
// the daemon runs under CUDA_VISIBLE_DEVICES=`daemon_visible` (null or ""
// when unset), that list's item for it.
std::string VisibleDeviceFor(int ordinal, const char* daemon_visible);

// One GPU of the node and the executor running its candidates.
struct GpuExecutor {
  int ordinal = 0;
  std::unique_ptr<CandidateExecutor> executor;
};

// One GPU as status shows it.
struct GpuState {
  int ordinal = 0;
  DeviceInfo device;
  std::string tuning;  // the problem key of the job it runs, "" when idle
  pid_t worker_pid = 0;
  int worker_restarts = 0;
};

struct NodeGpus {
  std::vector<GpuExecutor> gpus;    // ascending ordinals, of any kinds
  std::string compile_only_reason;  // why there are none
};

// Starts the first worker to learn the GPU count, then one worker per GPU of
// `selection` (at once). No GPU or no driver is
// not an error: `gpus` is empty and `compile_only_reason` says why.
// INVALID_ARGUMENT when `selection` names GPUs the node lacks.
absl::StatusOr<NodeGpus> StartGpuWorkers(const WorkerOptions& options, const GpuSelection& selection);

}  // namespace ktune
