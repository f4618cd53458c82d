#include "client/prewarm.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "nlohmann/json.hpp"
#include "tuner/core/input_file.h"

namespace ktune {

const char* PrewarmOutcomeName(PrewarmOutcome outcome) {
  switch (outcome) {
    case PrewarmOutcome::kTuned:
      return "tuned";
    case PrewarmOutcome::kAlreadyTuned:
      return "skipped_already";
    case PrewarmOutcome::kNotServed:
      return "not_served";
    case PrewarmOutcome::kFailed:
      return "failed";
    case PrewarmOutcome::kNotDone:
      return "not_done";
  }
  return "?";
}

const char* PrewarmServerStateName(PrewarmServerReport::State state) {
  using S = PrewarmServerReport::State;
  switch (state) {
    case S::kUsed:
      return "used";
    case S::kUnreachable:
      return "unreachable";
    case S::kCompileOnly:
      return "compile_only";
    case S::kNoDevice:
      return "no_device";
    case S::kLost:
      return "lost";
  }
  return "?";
}

bool PrewarmReport::complete() const {
  return !kinds.empty() && count(PrewarmOutcome::kFailed) == 0 && count(PrewarmOutcome::kNotDone) == 0;
}

std::string GpuKind(const v1::DeviceFingerprint& d) {
  return absl::StrFormat("%s sm_%d%d %d SMs", d.name(), d.cc_major(), d.cc_minor(), d.sm_count());
}

namespace {

// The server, not the problem, is at fault: try the problem elsewhere.
// DEADLINE_EXCEEDED is not among these: a tune longer than --timeout would
// time out on every server, and should fail once, not take them all down.
bool IsServerLoss(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsCancelled(s) || absl::IsAborted(s) || absl::IsUnknown(s);
}

std::string StatusText(const absl::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
}

// One GPU kind of one server: its GpuKind text, the device name a request
// picks it by (v1::DeviceSelector), and how many of the server's GPUs it is.
struct ServerKind {
  std::string name;
  std::string device_name;
  int gpus = 1;
};

// A server's kinds, from its status: one per GPU kind of GetStatusResponse.gpus
// in ordinal order, or its one device (a ktuned before that field).
std::vector<ServerKind> KindsOfServer(const v1::GetStatusResponse& status) {
  std::vector<ServerKind> kinds;
  for (const v1::GpuStatus& gpu : status.gpus()) {
    const std::string name = GpuKind(gpu.device());
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const ServerKind& k) { return k.name == name; });
    if (it != kinds.end()) {
      ++it->gpus;
    } else {
      kinds.push_back({name, gpu.device().name(), 1});
    }
  }
  if (kinds.empty()) kinds.push_back({GpuKind(status.devices(0)), status.devices(0).name(), 1});
  return kinds;
}

// One GPU kind's share of the run.
struct KindState {
  std::string name;
  std::string device_name;     // what requests of this kind pick it by
  std::vector<int> servers;    // indexes into the report's servers
  std::vector<int> gpus;       // per item of `servers`: its GPUs of this kind
  int checking = 0;            // servers still in the resume pass
  int in_flight = 0;           // problems being tuned now
  int live = 0;                // servers not lost
  std::vector<bool> finished;  // per problem: an outcome is recorded
  std::deque<size_t> queue;    // problems to tune, built when checking hits 0
  std::string last_loss;

  static bool ResumeDone(KindState* k) { return k->checking == 0; }
  static bool WorkOrEnd(KindState* k) { return !k->queue.empty() || k->in_flight == 0; }
};

class PrewarmRun {
 public:
  PrewarmRun(const std::vector<PrewarmProblem>& problems, const PrewarmOptions& options, PrewarmObserver* observer)
      : problems_(problems), options_(options), observer_(observer) {}

