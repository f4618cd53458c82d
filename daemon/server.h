// Starting and stopping ktuned's gRPC server: listeners, the health service,
// reflection, Unix socket permissions, and a draining shutdown.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace ktune {

class KtuneServiceImpl;

struct ServerOptions {
  // "unix:/path" or "host:port". TCP listeners other than loopback need TLS.
  std::vector<std::string> listen;
  std::string tls_cert_file;  // PEM; with tls_key_file enables TLS on TCP listeners
  std::string tls_key_file;
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
