// Server reflection describes every service ktuned serves, the health
// service included, so grpcurl and similar tools work without .proto files.
// The reflection protocol (grpc.reflection.v1alpha) is spoken here by hand on
// a generic stream: Debian ships no generated code for it.
#include <catch2/catch.hpp>
#include <string>

#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/unknown_field_set.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "tests/e2e/daemon_process.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::TempDir;

// ServerReflectionRequest field numbers and ServerReflectionResponse's.
constexpr int kFileContainingSymbol = 4;
constexpr int kFileDescriptorResponse = 4;
constexpr int kErrorResponse = 7;

std::string LengthDelimited(int field, const std::string& bytes) {
  std::string out(1, static_cast<char>((field << 3) | 2));
  for (size_t n = bytes.size();; n >>= 7) {  // varint length
    out.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
    if (n < 0x80) break;
  }
  return out + bytes;
}

// One request and its response on ServerReflectionInfo; false on a transport error.
bool AskReflection(const std::string& address, const std::string& request, std::string* response) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto step = [&cq](int tag) {
    void* got = nullptr;
    bool ok = false;
    return cq.Next(&got, &ok) && ok && got == reinterpret_cast<void*>(static_cast<intptr_t>(tag));
  };
  auto tag = [](int t) { return reinterpret_cast<void*>(static_cast<intptr_t>(t)); };
  call->StartCall(tag(1));
  if (!step(1)) return false;
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, tag(2));
  if (!step(2)) return false;
  call->WritesDone(tag(3));
  if (!step(3)) return false;
  grpc::ByteBuffer in;
  call->Read(&in, tag(4));
  if (!step(4)) return false;
  std::vector<grpc::Slice> slices;
  if (!in.Dump(&slices).ok()) return false;
  response->clear();
  for (const grpc::Slice& s : slices) response->append(reinterpret_cast<const char*>(s.begin()), s.size());
  grpc::Status status;
  call->Finish(&status, tag(5));
  return step(5) && status.ok();
}

// The services of the file descriptors a reflection response carries.
std::vector<std::string> DescribedServices(const std::string& response, std::string* error) {
  google::protobuf::UnknownFieldSet fields;
  REQUIRE(fields.ParseFromString(response));
  std::vector<std::string> services;
  for (int i = 0; i < fields.field_count(); ++i) {
    const google::protobuf::UnknownField& f = fields.field(i);
    if (f.number() == kErrorResponse) *error = f.length_delimited();
    if (f.number() != kFileDescriptorResponse) continue;
    google::protobuf::UnknownFieldSet files;
    REQUIRE(files.ParseFromString(f.length_delimited()));
    for (int j = 0; j < files.field_count(); ++j) {
      google::protobuf::FileDescriptorProto file;
      REQUIRE(file.ParseFromString(files.field(j).length_delimited()));
      for (const auto& service : file.service()) services.push_back(file.package() + "." + service.name());
    }
  }
  return services;
}

TEST_CASE("server reflection describes the health service and ktune's own", "[e2e]") {
  TempDir dir;
  DaemonProcess daemon(dir.path(), dir.path() + "/cache.db");
  REQUIRE(daemon.Start());
  for (const std::string symbol : {"grpc.health.v1.Health", "ktune.v1.KtuneService"}) {
    INFO(symbol);
    std::string response, error;
    REQUIRE(AskReflection(daemon.address(), LengthDelimited(kFileContainingSymbol, symbol), &response));
    const std::vector<std::string> services = DescribedServices(response, &error);
    INFO("reflection error: " << error);
    CHECK(std::find(services.begin(), services.end(), symbol) != services.end());
  }
  CHECK(daemon.Stop() == 0);
}

}  // namespace
}  // namespace ktune