  PrewarmReport Execute(const std::vector<std::string>& addresses) {
    const auto start = std::chrono::steady_clock::now();
    Probe(addresses);
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      report_.problems = static_cast<int>(problems_.size());
      for (const KindState& k : kinds_) report_.kinds.push_back(k.name);
      if (observer_ != nullptr) {
        observer_->OnPlan(static_cast<int>(problems_.size() * kinds_.size()), report_.servers);
      }
      for (size_t k = 0; k < kinds_.size(); ++k) {
        // A daemon tunes on each of its GPUs at once: one call per GPU of the kind.
        for (size_t j = 0; j < kinds_[k].servers.size(); ++j) {
          const int s = kinds_[k].servers[j];
          for (int slot = 0; slot < kinds_[k].gpus[j]; ++slot) {
            threads.emplace_back([this, k, s, slot] { Serve(k, s, slot); });
          }
        }
      }
    }
    for (std::thread& t : threads) t.join();
    absl::MutexLock lock(&mu_);
    for (KindState& kind : kinds_) {
      for (size_t i = 0; i < problems_.size(); ++i) {
        if (kind.finished[i]) continue;
        Record(kind, i, "", PrewarmOutcome::kNotDone,
               absl::StrCat("every server of this GPU kind was lost (last: ", kind.last_loss, ")"));
      }
    }
    report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  }

 private:
  ClientOptions ClientFor(double timeout_s) const {
    ClientOptions client = options_.client;
    client.timeout_s = timeout_s;
    return client;
  }

  // GetStatus on every server at once; groups the usable ones by kind (a
  // server of two GPU kinds is a server of each).
  void Probe(const std::vector<std::string>& addresses) {
    std::vector<PrewarmServerReport> servers(addresses.size());
    std::vector<std::vector<ServerKind>> server_kinds(addresses.size());
    std::vector<std::thread> probes;
    for (size_t i = 0; i < addresses.size(); ++i) {
      probes.emplace_back([&, i] {
        PrewarmServerReport& r = servers[i];
        r.address = addresses[i];
        absl::StatusOr<v1::GetStatusResponse> status =
            Client::Create(r.address, ClientFor(options_.probe_timeout_s))->GetStatus();
        if (!status.ok()) {
          r.state = PrewarmServerReport::State::kUnreachable;
          r.error = StatusText(status.status());
        } else if (status->compile_only()) {
          r.state = PrewarmServerReport::State::kCompileOnly;
          r.error = absl::StrCat("compile-only (", status->compile_only_reason(), "): cannot tune");
        } else if (status->devices().empty()) {
          r.state = PrewarmServerReport::State::kNoDevice;
          r.error = "reports no GPU";
        } else {
          server_kinds[i] = KindsOfServer(*status);
          r.gpus = 0;
          for (const ServerKind& k : server_kinds[i]) {
            absl::StrAppend(&r.kind, r.kind.empty() ? "" : " + ", k.name);
            r.gpus += k.gpus;
          }
        }
      });
    }
    for (std::thread& t : probes) t.join();
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < servers.size(); ++i) {
      if (servers[i].state != PrewarmServerReport::State::kUsed) continue;
      for (const ServerKind& server_kind : server_kinds[i]) {
        auto it =
            std::find_if(kinds_.begin(), kinds_.end(), [&](const KindState& k) { return k.name == server_kind.name; });
        if (it == kinds_.end()) {
          kinds_.emplace_back();
          it = std::prev(kinds_.end());
          it->name = server_kind.name;
          it->device_name = server_kind.device_name;
          it->finished.assign(problems_.size(), false);
        }
        it->servers.push_back(static_cast<int>(i));
        it->gpus.push_back(server_kind.gpus);
        ++it->checking;
        ++it->live;
      }
    }
    report_.servers = std::move(servers);
  }

  // One of a server's threads (one per GPU, `slot`): the resume pass (slot
  // 0 alone), then problems from its kind's queue.
  void Serve(size_t k, int server, int slot) {
    std::string address;
    {
      absl::MutexLock lock(&mu_);
      address = report_.servers[server].address;
    }
    std::unique_ptr<Client> client = Client::Create(address, ClientFor(options_.call_timeout_s));
    {
      absl::Status lost = slot == 0 ? Resume(k, server, client.get()) : absl::OkStatus();
      absl::MutexLock lock(&mu_);
      KindState& kind = kinds_[k];
      if (slot == 0 && --kind.checking == 0) {
        for (size_t i = 0; i < problems_.size(); ++i) {
          if (!kind.finished[i]) kind.queue.push_back(i);
        }
      }
      if (!lost.ok()) return Lose(kind, server, lost);
      mu_.Await(absl::Condition(&KindState::ResumeDone, &kind));
    }
    while (true) {
      size_t i = 0;
      {
        absl::MutexLock lock(&mu_);
        KindState& kind = kinds_[k];
        mu_.Await(absl::Condition(&KindState::WorkOrEnd, &kind));
        // Another thread of this server lost it: so is this one.
        if (report_.servers[server].state == PrewarmServerReport::State::kLost) return;
        if (kind.queue.empty()) return;
        i = kind.queue.front();
        kind.queue.pop_front();
        ++kind.in_flight;
        if (observer_ != nullptr) observer_->OnTuneStart(address, problems_[i]);
      }
      PrewarmOutcome outcome = PrewarmOutcome::kTuned;
      std::string detail;
      absl::Status status = TuneOne(client.get(), problems_[i], Selector(k), &outcome, &detail);
      absl::MutexLock lock(&mu_);
      KindState& kind = kinds_[k];
      --kind.in_flight;
      if (!status.ok()) {
        // Back to the front, so the next server of the kind takes it first.
        kind.queue.push_front(i);
        return Lose(kind, server, status);
      }
      Record(kind, i, address, outcome, detail);
    }
  }

  // Asks the server for every problem not yet known to be done on this kind;
  // a loss status when the server stops answering.
  absl::Status Resume(size_t k, int server, Client* client) {
    for (size_t i = 0; i < problems_.size(); ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (kinds_[k].finished[i]) continue;
      }
      v1::GetConfigRequest request;
      *request.mutable_problem() = problems_[i].problem;
      request.set_policy(v1::CACHED_ONLY);
      *request.mutable_device() = Selector(k);
      absl::StatusOr<v1::GetConfigResponse> r = client->GetConfig(request);
      if (!r.ok() && IsServerLoss(r.status())) return r.status();
      absl::MutexLock lock(&mu_);
      KindState& kind = kinds_[k];
      if (kind.finished[i]) continue;
      if (r.ok() && r->source() == v1::TUNED) {
        Record(kind, i, report_.servers[server].address, PrewarmOutcome::kAlreadyTuned, "");
      } else if (!r.ok() && absl::IsUnimplemented(r.status())) {
        Record(kind, i, report_.servers[server].address, PrewarmOutcome::kNotServed, std::string(r.status().message()));
      }
      // NOT_FOUND is the work to do; other errors are reported when it is tried.
    }
    return absl::OkStatus();
  }

  // Tunes one problem. OK with the outcome set, or the status that lost the
  // server (the problem is then not done).
  absl::Status TuneOne(Client* client, const PrewarmProblem& problem, const v1::DeviceSelector& device,
                       PrewarmOutcome* outcome, std::string* detail) {
    // Asked again: another prewarm, or a compiler's background tune, may have
    // stored it since the resume pass.
    v1::GetConfigRequest get;
    *get.mutable_problem() = problem.problem;
    get.set_policy(v1::CACHED_ONLY);
    *get.mutable_device() = device;
    absl::StatusOr<v1::GetConfigResponse> cached = client->GetConfig(get);
    if (cached.ok() && cached->source() == v1::TUNED) {
      *outcome = PrewarmOutcome::kAlreadyTuned;
      return absl::OkStatus();
    }
    absl::Status status = cached.status();
    if (status.ok() || absl::IsNotFound(status)) {
      v1::TuneRequest tune;
      *tune.mutable_problem() = problem.problem;
      *tune.mutable_device() = device;
      tune.mutable_options()->set_repetitions(options_.repetitions);
      for (int attempt = 0;; ++attempt) {
        absl::StatusOr<v1::GetConfigResponse> tuned = client->Tune(tune, nullptr);
        status = tuned.status();
        if (tuned.ok()) {
          *outcome = PrewarmOutcome::kTuned;
          *detail = absl::StrFormat("%.2f us", tuned->measurement().time_us());
          return absl::OkStatus();
        }
        if (!absl::IsResourceExhausted(status) || attempt >= options_.max_busy_retries) break;
        // The daemon's queue is full (other callers): wait for room.
        std::this_thread::sleep_for(std::chrono::seconds(std::min(1 << attempt, 30)));
      }
    }
    if (IsServerLoss(status)) return status;
    *outcome = absl::IsUnimplemented(status) ? PrewarmOutcome::kNotServed : PrewarmOutcome::kFailed;
    *detail = absl::IsUnimplemented(status) ? std::string(status.message()) : StatusText(status);
    return absl::OkStatus();
  }

  // Which kind a request is for: the server's GPUs of kinds_[k], by their
  // device name (a ktuned before DeviceSelector ignores it and has one kind).
  v1::DeviceSelector Selector(size_t k) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    v1::DeviceSelector device;
    device.set_name(kinds_[k].device_name);
    return device;
  }

  // Once per server, whichever of its threads sees the loss first; the
  // server is lost to every kind it has.
  void Lose(KindState& kind, int server, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PrewarmServerReport& r = report_.servers[server];
    if (r.state == PrewarmServerReport::State::kLost) return;
    r.state = PrewarmServerReport::State::kLost;
    r.error = StatusText(status);
    for (KindState& k : kinds_) {
      if (std::find(k.servers.begin(), k.servers.end(), server) == k.servers.end()) continue;
      k.last_loss = absl::StrCat(r.address, ": ", r.error);
      --k.live;
    }
    if (observer_ != nullptr) observer_->OnServerLost(r.address, r.error, kind.live);
  }

  void Record(KindState& kind, size_t i, const std::string& server, PrewarmOutcome outcome, std::string detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    kind.finished[i] = true;
    PrewarmProblemReport result{problems_[i].key, kind.name, server, outcome, std::move(detail)};
    ++report_.counts[outcome];
    for (PrewarmServerReport& s : report_.servers) {
      if (!server.empty() && s.address == server) ++s.counts[outcome];
    }
    if (observer_ != nullptr) observer_->OnResult(result);
    report_.results.push_back(std::move(result));
  }

  const std::vector<PrewarmProblem>& problems_;
  const PrewarmOptions options_;
  absl::Mutex mu_;
  PrewarmObserver* const observer_ ABSL_PT_GUARDED_BY(mu_);
  std::vector<KindState> kinds_ ABSL_GUARDED_BY(mu_);  // sized by Probe, before any worker runs
  PrewarmReport report_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

