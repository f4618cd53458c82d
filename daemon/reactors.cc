#include "daemon/reactors.h"

#include "absl/strings/str_cat.h"
#include "cache/bundle.h"
#include "daemon/status_mapping.h"
#include "grpcpp/impl/codegen/proto_utils.h"

namespace ktune {

// ---------------------------------------------------------------- PendingAnswer

PendingAnswer::PendingAnswer(grpc::ByteBuffer* response, std::function<absl::Status(v1::GetConfigResponse*)> decorate,
                             std::function<void(const absl::Status&)> finished)
    : state_(std::make_shared<State>()) {
  absl::MutexLock lock(&state_->mu);
  state_->reactor = this;
  state_->response = response;
  state_->decorate = std::move(decorate);
  state_->finished_fn = std::move(finished);
}

void PendingAnswer::State::FinishWith(const TuneQueue::Result& result) {
  absl::Status status = result.status();
  v1::GetConfigResponse answer;
  if (result.ok()) {
    answer = *result;
    if (decorate) status = decorate(&answer);
  }
  absl::MutexLock lock(&mu);
  if (finished || reactor == nullptr) return;
  finished = true;
  if (status.ok()) {
    bool own_buffer;
    (void)grpc::SerializationTraits<v1::GetConfigResponse>::Serialize(answer, response, &own_buffer);
  }
  // Before Finish: a caller that has its answer finds it counted.
  if (finished_fn) finished_fn(status);
  reactor->Finish(ToGrpcStatus(status));
}

TuneQueue::DoneFn PendingAnswer::Done() {
  return [state = state_](const TuneQueue::Result& result) { state->FinishWith(result); };
}

void PendingAnswer::Hold(std::unique_ptr<TuneQueue::Ticket> ticket) {
  absl::MutexLock lock(&ticket_mu_);
  ticket_ = std::move(ticket);
}

void PendingAnswer::Fail(const absl::Status& status) { state_->FinishWith(status); }

void PendingAnswer::OnCancel() {
  std::unique_ptr<TuneQueue::Ticket> ticket;
  {
    absl::MutexLock lock(&ticket_mu_);
    ticket = std::move(ticket_);
  }
  ticket.reset();  // leaves the job: dropped if nobody else waits for it
  state_->FinishWith(absl::CancelledError("the client cancelled the call"));
}

void PendingAnswer::OnDone() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->reactor = nullptr;
  }
  delete this;
}

// ---------------------------------------------------------------- TuneStream

TuneStream::TuneStream() : channel_(std::make_shared<Channel>()) {
  absl::MutexLock lock(&channel_->mu);
  channel_->reactor = this;
}

void TuneStream::Channel::PumpLocked() {
  if (reactor == nullptr || writing || finished) return;
  if (broken) queue.clear();
  if (!queue.empty()) {
    current = std::move(queue.front());
    queue.pop_front();
    writing = true;
    reactor->StartWrite(&current);
    return;
  }
  if (closed) {
    finished = true;
    reactor->Finish(ToGrpcStatus(status));
  }
}

void TuneStream::Channel::Push(v1::TuneEvent event) {
  absl::MutexLock lock(&mu);
  if (closed || broken) return;
  queue.push_back(std::move(event));
  PumpLocked();
}

void TuneStream::Channel::Close(const absl::Status& s) {
  absl::MutexLock lock(&mu);
  if (closed) return;
  closed = true;
  status = s;
  PumpLocked();
}

TuneQueue::ProgressFn TuneStream::Progress() {
  return [channel = channel_](const v1::TuneEvent& e) { channel->Push(e); };
}

TuneQueue::DoneFn TuneStream::Done() {
  return [channel = channel_](const TuneQueue::Result& result) {
    if (result.ok()) {
      v1::TuneEvent event;
      *event.mutable_result() = *result;
      channel->Push(std::move(event));
    }
    channel->Close(result.status());
  };
}

void TuneStream::Push(v1::TuneEvent event) { channel_->Push(std::move(event)); }
void TuneStream::Close(const absl::Status& status) { channel_->Close(status); }

void TuneStream::Hold(std::unique_ptr<TuneQueue::Ticket> ticket) {
  absl::MutexLock lock(&ticket_mu_);
  ticket_ = std::move(ticket);
}

void TuneStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&channel_->mu);
  channel_->writing = false;
  if (!ok) channel_->broken = true;
  channel_->PumpLocked();
}

void TuneStream::OnCancel() {
  std::unique_ptr<TuneQueue::Ticket> ticket;
  {
    absl::MutexLock lock(&ticket_mu_);
    ticket = std::move(ticket_);
  }
  ticket.reset();
  {
    absl::MutexLock lock(&channel_->mu);
    channel_->broken = true;
  }
  channel_->Close(absl::CancelledError("the client cancelled the call"));
}

void TuneStream::OnDone() {
  {
    absl::MutexLock lock(&channel_->mu);
    channel_->reactor = nullptr;
  }
  delete this;
}

// ---------------------------------------------------------------- ImportStream

ImportStream::ImportStream(const absl::Status& authorized, v1::ImportBundleResponse* response, ImportFn import)
    : response_(response), import_(std::move(import)) {
  if (!authorized.ok()) {
    Finish(ToGrpcStatus(authorized));
    return;
  }
  StartRead(&piece_);
}

void ImportStream::OnReadDone(bool ok) {
  if (!ok) {  // the client sent its last piece (or went away: then nobody reads the answer)
    absl::StatusOr<v1::ImportBundleResponse> report = import_(whole_);
    if (report.ok()) *response_ = *std::move(report);
    Finish(ToGrpcStatus(report.status()));
    return;
  }
  if (first_) {
    whole_.set_policy(piece_.policy());
    whole_.set_dry_run(piece_.dry_run());
    first_ = false;
  }
  if (whole_.bundle().size() + piece_.bundle().size() > kMaxBundleBytes) {
    Finish(ToGrpcStatus(absl::ResourceExhaustedError(
        absl::StrCat("bundle refused, nothing imported: larger than ", kMaxBundleBytes >> 20, " MiB"))));
    return;
  }
  whole_.mutable_bundle()->append(piece_.bundle());
  StartRead(&piece_);
}

}  // namespace ktune
