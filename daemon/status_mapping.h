// The one place where the daemon's absl::Status becomes grpc::Status (the
// client maps back in client/client.cc). Codes map one to one; the message is
// kept verbatim.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace ktune {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ktune
