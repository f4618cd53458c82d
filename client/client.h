// The C++ client of ktuned. Each call maps the gRPC outcome to an absl::Status
// with the server's message, so callers see "problem.n: must be in [1, 262144],
// got -1" rather than a transport detail.
// Thread-safe: a Client may be shared; gRPC channels are.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/ktune.grpc.pb.h"

namespace ktune {

// How a Client reaches and proves itself to ktuned.
struct ClientOptions {
  double timeout_s = 600;  // bounds each unary call
  // Sent as "authorization: Bearer TOKEN" on every call (ktuned asks TCP
  // callers for one, and imports for the admin token); empty sends none.
  std::string token;
  // PEM of the CA that signed ktuned's certificate. When set, TCP addresses
  // are reached over TLS trusting only this CA (a Unix socket never uses TLS:
  // ktuned serves it in the clear, trusted by its file permissions).
  std::string tls_ca_pem;
  std::string tls_ca_file;  // where tls_ca_pem came from; named in errors only
  // The name ktuned's certificate must carry, when it is not the address's
  // host (a certificate for "ktuned.internal" reached by IP address).
  std::string tls_server_name;
};

class Client {
 public:
  // `address` as ktuned's --listen ("unix:/path", "host:port"). Does not
  // connect yet; the first call does. Calls to the default socket
  // (DefaultServerAddress()) fail with FAILED_PRECONDITION, sending nothing,
  // when its directory is not ours alone (CheckPrivateDir).
  static std::unique_ptr<Client> Create(const std::string& address, const ClientOptions& options);
  // Plain text, `timeout_s` per call, and the token of $KTUNE_TOKEN if set.
  static std::unique_ptr<Client> Create(const std::string& address, double timeout_s = 600);

  absl::StatusOr<v1::GetConfigResponse> GetConfig(const v1::GetConfigRequest& request);
  // Streams progress to `on_event` (may be null) and returns the result event.
  absl::StatusOr<v1::GetConfigResponse> Tune(const v1::TuneRequest& request,
                                             const std::function<void(const v1::TuneEvent&)>& on_event);
  absl::StatusOr<v1::ListEntriesResponse> ListEntries(const v1::ListEntriesRequest& request);
  // One message: the daemon refuses (FAILED_PRECONDITION) a bundle over
  // 64 MiB. ExportBundleStream has no ceiling.
  absl::StatusOr<v1::ExportBundleResponse> ExportBundle(const v1::ExportBundleRequest& request = {});
  // Hands each chunk to `on_chunk` as it comes (an error from it cancels the
  // call and is returned). The call's deadline is the client's timeout.
  absl::Status ExportBundleStream(const v1::ExportBundleRequest& request,
                                  const std::function<absl::Status(const v1::ExportBundleChunk&)>& on_chunk);
  // Needs the admin token.
  absl::StatusOr<v1::DeleteEntriesResponse> DeleteEntries(const v1::DeleteEntriesRequest& request);
  // Imports with the default policy (keep-faster); the request form sets the
  // policy and dry_run.
  absl::StatusOr<v1::ImportBundleResponse> ImportBundle(std::string bundle);
  absl::StatusOr<v1::ImportBundleResponse> ImportBundle(const v1::ImportBundleRequest& request);
  absl::StatusOr<v1::GetStatusResponse> GetStatus();
  // The request form asks for more (fleet_counts: the fleet store's counts).
  absl::StatusOr<v1::GetStatusResponse> GetStatus(const v1::GetStatusRequest& request);

  const std::string& address() const { return address_; }

 private:
  Client(std::string address, ClientOptions options);
  // Sets the token and deadline; the refusal of an unsafe socket directory.
  absl::Status Prepare(grpc::ClientContext* context) const;
  absl::Status FromGrpc(const grpc::Status& status) const;

  std::string address_;
  const ClientOptions options_;
  // Not OK when `address_` is the default socket and its directory is not
  // ours alone (tuner/core/paths.h): no call is made then.
  absl::Status socket_dir_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KtuneService::Stub> stub_;
};

// The gRPC service config every Client's channel carries: the retry policy
// for UNAVAILABLE on GetConfig, GetStatus, ListEntries, ExportBundle and
// ExportBundleStream.
std::string ServiceConfigJson();

// The server's error as an absl::Status; UNAVAILABLE gets a hint about the
// address (and, over TLS, about the CA file and the server name).
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& address, const ClientOptions& options = {});

}  // namespace ktune
