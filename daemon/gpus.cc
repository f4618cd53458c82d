#include "daemon/gpus.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"
#include "tuner/core/fingerprint.h"
#include "tuner/core/safe_text.h"

namespace ktune {
namespace {

constexpr int kMaxGpus = 64;

absl::Status BadFlag(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--gpus ", SafeText(text), ": ", why));
}

}  // namespace

absl::StatusOr<GpuSelection> ParseGpuFlag(const std::string& text) {
  GpuSelection selection;
  if (text == "all") return selection;
  selection.all = false;
  if (text.empty()) return BadFlag(text, "expected all, a count (4) or GPU ordinals (0,2,5)");
  if (text.find(',') == std::string::npos) {
    int count = 0;
    if (!absl::SimpleAtoi(text, &count)) {
      return BadFlag(text, "expected all, a count (4) or GPU ordinals (0,2,5)");
    }
    if (count < 1 || count > kMaxGpus) {
      return BadFlag(text, absl::StrCat("a count of GPUs is 1 to ", kMaxGpus,
                                        " (leave --gpus out for all; to serve no GPU, run compile-only "
                                        "with CUDA_VISIBLE_DEVICES=\"\")"));
    }
    selection.count = count;
    return selection;
  }
  std::set<int> seen;
  // "3," is a list of one ordinal (a lone number is a count).
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(item, &ordinal) || ordinal < 0 || ordinal >= kMaxGpus) {
      return BadFlag(
          text, absl::StrCat("'", SafeText(std::string(item)), "' is not a GPU ordinal (0 to ", kMaxGpus - 1, ")"));
    }
    if (!seen.insert(ordinal).second) return BadFlag(text, absl::StrCat("GPU ", ordinal, " is named twice"));
  }
  if (seen.empty()) return BadFlag(text, "expected all, a count (4) or GPU ordinals (0,2,5)");
  selection.ordinals.assign(seen.begin(), seen.end());
  return selection;
}

absl::StatusOr<std::vector<int>> SelectGpus(const GpuSelection& selection, int device_count) {
  std::vector<int> out;
  if (selection.all) {
    for (int i = 0; i < device_count; ++i) out.push_back(i);
    return out;
  }
  if (selection.ordinals.empty()) {
    if (selection.count > device_count) {
      return absl::InvalidArgumentError(absl::StrCat("--gpus ", selection.count, ": this node has ", device_count,
                                                     " GPU(s) (ordinals 0 to ", device_count - 1, ")"));
    }
    for (int i = 0; i < selection.count; ++i) out.push_back(i);
    return out;
  }
  for (int ordinal : selection.ordinals) {
    if (ordinal >= device_count) {
      return absl::InvalidArgumentError(absl::StrCat("--gpus ", absl::StrJoin(selection.ordinals, ","), ": no GPU ",
                                                     ordinal, " on this node, which has ", device_count,
                                                     " GPU(s) (ordinals 0 to ", device_count - 1, ")"));
    }
  }
  return selection.ordinals;
}

std::string VisibleDeviceFor(int ordinal, const char* daemon_visible) {
  if (daemon_visible == nullptr || *daemon_visible == '\0') return absl::StrCat(ordinal);
  const std::vector<std::string> items = absl::StrSplit(daemon_visible, ',');
  if (ordinal < static_cast<int>(items.size())) return items[static_cast<size_t>(ordinal)];
  return absl::StrCat(ordinal);  // the driver saw more than the list: unreachable in practice
}

absl::StatusOr<NodeGpus> StartGpuWorkers(const WorkerOptions& options, const GpuSelection& selection) {
  NodeGpus node;
  int device_count = 0;
  {
    // The first worker sees what the daemon would: how many GPUs there are.
    absl::StatusOr<std::unique_ptr<WorkerExecutor>> probe = WorkerExecutor::Start(options);
    if (!probe.ok()) {
      node.compile_only_reason = std::string(probe.status().message());
      // Compile-only is no start failure (DESIGN.md), whatever --gpus asked for.
      if (!selection.all) spdlog::warn("event=gpus_ignored note=\"--gpus names GPUs, but no worker starts here\"");
      return node;
    }
    device_count = (*probe)->device_count();
  }  // its GPU context is released before the workers open theirs
  absl::StatusOr<std::vector<int>> ordinals = SelectGpus(selection, device_count);
  if (!ordinals.ok()) return ordinals.status();

  const char* daemon_visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::vector<absl::StatusOr<std::unique_ptr<WorkerExecutor>>> started;
  for (size_t i = 0; i < ordinals->size(); ++i) started.emplace_back(absl::UnknownError("not started"));
  std::vector<std::thread> threads;  // each start opens a CUDA context: seconds on a GPU
  for (size_t i = 0; i < ordinals->size(); ++i) {
    threads.emplace_back([&, i] {
      WorkerOptions gpu = options;
      gpu.extra_env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", VisibleDeviceFor((*ordinals)[i], daemon_visible)));
      started[i] = WorkerExecutor::Start(gpu);
    });
  }
  for (std::thread& t : threads) t.join();

  for (size_t i = 0; i < started.size(); ++i) {
    const int ordinal = (*ordinals)[i];
    if (!started[i].ok()) {
      spdlog::error("event=gpu_worker_failed gpu={} error=\"{}\" note=\"this GPU is not used\"", ordinal,
                    SafeText(started[i].status().message()));
      if (node.compile_only_reason.empty()) {
        node.compile_only_reason = absl::StrCat("GPU ", ordinal, ": ", started[i].status().message());
      }
      continue;
    }
    node.gpus.push_back({ordinal, *std::move(started[i])});
  }
  if (!node.gpus.empty()) node.compile_only_reason.clear();
  return node;
}

}  // namespace ktune
