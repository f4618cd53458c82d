// Listener address checks and the status mapping of the daemon.
#include "daemon/server.h"

#include <catch2/catch.hpp>

#include "daemon/status_mapping.h"

namespace ktune {
namespace {

TEST_CASE("listen addresses are checked before anything binds", "[daemon]") {
  CHECK(ValidateListenAddress("unix:/tmp/k.sock", false).ok());
  CHECK(ValidateListenAddress("127.0.0.1:7070", false).ok());
  CHECK(ValidateListenAddress("localhost:0", false).ok());
  CHECK(ValidateListenAddress("0.0.0.0:7070", true).ok());
  CHECK(ValidateListenAddress("0.0.0.0:7070", false).message().find("TLS") != std::string::npos);
  CHECK(ValidateListenAddress("unix:k.sock", false).message().find("absolute") != std::string::npos);
  CHECK(ValidateListenAddress("unix:/" + std::string(200, 'x'), false).message().find("longer") != std::string::npos);
  CHECK(ValidateListenAddress("127.0.0.1:70000", false).message().find("port") != std::string::npos);
  CHECK(ValidateListenAddress("127.0.0.1:http", false).message().find("port") != std::string::npos);
  CHECK(ValidateListenAddress("nonsense", false).message().find("host:port") != std::string::npos);
}

TEST_CASE("absl status codes map to the same gRPC codes, message kept", "[daemon]") {
  CHECK(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError("problem.m: bad"));
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(s.error_message() == "problem.m: bad");
  CHECK(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(ToGrpcStatus(absl::UnimplementedError("x")).error_code() == grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace ktune
