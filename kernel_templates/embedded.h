// The text of every kernel template under kernel_templates/, embedded at build
// time. Paths are relative to kernel_templates/ ("norm/rmsnorm_fwd.cuh") and are
// the names templates #include each other by. Thread-safe: immutable data.
#pragma once

#include "absl/types/span.h"
#include <string_view>

namespace ktune {

struct EmbeddedFile {
  std::string_view path;
  std::string_view text;
};

// All embedded files, sorted by path.
absl::Span<const EmbeddedFile> EmbeddedTemplateFiles();

}  // namespace ktune
