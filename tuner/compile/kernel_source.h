// Kernel templates as the tuner sees them: a template id names a top-level
// .cuh under kernel_templates/; its source is that file plus every embedded
// file it includes, and its hash covers all of them, so editing a shared
// header changes the cache key of every template that includes it.
// Thread-safe: the registry is built once, immutably.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ktune {

struct KernelSource {
  std::string template_id;  // "norm/rmsnorm_fwd"
  std::string path;         // "norm/rmsnorm_fwd.cuh"
  std::string text;         // the top-level file
  // Every embedded file, passed to NVRTC as in-memory headers.
  std::vector<std::string> header_names;
  std::vector<std::string> header_texts;
  std::string hash;  // sha256 hex over the top-level file and all headers it uses
};

// NOT_FOUND if no such template is embedded.
absl::StatusOr<const KernelSource*> FindKernelSource(const std::string& template_id);

}  // namespace ktune
