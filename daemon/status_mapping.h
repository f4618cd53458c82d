// The one place where absl::Status becomes grpc::Status (and back, for the
// client). Codes map one to one; the message is kept verbatim.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace ktune {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ktune
