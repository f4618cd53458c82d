#include "tuner/core/safe_text.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ktune {

std::string SafeText(absl::string_view text, size_t max_bytes) {
  // Cut before escaping: the bound is on what the caller sent, and the
  // escaped form of it is at most four times as long.
  const bool cut = text.size() > max_bytes;
  std::string out = absl::CHexEscape(text.substr(0, max_bytes));
  if (cut) absl::StrAppend(&out, "...(", text.size() - max_bytes, " more bytes)");
  return out;
}

}  // namespace ktune
