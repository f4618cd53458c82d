// Which candidates a tune measures, in what order, and when it stops.
//
// A strategy proposes batches of indices into the (pruned) search space; the
// tuner compiles, verifies and times each batch and reports the times back
// (nullopt for a candidate that failed). Compiling is most of a cold tune's
// cost, so a strategy that proposes fewer candidates saves real time.
//   - GridSearch: every candidate, one batch (the reference).
//   - CoordinateDescent: starts at a seed config (the heuristic) and moves to
//     the best neighbour (configs that differ in exactly one knob) until no
//     neighbour is faster or the budget is spent.
// Thread-compatible.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tuner/core/norm_config.h"

namespace ktune {

// Limits on how much a strategy may measure. 0 = unlimited.
struct SearchBudget {
  int max_candidates = 0;
  double max_seconds = 0;
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string name() const = 0;

  // The next candidates to measure (indices into `space`, none measured
  // before), or empty when the search is done. `measured_us[i]` is the
  // median time of candidate i, nullopt if it failed or was not measured;
  // `measured[i]` says whether it was tried. `elapsed_s` is the tune's time so far.
  virtual std::vector<int> Next(const std::vector<NormConfig>& space,
                                const std::vector<std::optional<double>>& measured_us,
                                const std::vector<bool>& measured, double elapsed_s) = 0;
};

std::unique_ptr<SearchStrategy> NewGridSearch();
// `seed` is where the descent starts (its index in the space, or the first
// config when it is not in the space).
std::unique_ptr<SearchStrategy> NewCoordinateDescent(const NormConfig& seed, SearchBudget budget);

// Two configs are neighbours when exactly one knob differs.
bool AreNeighbours(const NormConfig& a, const NormConfig& b);

}  // namespace ktune
