#include "tuner/core/safe_text.h"

#include <catch2/catch.hpp>

namespace ktune {
namespace {

TEST_CASE("SafeText escapes what could end a log line or a quoted field, and bounds the length", "[safe_text]") {
  CHECK(SafeText("NVIDIA H200") == "NVIDIA H200");
  CHECK(SafeText("a\nlevel=critical event=forged") == "a\\nlevel=critical event=forged");
  CHECK(SafeText("x\r\x1b[2Ky") == "x\\r\\x1b[2Ky");
  CHECK(SafeText("say \"hi\" \\ bye") == "say \\\"hi\\\" \\\\ bye");
  CHECK(SafeText(std::string("nul\0byte", 8)) == "nul\\x00\\x62yte");  // no "\\x00b" ambiguity
  CHECK(SafeText("\xc3\xa9") == "\\xc3\\xa9");  // bytes, not characters: never a terminal's control
  const std::string huge(1 << 20, 'z');
  const std::string cut = SafeText(huge, 16);
  CHECK(cut == std::string(16, 'z') + "...(1048560 more bytes)");
  CHECK(SafeText(huge).size() < 200);
  CHECK(SafeText(std::string(kMaxSafeTextBytes, 'q')) == std::string(kMaxSafeTextBytes, 'q'));
  // Escaping never leaves a raw control byte, whatever the input.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (unsigned char c : SafeText(all, all.size())) CHECK((c >= 0x20 && c < 0x7f));
}

}  // namespace
}  // namespace ktune
