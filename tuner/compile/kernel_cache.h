// Compiled kernels on disk: re-tuning a shape, or answering a stored entry
// with its cubin after a restart, compiles nothing.
//
// A cubin is keyed by everything that determines it: the template text hash,
// the NVRTC options, the NVRTC version, the architecture and the instantiated
// name expressions (KeyOf). One file per key under `dir`, written atomically
// (temporary file + rename), holding the compiled LaunchRecipe (cubin and
// lowered names). The cache is bounded in bytes; when a Store goes over the
// bound the least recently used files (by modification time, refreshed on
// every hit) are removed. A file that does not parse or does not match the
// recipe it is looked up for is removed and counted as a miss.
// Thread-safe; several processes may share a directory (each keeps its own
// view of the total size, so the bound is approximate across processes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

class KernelCache {
 public:
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t stores = 0;
    int64_t evictions = 0;
    int64_t files = 0;
    uint64_t bytes = 0;
  };

  // Creates `dir` if needed and measures what it holds. INVALID_ARGUMENT for
  // a zero bound, FAILED_PRECONDITION if the directory cannot be used.
  static absl::StatusOr<std::unique_ptr<KernelCache>> Open(const std::string& dir, uint64_t max_bytes);

  // Hex SHA-256 over the fields that determine the cubin.
  static std::string KeyOf(const LaunchRecipe& recipe, int nvrtc_version);

  // On a hit fills recipe->cubin and every kernel's lowered_name; true if so.
  bool Lookup(LaunchRecipe* recipe, int nvrtc_version);
  // Keeps a compiled recipe (cubin and lowered names set). Errors are logged,
  // never returned: the cache only ever saves work.
  void Store(const LaunchRecipe& recipe, int nvrtc_version);

  Stats stats();
  const std::string& dir() const { return dir_; }

 private:
  KernelCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string PathOf(const std::string& key) const;
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const uint64_t max_bytes_;
  absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// $XDG_CACHE_HOME/ktune/kernels, else $HOME/.cache/ktune/kernels.
std::string DefaultKernelCacheDir();

}  // namespace ktune
