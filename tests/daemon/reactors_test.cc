// PendingAnswer, the reactor of a GetConfig that waits for a tune, driven
// without a server: gRPC lets a reactor Finish before it is bound to a call
// (the finish is kept until then), so the contract can be checked directly.
// The call ends exactly once, with the first of the tune's answer, a failure
// or the client's cancel; a tune that finishes after gRPC is done with the
// call (OnDone deleted the reactor) is dropped.
#include "daemon/reactors.h"

#include <catch2/catch.hpp>
#include <vector>

#include "grpcpp/impl/codegen/proto_utils.h"

namespace ktune {
namespace {

v1::GetConfigResponse TunedAnswer() {
  v1::GetConfigResponse answer;
  answer.set_source(v1::TUNED);
  answer.mutable_measurement()->set_time_us(12.5);
  return answer;
}

v1::GetConfigResponse Decoded(grpc::ByteBuffer* bytes) {
  v1::GetConfigResponse answer;
  REQUIRE(grpc::SerializationTraits<v1::GetConfigResponse>::Deserialize(bytes, &answer).ok());
  return answer;
}

TEST_CASE("a pending answer sends the tune's answer, decorated, and ends the call once", "[daemon]") {
  grpc::ByteBuffer response;
  std::vector<absl::Status> ended;
  auto* pending = new PendingAnswer(
      &response,
      [](v1::GetConfigResponse* r) {
        r->mutable_recipe()->set_cubin("code");
        return absl::OkStatus();
      },
      [&](const absl::Status& s) { ended.push_back(s); });
  TuneQueue::DoneFn done = pending->Done();
  done(TunedAnswer());
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].ok());
  const v1::GetConfigResponse sent = Decoded(&response);
  CHECK(sent.source() == v1::TUNED);
  CHECK(sent.measurement().time_us() == 12.5);
  CHECK(sent.recipe().cubin() == "code");  // decorated before it was sent
  // Whatever comes after is dropped: a second answer, a failure, a cancel.
  done(absl::InternalError("late"));
  pending->Fail(absl::UnavailableError("later"));
  pending->OnCancel();
  CHECK(ended.size() == 1);
  pending->OnDone();    // gRPC is done with the call: deletes the reactor
  done(TunedAnswer());  // a tune finishing now finds no call, and no crash
  CHECK(ended.size() == 1);
}

TEST_CASE("a pending answer ends CANCELLED when the client leaves first, and the tune's answer is dropped",
          "[daemon]") {
  grpc::ByteBuffer response;
  std::vector<absl::Status> ended;
  auto* pending = new PendingAnswer(&response, nullptr, [&](const absl::Status& s) { ended.push_back(s); });
  TuneQueue::DoneFn done = pending->Done();
  pending->OnCancel();
  REQUIRE(ended.size() == 1);
  CHECK(absl::IsCancelled(ended[0]));
  done(TunedAnswer());
  CHECK(ended.size() == 1);
  CHECK(response.Length() == 0);  // nothing was written
  pending->OnDone();
}

TEST_CASE("a pending answer whose decoration fails ends with that error and sends nothing", "[daemon]") {
  grpc::ByteBuffer response;
  std::vector<absl::Status> ended;
  auto* pending = new PendingAnswer(
      &response, [](v1::GetConfigResponse*) { return absl::InternalError("the cubin did not compile"); },
      [&](const absl::Status& s) { ended.push_back(s); });
  pending->Done()(TunedAnswer());
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].message() == "the cubin did not compile");
  CHECK(response.Length() == 0);
  pending->OnDone();
}

TEST_CASE("a pending answer passes a tune's refusal on as the call's status", "[daemon]") {
  grpc::ByteBuffer response;
  std::vector<absl::Status> ended;
  auto* pending = new PendingAnswer(&response, nullptr, [&](const absl::Status& s) { ended.push_back(s); });
  pending->Fail(absl::ResourceExhaustedError("the tune queue is full"));
  REQUIRE(ended.size() == 1);
  CHECK(absl::IsResourceExhausted(ended[0]));
  CHECK(response.Length() == 0);
  pending->OnDone();
}

}  // namespace
}  // namespace ktune
