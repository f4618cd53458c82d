#include "daemon/server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cache/bundle.h"
#include "daemon/service.h"
#include "daemon/status_mapping.h"
#include "grpc/grpc.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "spdlog/spdlog.h"
#include "tuner/core/input_file.h"
#include "tuner/core/paths.h"

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

// Why a TCP `address` cannot be bound now ("address already in use"), or ""
// when it can: gRPC only says that some listener failed.
std::string BindProblem(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &found); rc != 0) {
    return gai_strerror(rc);
  }
  std::string problem;
  for (addrinfo* ai = found; ai != nullptr && problem.empty(); ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));  // as gRPC does
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      problem = errno == EADDRINUSE ? "address already in use" : std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return problem;
}

// gRPC's callback handlers answer a request that does not parse with
// UNIMPLEMENTED and no message, which reads as "old daemon"; this turns that
// answer into INVALID_ARGUMENT naming the method. A unary or server-streaming
// request is parsed before the handler runs, and its POST_RECV_MESSAGE hook
// then carries no message.
class UnparseableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparseableRequestInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method()),
        parsed_before_handler_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY ||
                               info->type() == grpc::experimental::ServerRpcInfo::Type::SERVER_STREAMING) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (parsed_before_handler_ && !seen_request_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      seen_request_ = true;
      unparseable_ = methods->GetRecvMessage() == nullptr;
    }
    if (unparseable_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->ModifySendStatus(ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("the request is not a valid ", method_, " request message (protobuf parse failed)"))));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const bool parsed_before_handler_;
  bool seen_request_ = false;
  bool unparseable_ = false;
};

class UnparseableRequestInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // Only ktune's typed methods: GetConfig is raw (its handler parses, and
  // names the method itself), and a call no interceptor is made for skips
  // gRPC's interception machinery, which costs every call it runs on.
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    const absl::string_view method = info->method();
    if (!absl::StartsWith(method, "/ktune.v1.KtuneService/") || method == "/ktune.v1.KtuneService/GetConfig") {
      return nullptr;
    }
    return new UnparseableRequestInterceptor(info);
  }
};

// Refuses a TLS caller without the token before gRPC reads its request
// message: the server's auth filter runs this on the call's metadata first.
// The handlers check again (admin calls, and the Unix socket, which this does
// not cover).
class TokenGate final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenGate(Authorizer auth) : auth_(std::move(auth)) {}
  bool IsBlocking() const override { return false; }  // a compare: no need for a thread
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/, OutputMetadata* /*consumed*/,
                       OutputMetadata* /*response*/) override {
    auto it = metadata.find("authorization");
    const absl::string_view value =
        it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
    return ToGrpcStatus(auth_.CheckTcpCaller(value));
  }

 private:
  const Authorizer auth_;
};

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
      return absl::InvalidArgumentError(absl::StrCat("--listen ", address, ": a Unix socket needs an absolute path"));
    }
    if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat("--listen ", address, ": socket path longer than ",
                                                     sizeof(sockaddr_un{}.sun_path) - 1, " bytes"));
    }
    return absl::OkStatus();
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("--listen ", address, ": expected unix:/path or host:port"));
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--listen ", address, ": port must be a number in [0, 65535]"));
  }
  if (!have_tls && !IsLoopbackHost(address.substr(0, colon))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", address,
                     ": TCP beyond loopback needs TLS (--tls-cert and --tls-key); use a Unix socket or 127.0.0.1"));
  }
  return absl::OkStatus();
}

