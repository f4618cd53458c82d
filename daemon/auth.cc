#include "daemon/auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tuner/core/input_file.h"

namespace ktune {
namespace {

constexpr size_t kMinTokenLength = 16;

// Compares without an early exit, so timing does not reveal a prefix.
bool SameToken(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

absl::string_view BearerToken(absl::string_view authorization) {
  if (!absl::ConsumePrefix(&authorization, "Bearer ")) return "";
  return authorization;
}

}  // namespace

struct Authorizer::Tokens {
  absl::Mutex mu;
  std::string token ABSL_GUARDED_BY(mu);
  std::string admin_token ABSL_GUARDED_BY(mu);
};

Authorizer::Authorizer(std::string token, std::string admin_token) : tokens_(std::make_shared<Tokens>()) {
  Reload(std::move(token), std::move(admin_token));
}

void Authorizer::Reload(std::string token, std::string admin_token) {
  absl::MutexLock lock(&tokens_->mu);
  tokens_->token = std::move(token);
  tokens_->admin_token = std::move(admin_token);
}

bool Authorizer::has_token() const {
  absl::ReaderMutexLock lock(&tokens_->mu);
  return !tokens_->token.empty();
}

absl::Status Authorizer::Check(const grpc::ServerContextBase& context, Access access) const {
  // Without a token every use is allowed (CheckPresented): answered before
  // the peer's address is asked for, which copies a string on every call.
  if (access == Access::kUse && !has_token()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const absl::string_view authorization =
      it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
  return CheckPresented(absl::StartsWith(context.peer(), "unix:"), BearerToken(authorization), access);
}

absl::Status Authorizer::CheckTcpCaller(absl::string_view authorization) const {
  return CheckPresented(false, BearerToken(authorization), Access::kUse);
}

absl::Status Authorizer::CheckPresented(bool local, absl::string_view presented, Access access) const {
  // Through a plain reference, so the thread-safety analysis sees that the
  // lock taken is the one guarding the tokens read.
  Tokens& t = *tokens_;
  absl::ReaderMutexLock lock(&t.mu);
  if (access == Access::kAdmin) {
    if (!t.admin_token.empty()) {
      if (SameToken(presented, t.admin_token)) return absl::OkStatus();
      return absl::PermissionDeniedError(
          "this call (import, rm, prune) needs the admin token (ktune --token-file ADMIN_TOKEN_FILE)");
    }
    if (local) return absl::OkStatus();
    return absl::PermissionDeniedError(
        "this call (import, rm, prune) over TCP needs an admin token: start ktuned with --admin-token-file, "
        "or call over the Unix socket");
  }
  if (local || t.token.empty()) return absl::OkStatus();
  if (presented.empty()) {
    return absl::UnauthenticatedError(
        "this ktuned needs a token from TCP callers (ktune --token-file FILE, or KTUNE_TOKEN)");
  }
  if (SameToken(presented, t.token) || (!t.admin_token.empty() && SameToken(presented, t.admin_token))) {
    return absl::OkStatus();
  }
  return absl::UnauthenticatedError("wrong token");
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadInputFile(path, kTokenFile);
  if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.size() < kMinTokenLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": a token needs at least ", kMinTokenLength, " characters"));
  }
  return token;
}

}  // namespace ktune
