#include "client/client.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace ktune {

absl::Status FromGrpcStatus(const grpc::Status& status, const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(absl::StrCat("cannot reach ktuned at ", address, " (",
                                               status.error_message(), "); is it running?"));
  }
  return absl::Status(code, status.error_message());
}

std::unique_ptr<Client> Client::Create(const std::string& address, double timeout_s) {
  return std::unique_ptr<Client>(new Client(address, timeout_s));
}

Client::Client(std::string address, double timeout_s)
    : address_(std::move(address)), timeout_s_(timeout_s) {
  if (const char* token = std::getenv("KTUNE_TOKEN"); token != nullptr) token_ = token;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  stub_ = v1::KtuneService::NewStub(
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args));
}

void Client::Prepare(grpc::ClientContext* context) const {
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
}

absl::StatusOr<v1::GetConfigResponse> Client::GetConfig(const v1::GetConfigRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetConfigResponse response;
  grpc::Status s = stub_->GetConfig(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s, address_);
  return response;
}

absl::StatusOr<v1::GetConfigResponse> Client::Tune(
    const v1::TuneRequest& request, const std::function<void(const v1::TuneEvent&)>& on_event) {
  grpc::ClientContext context;
  Prepare(&context);
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
  if (!s.ok()) return FromGrpcStatus(s, address_);
  if (!have_result) return absl::InternalError("tune stream ended without a result");
  return result;
}

absl::StatusOr<v1::ListEntriesResponse> Client::ListEntries(const v1::ListEntriesRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListEntriesResponse response;
  grpc::Status s = stub_->ListEntries(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s, address_);
  return response;
}

absl::StatusOr<v1::ExportBundleResponse> Client::ExportBundle(const v1::ExportBundleRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ExportBundleResponse response;
  grpc::Status s = stub_->ExportBundle(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s, address_);
  return response;
}

absl::StatusOr<v1::ImportBundleResponse> Client::ImportBundle(std::string bundle) {
  v1::ImportBundleRequest request;
  request.set_bundle(std::move(bundle));
  return ImportBundle(request);
}

absl::StatusOr<v1::ImportBundleResponse> Client::ImportBundle(const v1::ImportBundleRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ImportBundleResponse response;
  grpc::Status s = stub_->ImportBundle(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s, address_);
  return response;
}

absl::StatusOr<v1::GetStatusResponse> Client::GetStatus() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetStatusResponse response;
  grpc::Status s = stub_->GetStatus(&context, v1::GetStatusRequest(), &response);
  if (!s.ok()) return FromGrpcStatus(s, address_);
  return response;
}

}  // namespace ktune
