// Starting and stopping ktuned's gRPC server: listeners, the health service,
// reflection, Unix socket permissions, and a draining shutdown.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/auth.h"
#include "grpcpp/server.h"

namespace ktune {

class KtuneServiceImpl;

struct ServerOptions {
  // "unix:/path" or "host:port". TCP listeners other than loopback need TLS.
  std::vector<std::string> listen;
  std::string tls_cert_file;  // PEM; with tls_key_file enables TLS on TCP listeners
  std::string tls_key_file;
  // How often the certificate and key files are re-read: a rotated pair is
  // served to new connections without a restart (a pair that does not match
  // is ignored and the old one kept).
  unsigned tls_refresh_s = 60;
  // The tokens TLS callers must present; checked on a call's metadata before
  // its request is read (a copy: shares the tokens, and their reloads).
  Authorizer auth;
};

// True for a TCP address whose host is loopback (127.0.0.1, ::1, localhost).
bool IsLoopbackTcp(const std::string& address);

// Checks one listen address: INVALID_ARGUMENT naming what is wrong.
absl::Status ValidateListenAddress(const std::string& address, bool have_tls);

class Server {
 public:
  // Binds every listener (a Unix socket's directory is created 0700 and the
  // socket chmod'ed 0660; a stale socket nobody answers on is replaced, a live
  // one is an error) and starts serving `service`, which must outlive Server.
  // The default socket's directory must be ours alone (EnsurePrivateDir,
  // tuner/paths.h). A TCP port is never shared (no SO_REUSEPORT): one already
  // taken is UNAVAILABLE "--listen HOST:PORT: address already in use".
  // Requests that do not parse are answered INVALID_ARGUMENT naming the method.
  //
  // Request sizes: gRPC reads a unary request whole before any handler runs,
  // so what a caller can make ktuned hold is bounded in two steps. Every
  // request is capped just above the largest bundle an import may carry
  // (kMaxBundleBytes). A TLS caller without the token is refused on its
  // metadata alone (an AuthMetadataProcessor runs before the message is
  // read), so unauthenticated callers, however many, never make ktuned buffer
  // a body: only token holders can send large requests, and only the admin
  // token makes an import count. Plain TCP is loopback only, whose callers are
  // local users like those of the Unix socket.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       KtuneServiceImpl* service);
  ~Server();

  // Stops accepting calls, lets in-flight calls finish for up to `grace_s`
  // seconds, then cancels the rest. Removes Unix socket files.
  void Shutdown(double grace_s);

 private:
  Server() = default;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::string> socket_paths_;
};

}  // namespace ktune