PrewarmReport Prewarm(const std::vector<PrewarmProblem>& problems, const std::vector<std::string>& servers,
                      const PrewarmOptions& options, PrewarmObserver* observer) {
  std::vector<std::string> unique;
  for (const std::string& s : servers) {
    if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(s);
  }
  return PrewarmRun(problems, options, observer).Execute(unique);
}

std::vector<std::string> SplitServerList(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadServersFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadInputFile(path, kServersFile);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat("--servers-file: ", text.status().message()));
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    absl::string_view address = absl::StripAsciiWhitespace(line);
    if (address.empty() || address.front() == '#') continue;
    out.emplace_back(address);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--servers-file: ", path, " lists no server"));
  return out;
}

std::string PrewarmReportJson(const PrewarmReport& report) {
  using Json = nlohmann::ordered_json;
  constexpr PrewarmOutcome kAll[] = {PrewarmOutcome::kTuned, PrewarmOutcome::kAlreadyTuned, PrewarmOutcome::kNotServed,
                                     PrewarmOutcome::kFailed, PrewarmOutcome::kNotDone};
  Json j;
  j["complete"] = report.complete();
  j["problems"] = report.problems;
  j["gpu_kinds"] = report.kinds;
  j["total"] = report.problems * static_cast<int>(report.kinds.size());
  for (PrewarmOutcome o : kAll) j[PrewarmOutcomeName(o)] = report.count(o);
  j["seconds"] = report.seconds;
  Json servers = Json::array();
  for (const PrewarmServerReport& s : report.servers) {
    Json js;
    js["address"] = s.address;
    js["gpu_kind"] = s.kind;
    js["state"] = PrewarmServerStateName(s.state);
    js["error"] = s.error;
    for (PrewarmOutcome o : kAll) {
      auto it = s.counts.find(o);
      if (o != PrewarmOutcome::kNotDone) js[PrewarmOutcomeName(o)] = it == s.counts.end() ? 0 : it->second;
    }
    servers.push_back(js);
  }
  j["servers"] = servers;
  Json failures = Json::array();
  std::vector<std::string> not_served;
  for (const PrewarmProblemReport& r : report.results) {
    if (r.outcome == PrewarmOutcome::kNotServed) {
      if (std::find(not_served.begin(), not_served.end(), r.key) == not_served.end()) not_served.push_back(r.key);
    }
    if (r.outcome != PrewarmOutcome::kFailed && r.outcome != PrewarmOutcome::kNotDone) continue;
    failures.push_back(Json{{"problem", r.key},
                            {"gpu_kind", r.kind},
                            {"server", r.server},
                            {"outcome", PrewarmOutcomeName(r.outcome)},
                            {"reason", r.detail}});
  }
  j["failures"] = failures;
  j["not_served_problems"] = not_served;
  return j.dump(2);
}

}  // namespace ktune
