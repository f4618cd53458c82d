#include "client/prewarm_progress.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ktune {
namespace {

std::string Duration(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

void PrewarmProgress::OnPlan(int total, const std::vector<PrewarmServerReport>& servers) {
  total_ = total;
  int used = 0;
  for (const PrewarmServerReport& s : servers) {
    if (s.state == PrewarmServerReport::State::kUsed) {
      ++used;
      Line(absl::StrCat("server ", s.address, ": ", s.kind));
    } else {
      Line(absl::StrCat("server ", s.address, ": not used, ", PrewarmServerStateName(s.state), ": ", s.error));
    }
  }
  Line(absl::StrCat("prewarm: ", total, " problem x GPU kind pairs on ", used, " server(s)"));
  DrawBar();
}

void PrewarmProgress::OnTuneStart(const std::string& server, const PrewarmProblem& problem) {
  // The ETA is measured from the first tune: the resume pass before it is
  // quick and would make the rate look better than it is.
  if (!tuning_started_) {
    tuning_started_ = true;
    start_ = Clock::now();
  }
  // Kept short so the bar stays on one line of an ordinary terminal.
  current_ = absl::StrCat(problem.key, " @ ", server);
  if (current_.size() > 80) current_ = current_.substr(0, 77) + "...";
  DrawBar();
}

void PrewarmProgress::OnResult(const PrewarmProblemReport& r) {
  ++done_;
  if (r.outcome == PrewarmOutcome::kTuned || r.outcome == PrewarmOutcome::kFailed) ++worked_;
  const bool notable = r.outcome == PrewarmOutcome::kFailed || r.outcome == PrewarmOutcome::kNotDone;
  if (!terminal_ || notable) {
    std::string line = absl::StrFormat("[%d/%d] %s %s", done_, total_, PrewarmOutcomeName(r.outcome), r.key);
    if (!r.server.empty()) absl::StrAppend(&line, " @ ", r.server);
    if (!r.detail.empty()) absl::StrAppend(&line, " (", r.detail, ")");
    Line(line);
  }
  DrawBar();
}

void PrewarmProgress::OnServerLost(const std::string& server, const std::string& error, int servers_left) {
  Line(absl::StrCat("server ", server, " lost (", error, "); its work goes to ", servers_left,
                    " other server(s) of its GPU kind"));
  DrawBar();
}

void PrewarmProgress::Finish() {
  if (terminal_ && bar_drawn_) std::fprintf(out_, "\n");
  bar_drawn_ = false;
  std::fflush(out_);
}

void PrewarmProgress::Line(const std::string& text) {
  if (terminal_ && bar_drawn_) std::fprintf(out_, "\r\033[K");
  std::fprintf(out_, "%s\n", text.c_str());
  bar_drawn_ = false;
  std::fflush(out_);
}

std::string PrewarmProgress::Eta() const {
  if (worked_ == 0 || done_ >= total_) return "--";
  // Results so far took `elapsed` with every server working; the rest will too.
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  return Duration(elapsed / worked_ * (total_ - done_));
}

void PrewarmProgress::DrawBar() {
  if (!terminal_ || total_ == 0) return;
  constexpr int kWidth = 24;
  const int filled = kWidth * done_ / total_;
  std::string bar(filled, '=');
  bar.resize(kWidth, ' ');
  std::fprintf(out_, "\r\033[K[%s] %d/%d %3d%%  ETA %s  %s", bar.c_str(), done_, total_, 100 * done_ / total_,
               Eta().c_str(), current_.c_str());
  bar_drawn_ = true;
  std::fflush(out_);
}

}  // namespace ktune
