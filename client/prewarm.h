// The prewarm engine: tunes a list of problems on a set of ktuned daemons.
//
// Servers are probed first (GetStatus). Unreachable and compile-only ones are
// reported and not used; the rest are grouped by GPU kind (device name,
// compute capability, SM count), and every problem is tuned once per kind.
// Each usable server gets one thread per GPU it reports (GetStatus.gpus; one
// for an older ktuned), each with its own channel:
//   1. resume: the server's first thread asks CACHED_ONLY for every problem;
//      one server of the kind holding an entry is enough (each daemon has its
//      own database), so threads of a kind wait for each other before tuning
//      anything;
//   2. work: each thread takes problems from its kind's shared queue and
//      tunes them (GetConfig CACHED_ONLY again, then Tune), one at a time, so
//      a daemon of 8 GPUs runs 8 tunes at once.
// A server that stops answering (UNAVAILABLE, CANCELLED, ABORTED, UNKNOWN)
// is dropped and its problem goes back to the queue, so the other servers of
// its kind finish it; with none left, the rest is reported as not done.
// Problem-level answers are outcomes, never a reason to stop: UNIMPLEMENTED
// (an op an older ktuned does not serve) is "not served", other errors are
// that problem's failure.
//
// Thread-safety: Prewarm() is blocking and may be called from any thread;
// observer calls are serialized (one at a time, from the worker threads).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/client.h"
#include "client/prewarm_list.h"

namespace ktune {

enum class PrewarmOutcome {
  kTuned,         // tuned now
  kAlreadyTuned,  // a server of the kind had it (the resume)
  kNotServed,     // the daemon does not serve this op (UNIMPLEMENTED): an older ktuned
  kFailed,        // the daemon refused or failed this problem
  kNotDone,       // every server of the kind was lost before it was tuned
};
const char* PrewarmOutcomeName(PrewarmOutcome outcome);

struct PrewarmServerReport {
  enum class State { kUsed, kUnreachable, kCompileOnly, kNoDevice, kLost };
  std::string address;
  std::string kind;  // its GPU kinds ("A + B" for a daemon of two); "" when it never answered
  State state = State::kUsed;
  std::string error;  // why unreachable / lost / not used
  int gpus = 1;       // tunes sent to it at once (its GPUs)
  std::map<PrewarmOutcome, int> counts;
};
const char* PrewarmServerStateName(PrewarmServerReport::State state);

struct PrewarmProblemReport {
  std::string key;
  std::string kind;
  std::string server;  // "" for not done
  PrewarmOutcome outcome = PrewarmOutcome::kTuned;
  std::string detail;  // the reason for kFailed, kNotDone and kNotServed
};

struct PrewarmReport {
  int problems = 0;                           // in the list
  std::vector<std::string> kinds;             // GPU kinds with at least one usable server
  std::map<PrewarmOutcome, int> counts;       // over problems x kinds
  std::vector<PrewarmServerReport> servers;   // in the order given
  std::vector<PrewarmProblemReport> results;  // every problem x kind
  double seconds = 0;

  int count(PrewarmOutcome o) const {
    auto it = counts.find(o);
    return it == counts.end() ? 0 : it->second;
  }
  // Every problem tuned, already tuned or not served on every kind, and at
  // least one usable server.
  bool complete() const;
};

// Told about progress; see the thread-safety note above.
class PrewarmObserver {
 public:
  virtual ~PrewarmObserver() = default;
  // After probing: `total` = problems x kinds.
  virtual void OnPlan(int total, const std::vector<PrewarmServerReport>& servers) {}
  virtual void OnTuneStart(const std::string& server, const PrewarmProblem& problem) {}
  virtual void OnResult(const PrewarmProblemReport& result) {}
  virtual void OnServerLost(const std::string& server, const std::string& error, int servers_left) {}
};

struct PrewarmOptions {
  double call_timeout_s = 600;  // each GetConfig / Tune call
  double probe_timeout_s = 10;  // GetStatus at the start
  int repetitions = 0;          // TuneOptions.repetitions; 0 = daemon default
  int max_busy_retries = 5;     // RESOURCE_EXHAUSTED (queue full): back off and retry
  // Token and TLS for every server; its timeout_s is replaced by the two above.
  ClientOptions client;
};

// Tunes `problems` on `servers` (addresses as for --server, deduplicated).
// Always returns a report; a server's failure is in the report, not an error.
PrewarmReport Prewarm(const std::vector<PrewarmProblem>& problems, const std::vector<std::string>& servers,
                      const PrewarmOptions& options, PrewarmObserver* observer);

// `--servers a,b,c`: addresses in order, empty items dropped.
std::vector<std::string> SplitServerList(const std::string& text);
// `--servers-file FILE`: one address per line; blank lines and lines starting
// with '#' are skipped. INVALID_ARGUMENT when unreadable or empty.
absl::StatusOr<std::vector<std::string>> ReadServersFile(const std::string& path);

// The report as one JSON document (the --json summary).
std::string PrewarmReportJson(const PrewarmReport& report);

// The GPU kind of a daemon's device: "NAME sm_XY NN SMs".
std::string GpuKind(const v1::DeviceFingerprint& device);

}  // namespace ktune
