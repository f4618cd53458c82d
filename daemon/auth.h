// Who may call what.
//
// Callers on the Unix socket are trusted by its file permissions (0660, in a
// 0700 directory). TCP callers must present `authorization: Bearer <token>`
// when the daemon has a token (--token-file); a TCP listener beyond loopback
// is refused at start without TLS and a token. Importing a bundle changes what
// every caller is served, so it needs the admin token (--admin-token-file)
// from any transport, or, when the daemon has none, must come over the Unix
// socket. Thread-safe: immutable after construction.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace ktune {

class Authorizer {
 public:
  enum class Access { kUse, kAdmin };  // kUse: every call but an import

  Authorizer() = default;
  Authorizer(std::string token, std::string admin_token)
      : token_(std::move(token)), admin_token_(std::move(admin_token)) {}

  // OK, UNAUTHENTICATED (no or wrong token) or PERMISSION_DENIED (an admin
  // call without the admin token), with a message that says what to do.
  absl::Status Check(const grpc::CallbackServerContext& context, Access access) const;

  bool has_token() const { return !token_.empty(); }

 private:
  std::string token_;
  std::string admin_token_;
};

// A token file's content, whitespace trimmed. INVALID_ARGUMENT if it cannot be
// read or holds fewer than 16 characters (a token that short is guessable).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace ktune
