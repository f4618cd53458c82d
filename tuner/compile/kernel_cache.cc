#include "tuner/compile/kernel_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ktune/v1/ktune.pb.h"
#include "spdlog/spdlog.h"
#include "tuner/compile/kernel_source.h"
#include "tuner/core/sha256.h"
#include "tuner/core/wire.h"

namespace ktune {
namespace fs = std::filesystem;

namespace {
constexpr char kSuffix[] = ".kcubin";
}  // namespace

std::string DefaultKernelCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return absl::StrCat(xdg, "/ktune/kernels");
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return absl::StrCat(home, "/.cache/ktune/kernels");
  return absl::StrCat("/tmp/ktune-", getuid(), "/kernels");
}

absl::StatusOr<std::unique_ptr<KernelCache>> KernelCache::Open(const std::string& dir, uint64_t max_bytes) {
  if (max_bytes == 0) return absl::InvalidArgumentError("kernel cache: the size bound must be > 0");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel cache: cannot create directory ", dir, ": ", ec.message()));
  }
  std::unique_ptr<KernelCache> cache(new KernelCache(dir, max_bytes));
  absl::MutexLock lock(&cache->mu_);
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == kSuffix) {
      cache->stats_.files += 1;
      cache->stats_.bytes += entry.file_size(ec);
    }
  }
  cache->EvictLocked();
  return cache;
}

std::string KernelCache::KeyOf(const LaunchRecipe& r, int nvrtc_version) {
  std::string material = absl::StrCat("ktune-kernel-cache-v1\n", r.template_id, "\n", r.template_hash, "\n", r.arch,
                                      "\n", nvrtc_version, "\n", absl::StrJoin(r.nvrtc_options, "\x1f"), "\n");
  for (const KernelLaunch& k : r.kernels) absl::StrAppend(&material, k.name_expression, "\n");
  return Sha256Hex(material);
}

std::string KernelCache::PathOf(const std::string& key) const {
  return absl::StrCat(dir_, "/", key.substr(0, 2), "/", key, kSuffix);
}

bool KernelCache::Lookup(LaunchRecipe* recipe, int nvrtc_version) {
  const std::string path = PathOf(KeyOf(*recipe, nvrtc_version));
  std::ifstream in(path, std::ios::binary);
  v1::LaunchRecipe stored;
  bool ok = false;
  if (in) {
    std::stringstream ss;
    ss << in.rdbuf();
    ok = stored.ParseFromString(ss.str()) && !stored.cubin().empty() &&
         stored.template_hash() == recipe->template_hash && stored.arch() == recipe->arch &&
         stored.kernels_size() == static_cast<int>(recipe->kernels.size());
    for (int i = 0; ok && i < stored.kernels_size(); ++i) {
      ok = stored.kernels(i).name_expression() == recipe->kernels[i].name_expression &&
           !stored.kernels(i).lowered_name().empty();
    }
    if (!ok) {
      spdlog::warn("event=kernel_cache_bad_file path=\"{}\" action=removed", path);
      std::error_code ec;
      const uint64_t size = fs::file_size(path, ec);
      if (fs::remove(path, ec)) {
        absl::MutexLock lock(&mu_);
        stats_.files -= 1;
        stats_.bytes -= std::min<uint64_t>(stats_.bytes, size);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  if (!ok) {
    ++stats_.misses;
    return false;
  }
  ++stats_.hits;
  recipe->cubin = stored.cubin();
  for (int i = 0; i < stored.kernels_size(); ++i) {
    recipe->kernels[i].lowered_name = stored.kernels(i).lowered_name();
  }
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // most recently used
  return true;
}

void KernelCache::Store(const LaunchRecipe& recipe, int nvrtc_version) {
  if (recipe.cubin.empty()) return;
  const std::string key = KeyOf(recipe, nvrtc_version);
  const std::string path = PathOf(key);
  const std::string data = RecipeToProto(recipe, /*include_cubin=*/true).SerializeAsString();
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid(), ".", gettid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      spdlog::warn("event=kernel_cache_write_failed path=\"{}\"", tmp);
      fs::remove(tmp, ec);
      return;
    }
  }
  const bool existed = fs::exists(path, ec);
  const uint64_t old_size = existed ? fs::file_size(path, ec) : 0;
  fs::rename(tmp, path, ec);
  if (ec) {
    spdlog::warn("event=kernel_cache_write_failed path=\"{}\" error=\"{}\"", path, ec.message());
    fs::remove(tmp, ec);
    return;
  }
  absl::MutexLock lock(&mu_);
  ++stats_.stores;
  if (!existed) stats_.files += 1;
  stats_.bytes = stats_.bytes - std::min<uint64_t>(stats_.bytes, old_size) + data.size();
  EvictLocked();
}

void KernelCache::EvictLocked() {
  if (stats_.bytes <= max_bytes_) return;
  struct File {
    fs::path path;
    fs::file_time_type used;
    uint64_t size;
  };
  std::vector<File> files;
  std::error_code ec;
  for (const auto& entry : fs::recursive_directory_iterator(dir_, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == kSuffix) {
      files.push_back({entry.path(), entry.last_write_time(ec), entry.file_size(ec)});
    }
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.used < b.used; });
  uint64_t total = 0;
  for (const File& f : files) total += f.size;
  int64_t removed = 0;
  for (const File& f : files) {
    if (total <= max_bytes_) break;
    if (fs::remove(f.path, ec)) {
      total -= f.size;
      ++removed;
    }
  }
  stats_.evictions += removed;
  stats_.bytes = total;
  stats_.files = static_cast<int64_t>(files.size()) - removed;
}

KernelCache::Stats KernelCache::stats() {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ktune
