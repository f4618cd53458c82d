// Who may call what.
//
// Callers on the Unix socket are trusted by its file permissions (0660, in a
// 0700 directory). TCP callers must present `authorization: Bearer <token>`
// when the daemon has a token (--token-file); a TCP listener beyond loopback
// is refused at start without TLS and a token. Importing a bundle or deleting
// entries changes what every caller is served, so it needs the admin token
// (--admin-token-file)
// from any transport, or, when the daemon has none, must come over the Unix
// socket.
//
// Thread-safe. Copies share their tokens: Reload through any copy (ktuned's
// SIGHUP) is seen by every copy at once, so token files can be rotated
// without a restart.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server_context.h"

namespace ktune {

class Authorizer {
 public:
  enum class Access { kUse, kAdmin };  // kAdmin: imports and deletes; kUse: every other call

  Authorizer() : Authorizer("", "") {}
  Authorizer(std::string token, std::string admin_token);

  // OK, UNAUTHENTICATED (no or wrong token) or PERMISSION_DENIED (an admin
  // call without the admin token), with a message that says what to do.
  absl::Status Check(const grpc::ServerContextBase& context, Access access) const;

  // The kUse check for a TCP caller whose "authorization" metadata value is
  // `authorization` ("" when absent): run on a call's metadata before its
  // message is read (daemon/server.cc), so an unauthenticated caller never
  // makes ktuned hold a request body.
  absl::Status CheckTcpCaller(absl::string_view authorization) const;

  // Replaces both tokens for every copy; calls already checked are not
  // affected, the next Check uses the new ones.
  void Reload(std::string token, std::string admin_token);

  bool has_token() const;

 private:
  struct Tokens;
  absl::Status CheckPresented(bool local, absl::string_view presented, Access access) const;

  std::shared_ptr<Tokens> tokens_;
};

// A token file's content, whitespace trimmed. INVALID_ARGUMENT if it cannot be
// read or holds fewer than 16 characters (a token that short is guessable).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace ktune
