// Text from a caller or a bundle, made safe to put in a log line or an error
// message: every byte that is not printable ASCII (a newline, an escape
// sequence, UTF-8) is written as an escape, quotes and backslashes too, so a
// value can never end a log line or a quoted field and forge another; and it
// is cut to a bounded length, so an error never echoes an unbounded string.
// Every log or error that carries such text goes through SafeText.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ktune {

inline constexpr size_t kMaxSafeTextBytes = 128;

// `text` escaped (C style: \n, \x1b, \", \\), its first `max_bytes` bytes
// only, then "...(N more bytes)" when cut.
std::string SafeText(absl::string_view text, size_t max_bytes = kMaxSafeTextBytes);

}  // namespace ktune
