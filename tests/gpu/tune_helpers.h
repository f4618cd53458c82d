// Shared by the [gpu] tuning tests: short measurement options (the tests
// check correctness, not speed) and a readable list of failed candidates.
#pragma once

#include <string>

#include "tuner/norm/norm_tuner.h"

namespace ktune::testing {

inline TuneOptions QuickOptions() {
  TuneOptions o;
  o.measure.warmup = 3;
  o.measure.repetitions = 20;
  o.remeasure_top = 2;
  return o;
}

// One line per candidate that did not pass, for a failing CHECK's message.
inline std::string Failures(const TuneResult& r) {
  std::string out;
  for (const CandidateOutcome& o : r.outcomes) {
    if (o.status != CandidateStatus::kOk) {
      out += ToString(o.config) + ": " + CandidateStatusName(o.status) + ": " + o.detail.substr(0, 400) + "\n";
    }
  }
  return out;
}

}  // namespace ktune::testing
