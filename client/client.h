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

class Client {
 public:
  // `address` as ktuned's --listen ("unix:/path", "host:port"). Does not
  // connect yet; the first call does. `timeout_s` bounds each unary call.
  // Every call carries the token of $KTUNE_TOKEN, if set (ktuned asks TCP
  // callers for one, and imports for the admin token).
  static std::unique_ptr<Client> Create(const std::string& address, double timeout_s = 600);

  absl::StatusOr<v1::GetConfigResponse> GetConfig(const v1::GetConfigRequest& request);
  // Streams progress to `on_event` (may be null) and returns the result event.
  absl::StatusOr<v1::GetConfigResponse> Tune(const v1::TuneRequest& request,
                                             const std::function<void(const v1::TuneEvent&)>& on_event);
  absl::StatusOr<v1::ListEntriesResponse> ListEntries(const v1::ListEntriesRequest& request);
  absl::StatusOr<v1::ExportBundleResponse> ExportBundle(const v1::ExportBundleRequest& request = {});
  // Imports with the default policy (keep-faster); the request form sets the
  // policy and dry_run.
  absl::StatusOr<v1::ImportBundleResponse> ImportBundle(std::string bundle);
  absl::StatusOr<v1::ImportBundleResponse> ImportBundle(const v1::ImportBundleRequest& request);
  absl::StatusOr<v1::GetStatusResponse> GetStatus();

  const std::string& address() const { return address_; }

 private:
  Client(std::string address, double timeout_s);
  void Prepare(grpc::ClientContext* context) const;

  std::string address_;
  double timeout_s_;
  std::string token_;
  std::unique_ptr<v1::KtuneService::Stub> stub_;
};

// The server's error as an absl::Status; UNAVAILABLE gets a hint about the address.
absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& address);

}  // namespace ktune
