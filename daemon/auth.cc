#include "daemon/auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ktune {
namespace {

constexpr size_t kMinTokenLength = 16;

// Compares without an early exit, so timing does not reveal a prefix.
bool SameToken(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

std::string BearerToken(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return "";
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) return "";
  return std::string(value);
}

}  // namespace

absl::Status Authorizer::Check(const grpc::CallbackServerContext& context, Access access) const {
  const bool local = absl::StartsWith(context.peer(), "unix:");
  const std::string presented = BearerToken(context);
  if (access == Access::kAdmin) {
    if (!admin_token_.empty()) {
      if (SameToken(presented, admin_token_)) return absl::OkStatus();
      return absl::PermissionDeniedError(
          "importing a bundle needs the admin token (ktune --token-file ADMIN_TOKEN_FILE)");
    }
    if (local) return absl::OkStatus();
    return absl::PermissionDeniedError(
        "importing a bundle over TCP needs an admin token: start ktuned with --admin-token-file, "
        "or import over the Unix socket");
  }
  if (local || token_.empty()) return absl::OkStatus();
  if (presented.empty()) {
    return absl::UnauthenticatedError(
        "this ktuned needs a token from TCP callers (ktune --token-file FILE, or KTUNE_TOKEN)");
  }
  if (SameToken(presented, token_) || (!admin_token_.empty() && SameToken(presented, admin_token_))) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError("wrong token");
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read token file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.size() < kMinTokenLength) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": a token needs at least ",
                                                   kMinTokenLength, " characters"));
  }
  return token;
}

}  // namespace ktune
