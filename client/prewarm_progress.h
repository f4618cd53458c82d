// Progress of `ktune prewarm` on stderr: a redrawn progress bar (done/total,
// percent, ETA, the problem last started) when stderr is a terminal, one
// plain line per finished problem otherwise (logs, CI, batch jobs). Servers
// that are skipped or lost get a line in both modes.
// Thread-safety: as a PrewarmObserver, called one at a time by the engine;
// not for use from several threads on its own.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "client/prewarm.h"

namespace ktune {

class PrewarmProgress final : public PrewarmObserver {
 public:
  // `out` is not owned. `terminal` selects the redrawn bar.
  PrewarmProgress(FILE* out, bool terminal) : out_(out), terminal_(terminal) {}

  void OnPlan(int total, const std::vector<PrewarmServerReport>& servers) override;
  void OnTuneStart(const std::string& server, const PrewarmProblem& problem) override;
  void OnResult(const PrewarmProblemReport& result) override;
  void OnServerLost(const std::string& server, const std::string& error, int servers_left) override;

  // Ends the bar's line; call once after Prewarm returns.
  void Finish();

 private:
  using Clock = std::chrono::steady_clock;
  // A message on a line of its own, keeping the bar below it.
  void Line(const std::string& text);
  void DrawBar();
  std::string Eta() const;

  FILE* const out_;
  const bool terminal_;
  int total_ = 0;
  int done_ = 0;
  int worked_ = 0;  // results that took a tune (tuned or failed), for the ETA
  bool tuning_started_ = false;
  Clock::time_point start_ = Clock::now();  // of the first tune
  std::string current_;
  bool bar_drawn_ = false;
};

}  // namespace ktune
