// gRPC callback reactors for calls answered by a tuning job, which may finish
// after the client has gone. The job's callbacks hold a shared_ptr to the
// call's state, never the reactor itself: once gRPC is done with the call
// (OnDone) the state forgets the reactor and late events are dropped.
#pragma once

#include <deque>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tune_queue.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune {

// A unary GetConfig waiting for a tune. Finishes exactly once: with the job's
// answer (serialized into the call's raw response), or CANCELLED when the client goes away first (which also leaves the
// job, so an abandoned tune is dropped).
class PendingAnswer final : public grpc::ServerUnaryReactor {
 public:
  // `decorate` (may be null) runs on a successful answer before it is sent,
  // outside any lock (e.g. to attach the cubin). `finished` (may be null) is
  // called once with the status the call ends with, when it ends (e.g. to
  // count what was answered).
  PendingAnswer(grpc::ByteBuffer* response, std::function<absl::Status(v1::GetConfigResponse*)> decorate,
                std::function<void(const absl::Status&)> finished = nullptr);

  // The callback to give TuneQueue::Join as `done`.
  TuneQueue::DoneFn Done();
  // Holds the caller's place in the job until the call ends.
  void Hold(std::unique_ptr<TuneQueue::Ticket> ticket);
  // Ends the call now (e.g. the job could not be joined).
  void Fail(const absl::Status& status);

  void OnCancel() override;
  void OnDone() override;

 private:
  struct State {
    absl::Mutex mu;
    PendingAnswer* reactor ABSL_GUARDED_BY(mu);
    grpc::ByteBuffer* response ABSL_GUARDED_BY(mu);
    bool finished ABSL_GUARDED_BY(mu) = false;
    std::function<absl::Status(v1::GetConfigResponse*)> decorate;
    std::function<void(const absl::Status&)> finished_fn;
    void FinishWith(const TuneQueue::Result& result);
  };
  std::shared_ptr<State> state_;
  absl::Mutex ticket_mu_;
  std::unique_ptr<TuneQueue::Ticket> ticket_ ABSL_GUARDED_BY(ticket_mu_);
};

// A Tune stream: events are queued by the tuning job and written one at a
// time (gRPC allows one outstanding write); Close ends the call after the
// last event. A client that goes away leaves the job.
class TuneStream final : public grpc::ServerWriteReactor<v1::TuneEvent> {
 public:
  TuneStream();

  // Thread-safe senders, valid after the call has ended (they then drop).
  TuneQueue::ProgressFn Progress();
  // Sends the result (when ok) and ends the call with the status.
  TuneQueue::DoneFn Done();
  void Push(v1::TuneEvent event);
  void Close(const absl::Status& status);

  void Hold(std::unique_ptr<TuneQueue::Ticket> ticket);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Channel {
    absl::Mutex mu;
    TuneStream* reactor ABSL_GUARDED_BY(mu);
    std::deque<v1::TuneEvent> queue ABSL_GUARDED_BY(mu);
    v1::TuneEvent current ABSL_GUARDED_BY(mu);  // alive until its write completes
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool closed ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool broken ABSL_GUARDED_BY(mu) = false;  // the client went away
    absl::Status status ABSL_GUARDED_BY(mu);
    void Push(v1::TuneEvent event);
    void Close(const absl::Status& s);
    void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };
  std::shared_ptr<Channel> channel_;
  absl::Mutex ticket_mu_;
  std::unique_ptr<TuneQueue::Ticket> ticket_ ABSL_GUARDED_BY(ticket_mu_);
};

// An ImportBundleStream call. Nothing is read before `authorized` is known OK
// (an unauthorised caller's pieces stay unread, and the call ends with that
// status); pieces are gathered up to kMaxBundleBytes (past it the call ends
// RESOURCE_EXHAUSTED) and, once the client has sent the last, the whole
// bundle goes to `import`, whose answer ends the call. Deletes itself.
class ImportStream final : public grpc::ServerReadReactor<v1::ImportBundleRequest> {
 public:
  using ImportFn = std::function<absl::StatusOr<v1::ImportBundleResponse>(const v1::ImportBundleRequest&)>;
  ImportStream(const absl::Status& authorized, v1::ImportBundleResponse* response, ImportFn import);

  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  v1::ImportBundleResponse* const response_;
  const ImportFn import_;
  v1::ImportBundleRequest piece_;  // the read in flight
  v1::ImportBundleRequest whole_;  // policy and dry_run of the first piece, every piece's bytes
  bool first_ = true;
};

}  // namespace ktune