namespace {

// A certificate and a key that do not belong together start fine and then
// fail every handshake, which callers see only as UNAVAILABLE; so the pair is
// checked at start (a rotated pair is gRPC's to check when it reloads).
absl::Status CheckKeyPair(const std::string& cert_pem, const std::string& cert_path, const std::string& key_pem,
                          const std::string& key_path) {
  // No passphrase prompt on the terminal: an encrypted key is refused.
  auto no_passphrase = [](char*, int, int, void*) -> int { return 0; };
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      cert_bio ? PEM_read_bio_X509(cert_bio.get(), nullptr, no_passphrase, nullptr) : nullptr, &X509_free);
  if (!cert) return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", cert_path, ": no certificate in it"));
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())),
                                                    &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr) : nullptr, &EVP_PKEY_free);
  ERR_clear_error();  // OpenSSL's error queue is per thread; leave it empty for gRPC
  if (!key) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_path, ": no private key in it (an encrypted key is not supported)"));
  }
  const bool match = X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!match) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", key_path, " is not the key of the certificate in --tls-cert ", cert_path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTlsFiles(const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (cert_file.empty()) return absl::OkStatus();
  std::vector<std::string> pems;
  for (const std::string* path : {&cert_file, &key_file}) {
    absl::StatusOr<std::string> pem = ReadInputFile(*path, kPemFile);
    if (!pem.ok()) return pem.status();
    if (pem->find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(*path, ": not a PEM file"));
    }
    pems.push_back(*std::move(pem));
  }
  return CheckKeyPair(pems[0], cert_file, pems[1], key_file);
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options, KtuneServiceImpl* service) {
  const bool have_tls = !options.tls_cert_file.empty() && !options.tls_key_file.empty();
  if (absl::Status s = CheckTlsFiles(options.tls_cert_file, options.tls_key_file); !s.ok()) return s;
  if (options.listen.empty()) return absl::InvalidArgumentError("no --listen address");
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials = grpc::InsecureServerCredentials();
  if (have_tls) {
    // Watched files, so certificates rotate without a restart.
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        options.tls_key_file, options.tls_cert_file, std::max(1u, options.tls_refresh_s));
    grpc::experimental::TlsServerCredentialsOptions tls(provider);
    tls.watch_identity_key_cert_pairs();
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    tcp_credentials = grpc::experimental::TlsServerCredentials(tls);
    tcp_credentials->SetAuthMetadataProcessor(std::make_shared<TokenGate>(options.auth));
  }

  std::unique_ptr<Server> server(new Server());
  grpc::EnableDefaultHealthCheckService(true);
  // The health service's messages live in gRPC's C core, not in protobuf's
  // descriptor pool, so reflection could list the service but not describe
  // it. Naming a descriptor of proto/grpc/health/v1/health.proto links that
  // file's generated code, which adds them to the pool.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  static_assert(size_t{v1::IMPORT_PIECE_BYTES} + 1024 <= kMaxRequestBytes, "an import piece must fit a request");
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(256 << 20);
  // gRPC sets SO_REUSEPORT by default: a second daemon on the port would then
  // start fine and take every other connection, serving from its own cache.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<UnparseableRequestInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  for (const std::string& address : options.listen) {
    if (absl::Status s = ValidateListenAddress(address, have_tls); !s.ok()) return s;
    if (absl::StartsWith(address, kUnixPrefix)) {
      const std::filesystem::path path = address.substr(sizeof(kUnixPrefix) - 1);
      std::error_code ec;
      if (path.parent_path() == DefaultRuntimeDir()) {
        if (absl::Status s = EnsurePrivateDir(path.parent_path()); !s.ok()) return s;
      } else if (!std::filesystem::exists(path.parent_path())) {
        std::filesystem::create_directories(path.parent_path(), ec);
        if (ec) {
          return absl::FailedPreconditionError(
              absl::StrCat("cannot create ", path.parent_path().string(), ": ", ec.message()));
        }
        chmod(path.parent_path().c_str(), 0700);
      }
      if (std::filesystem::exists(path)) {
        if (SocketIsLive(path)) {
          return absl::AlreadyExistsError(absl::StrCat("another process is already serving on ", address));
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
    for (const std::string& address : options.listen) {
      if (absl::StartsWith(address, kUnixPrefix)) continue;
      if (const std::string problem = BindProblem(address); !problem.empty()) {
        return absl::UnavailableError(absl::StrCat("--listen ", address, ": ", problem));
      }
    }
    return absl::UnavailableError("gRPC could not bind every --listen address (in use, or permission denied)");
  }
  for (const std::string& path : server->socket_paths_) {
    if (chmod(path.c_str(), 0660) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("chmod 0660 ", path, ": ", std::strerror(errno)));
    }
  }
  return server;
}

void Server::Shutdown(double grace_s) {
  if (!server_) return;
  if (server_->GetHealthCheckService()) server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  server_->Wait();
  server_.reset();
  for (const std::string& path : socket_paths_) unlink(path.c_str());
}

Server::~Server() { Shutdown(0); }

}  // namespace ktune
