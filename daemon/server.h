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

// The largest request message ktuned reads: any call's request is a few
// hundred bytes, and bundles come in pieces (v1::IMPORT_PIECE_BYTES).
inline constexpr int kMaxRequestBytes = 64 << 10;

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

// Checks --tls-cert and --tls-key: both or neither, each a PEM file within
// its size bound, the first holding a certificate, the second an unencrypted
// private key that is that certificate's. INVALID_ARGUMENT (or the file's own
// error) naming the flag and the file. A pair that does not match would start
// and then fail every handshake, seen by callers only as UNAVAILABLE.
absl::Status CheckTlsFiles(const std::string& cert_file, const std::string& key_file);

class Server {
 public:
  // Binds every listener (a Unix socket's directory is created 0700 and the
  // socket chmod'ed 0660; a stale socket nobody answers on is replaced, a live
  // one is an error) and starts serving `service`, which must outlive Server.
  // The default socket's directory must be ours alone (EnsurePrivateDir,
  // tuner/core/paths.h). A TCP port is never shared (no SO_REUSEPORT): one already
  // taken is UNAVAILABLE "--listen HOST:PORT: address already in use".
  // Requests that do not parse are answered INVALID_ARGUMENT naming the method.
  //
  // Request sizes: gRPC reads a unary request whole before any handler runs,
  // so the bound has to hold before any handler. Every request message, on
  // every transport, is at most kMaxRequestBytes (gRPC answers a larger one
  // RESOURCE_EXHAUSTED without a handler). The one large thing a caller may
  // send, a bundle, comes through ImportBundleStream in pieces, and its
  // reactor reads none of them before the admin token checks out (reactors.h);
  // the unary ImportBundle stays, for bundles under the cap. On top, a TLS
  // caller without the token is refused on its metadata alone (an
  // AuthMetadataProcessor, run before the message is read), so remote
  // callers without the token make ktuned buffer nothing at all.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options, KtuneServiceImpl* service);
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
