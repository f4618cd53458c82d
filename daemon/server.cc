#include "daemon/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/service.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace ktune {
namespace {

constexpr char kUnixPrefix[] = "unix:";

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == "[::1]" || host == "::1";
}

// True if something accepts connections on the Unix socket at `path`.
bool SocketIsLive(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

bool IsLoopbackTcp(const std::string& address) {
  if (absl::StartsWith(address, kUnixPrefix)) return false;
  const size_t colon = address.rfind(':');
  return colon != std::string::npos && IsLoopbackHost(address.substr(0, colon));
}

absl::Status ValidateListenAddress(const std::string& address, bool have_tls) {
  if (absl::StartsWith(address, kUnixPrefix)) {
    const std::string path = address.substr(sizeof(kUnixPrefix) - 1);
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen ", address, ": a Unix socket needs an absolute path"));
    }
    if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("--listen ", address, ": socket path longer than ",
                                                     sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
    }
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", address, ": expected unix:/path or host:port"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", address, ": port must be a number in [0, 65535]"));
  }
  if (!have_tls && !IsLoopbackHost(address.substr(0, colon))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", address,
        ": TCP beyond loopback needs TLS (--tls-cert and --tls-key); use a Unix socket or 127.0.0.1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                                      KtuneServiceImpl* service) {
  const bool have_tls = !options.tls_cert_file.empty() && !options.tls_key_file.empty();
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (options.listen.empty()) return absl::InvalidArgumentError("no --listen address");
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials = grpc::InsecureServerCredentials();
  if (have_tls) {
    absl::StatusOr<std::string> cert = ReadFile(options.tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(options.tls_key_file);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    tcp_credentials = grpc::SslServerCredentials(ssl);
  }

  std::unique_ptr<Server> server(new Server());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(256 << 20);  // bundles; see kMaxBundleBytes
  builder.SetMaxSendMessageSize(256 << 20);
  for (const std::string& address : options.listen) {
    if (absl::Status s = ValidateListenAddress(address, have_tls); !s.ok()) return s;
    if (absl::StartsWith(address, kUnixPrefix)) {
      const std::filesystem::path path = address.substr(sizeof(kUnixPrefix) - 1);
      std::error_code ec;
      if (!std::filesystem::exists(path.parent_path())) {
        std::filesystem::create_directories(path.parent_path(), ec);
        if (ec) {
          return absl::FailedPreconditionError(
              absl::StrCat("cannot create ", path.parent_path().string(), ": ", ec.message()));
        }
        chmod(path.parent_path().c_str(), 0700);
      }
      if (std::filesystem::exists(path)) {
        if (SocketIsLive(path)) {
          return absl::AlreadyExistsError(
              absl::StrCat("another process is already serving on ", address));
        }
        std::filesystem::remove(path, ec);  // stale socket of a dead daemon
      }
      builder.AddListeningPort(address, grpc::InsecureServerCredentials());
      server->socket_paths_.push_back(path);
    } else {
      builder.AddListeningPort(address, tcp_credentials);
    }
  }
  builder.RegisterService(service);
  server->server_ = builder.BuildAndStart();
  if (!server->server_) {
    return absl::UnavailableError(
        "gRPC could not bind every --listen address (in use, or permission denied)");
  }
  for (const std::string& path : server->socket_paths_) {
    if (chmod(path.c_str(), 0660) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("chmod 0660 ", path, ": ", std::strerror(errno)));
    }
  }
  return server;
}

void Server::Shutdown(double grace_s) {
  if (!server_) return;
  if (server_->GetHealthCheckService()) server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  server_->Wait();
  server_.reset();
  for (const std::string& path : socket_paths_) unlink(path.c_str());
}

Server::~Server() { Shutdown(0); }

}  // namespace ktune
