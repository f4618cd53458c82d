#include "client/client.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tuner/core/paths.h"

namespace ktune {

namespace {

bool UsesTls(const std::string& address, const ClientOptions& options) {
  return !options.tls_ca_pem.empty() && !absl::StartsWith(address, "unix:");
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& address, const ClientOptions& options) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable) {
    // A certificate the CA did not sign, or one for another name, fails the
    // handshake, which gRPC reports as "cannot connect" like a dead daemon.
    std::string tls_hint;
    if (UsesTls(address, options)) {
      tls_hint = absl::StrCat(" and serving TLS with a certificate signed by the CA in ",
                              options.tls_ca_file.empty() ? "--tls-ca" : options.tls_ca_file, " for the name ",
                              options.tls_server_name.empty() ? "of the address" : options.tls_server_name,
                              " (--tls-server-name)");
    }
    return absl::UnavailableError(absl::StrCat("cannot reach ktuned at ", address, " (", status.error_message(),
                                               "); is it running", tls_hint, "?"));
  }
  return absl::Status(code, status.error_message());
}

// UNAVAILABLE (the daemon restarting, its socket not there yet) is retried
// by gRPC itself, with exponential backoff and jitter, on the calls that are
// safe to repeat: reads, and GetConfig (a tune it may start runs once per
// key). Import and Tune are not retried: a caller must see that they failed.
// Five attempts (gRPC's cap) with 0.25, 0.5, 1 and 2 s between them ride out
// a restart of about 4 s; each call's deadline still bounds the whole.
std::string ServiceConfigJson() {
  return R"({
  "methodConfig": [{
    "name": [
      {"service": "ktune.v1.KtuneService", "method": "GetConfig"},
      {"service": "ktune.v1.KtuneService", "method": "GetStatus"},
      {"service": "ktune.v1.KtuneService", "method": "ListEntries"},
      {"service": "ktune.v1.KtuneService", "method": "ExportBundle"},
      {"service": "ktune.v1.KtuneService", "method": "ExportBundleStream"}
    ],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.25s",
      "maxBackoff": "2s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
})";
}

std::unique_ptr<Client> Client::Create(const std::string& address, const ClientOptions& options) {
  return std::unique_ptr<Client>(new Client(address, options));
}

std::unique_ptr<Client> Client::Create(const std::string& address, double timeout_s) {
  ClientOptions options;
  options.timeout_s = timeout_s;
  if (const char* token = std::getenv("KTUNE_TOKEN"); token != nullptr) options.token = token;
  return Create(address, options);
}

Client::Client(std::string address, ClientOptions options)
    : address_(std::move(address)), options_(std::move(options)) {
  if (address_ == DefaultServerAddress()) socket_dir_ = CheckPrivateDir(DefaultRuntimeDir());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (UsesTls(address_, options_)) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls_ca_pem;
    credentials = grpc::SslCredentials(ssl);
    if (!options_.tls_server_name.empty()) args.SetSslTargetNameOverride(options_.tls_server_name);
  }
  args.SetServiceConfigJSON(ServiceConfigJson());
  // A retry finds the daemon only once the channel reconnects: gRPC's default
  // first reconnect waits 1 s and grows to 120 s, longer than the retries last.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(address_, credentials, args);
  stub_ = v1::KtuneService::NewStub(channel_);
}

absl::Status Client::Prepare(grpc::ClientContext* context) const {
  if (!socket_dir_.ok()) return socket_dir_;
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(options_.timeout_s * 1000)));
  return absl::OkStatus();
}

absl::Status Client::FromGrpc(const grpc::Status& status) const {
  // A deadline that ran out while the retries found no daemon is reported as
  // what it is: the daemon could not be reached.
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    const grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/false);
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_CONNECTING) {
      return FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no connection before the deadline"), address_,
                            options_);
    }
  }
  return FromGrpcStatus(status, address_, options_);
}

