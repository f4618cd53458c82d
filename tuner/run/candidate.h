// What became of one candidate of a tune, and who it is across tunes: the
// outcome statuses both tuners report, the one rule that reads a failed
// Verify or Time (which failures are the candidate's, and which of those
// quarantine it), and CandidateId, the name a quarantine is stored under.
// Thread-safe: pure functions.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "tuner/core/launch_recipe.h"

namespace ktune {

enum class CandidateStatus {
  kOk,
  kCompileError,
  kWrongAnswer,
  kLaunchError,
  kFault,        // took its worker down (illegal address, misaligned access, ...)
  kTimeout,      // cut by the watchdog
  kQuarantined,  // faulted or hung before in this environment: not run
  kNotMeasured,  // the search strategy never proposed it
};
std::string CandidateStatusName(CandidateStatus status);

// The identity of a candidate across tunes of one environment: its kernels'
// name expressions (they fix the template instantiation, not the shape), or
// for a cuBLASLt call its algorithm's bytes.
std::string CandidateId(const LaunchRecipe& recipe);

// What a failed Verify or Time (a non-OK status from a CandidateExecutor,
// tuner/run/executor.h) says about the candidate: ABORTED is a fault, and
// DEADLINE_EXCEEDED a hang cut by the watchdog, both the candidate's;
// anything else a launch error. REQUIRES: !s.ok() and !IsUnavailable(s)
// (UNAVAILABLE means the executor itself is gone, which ends a tune: callers
// check it first, see EndsTune).
CandidateStatus StatusOfRunFailure(const absl::Status& s);

// Whether a failed run ends the tune instead of failing the candidate alone.
inline bool EndsTune(const absl::Status& s) { return absl::IsUnavailable(s); }

// "fault" or "timeout" (the reasons a quarantine is stored with) for a
// status that quarantines its candidate; nullptr for every other status.
const char* QuarantineReason(CandidateStatus status);

// Told of a candidate that faulted or hung: `candidate` is its CandidateId,
// `reason` QuarantineReason's, `detail` the error.
using QuarantineFn =
    std::function<void(const std::string& candidate, const std::string& reason, const std::string& detail)>;

// Classifies the failed run of `recipe` (StatusOfRunFailure) and, where that
// quarantines it and `on_quarantine` is set, reports it with `detail`.
// Returns the status. REQUIRES: as StatusOfRunFailure.
CandidateStatus ClassifyRunFailure(const absl::Status& s, const LaunchRecipe& recipe, const QuarantineFn& on_quarantine,
                                   const std::string& detail);

}  // namespace ktune