absl::StatusOr<v1::GetConfigResponse> Client::GetConfig(const v1::GetConfigRequest& request) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  v1::GetConfigResponse response;
  grpc::Status s = stub_->GetConfig(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::StatusOr<v1::GetConfigResponse> Client::Tune(const v1::TuneRequest& request,
                                                   const std::function<void(const v1::TuneEvent&)>& on_event) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  std::unique_ptr<grpc::ClientReader<v1::TuneEvent>> reader = stub_->Tune(&context, request);
  v1::TuneEvent event;
  v1::GetConfigResponse result;
  bool have_result = false;
  while (reader->Read(&event)) {
    if (on_event) on_event(event);
    if (event.has_result()) {
      result = event.result();
      have_result = true;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpc(s);
  if (!have_result) return absl::InternalError("tune stream ended without a result");
  return result;
}

absl::StatusOr<v1::ListEntriesResponse> Client::ListEntries(const v1::ListEntriesRequest& request) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  v1::ListEntriesResponse response;
  grpc::Status s = stub_->ListEntries(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::StatusOr<v1::ExportBundleResponse> Client::ExportBundle(const v1::ExportBundleRequest& request) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  v1::ExportBundleResponse response;
  grpc::Status s = stub_->ExportBundle(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::Status Client::ExportBundleStream(const v1::ExportBundleRequest& request,
                                        const std::function<absl::Status(const v1::ExportBundleChunk&)>& on_chunk) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  std::unique_ptr<grpc::ClientReader<v1::ExportBundleChunk>> reader = stub_->ExportBundleStream(&context, request);
  v1::ExportBundleChunk chunk;
  while (reader->Read(&chunk)) {
    if (absl::Status s = on_chunk(chunk); !s.ok()) {
      context.TryCancel();
      reader->Finish();
      return s;
    }
  }
  return FromGrpcStatus(reader->Finish(), address_);
}

absl::StatusOr<v1::DeleteEntriesResponse> Client::DeleteEntries(const v1::DeleteEntriesRequest& request) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  v1::DeleteEntriesResponse response;
  grpc::Status s = stub_->DeleteEntries(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s, address_);
  return response;
}

absl::StatusOr<v1::ImportBundleResponse> Client::ImportBundle(std::string bundle) {
  v1::ImportBundleRequest request;
  request.set_bundle(std::move(bundle));
  return ImportBundle(request);
}

absl::StatusOr<v1::ImportBundleResponse> Client::ImportBundle(const v1::ImportBundleRequest& request) {
  v1::ImportBundleResponse response;
  {
    grpc::ClientContext context;
    if (absl::Status s = Prepare(&context); !s.ok()) return s;
    std::unique_ptr<grpc::ClientWriter<v1::ImportBundleRequest>> writer =
        stub_->ImportBundleStream(&context, &response);
    v1::ImportBundleRequest piece;
    piece.set_policy(request.policy());
    piece.set_dry_run(request.dry_run());
    const std::string& bundle = request.bundle();
    for (size_t at = 0; at == 0 || at < bundle.size(); at += size_t{v1::IMPORT_PIECE_BYTES}) {
      piece.set_bundle(bundle.substr(at, size_t{v1::IMPORT_PIECE_BYTES}));
      if (!writer->Write(piece)) break;  // the daemon ended the call (a refusal): Finish says why
    }
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (s.ok()) return response;
    if (s.error_code() != grpc::StatusCode::UNIMPLEMENTED) return FromGrpc(s);
  }
  // A ktuned older than ImportBundleStream.
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  grpc::Status s = stub_->ImportBundle(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::StatusOr<v1::GetStatusResponse> Client::GetStatus() { return GetStatus(v1::GetStatusRequest()); }

absl::StatusOr<v1::GetStatusResponse> Client::GetStatus(const v1::GetStatusRequest& request) {
  grpc::ClientContext context;
  if (absl::Status s = Prepare(&context); !s.ok()) return s;
  v1::GetStatusResponse response;
  grpc::Status s = stub_->GetStatus(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

}  // namespace ktune
