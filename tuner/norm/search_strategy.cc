#include "tuner/norm/search_strategy.h"

#include <algorithm>

namespace ktune {
namespace {

class GridSearch final : public SearchStrategy {
 public:
  std::string name() const override { return "grid"; }
  std::vector<int> Next(const std::vector<NormConfig>& space, const std::vector<std::optional<double>>&,
                        const std::vector<bool>& measured, double) override {
    std::vector<int> batch;
    for (int i = 0; i < static_cast<int>(space.size()); ++i) {
      if (!measured[i]) batch.push_back(i);
    }
    return batch;
  }
};

class CoordinateDescent final : public SearchStrategy {
 public:
  CoordinateDescent(const NormConfig& seed, SearchBudget budget) : seed_(seed), budget_(budget) {}
  std::string name() const override { return "coordinate-descent"; }

  std::vector<int> Next(const std::vector<NormConfig>& space, const std::vector<std::optional<double>>& measured_us,
                        const std::vector<bool>& measured, double elapsed_s) override {
    const int n = static_cast<int>(space.size());
    if (n == 0) return {};
    int tried = static_cast<int>(std::count(measured.begin(), measured.end(), true));
    if (budget_.max_seconds > 0 && elapsed_s >= budget_.max_seconds) return {};
    const int room = budget_.max_candidates > 0 ? budget_.max_candidates - tried : n;
    if (room <= 0) return {};

    if (current_ < 0) {  // first call: the seed alone
      current_ = 0;
      for (int i = 0; i < n; ++i) {
        if (space[i] == seed_) current_ = i;
      }
      return {current_};
    }
    // Move to the fastest measured config (the seed may have failed).
    int best = -1;
    for (int i = 0; i < n; ++i) {
      if (measured_us[i] && (best < 0 || *measured_us[i] < *measured_us[best])) best = i;
    }
    if (best < 0) {
      // Nothing works yet: try the next untried configs in space order.
      std::vector<int> batch;
      for (int i = 0; i < n && static_cast<int>(batch.size()) < std::min(room, 4); ++i) {
        if (!measured[i]) batch.push_back(i);
      }
      return batch;
    }
    current_ = best;
    std::vector<int> batch;  // the untried neighbours of the best, in space order
    for (int i = 0; i < n && static_cast<int>(batch.size()) < room; ++i) {
      if (!measured[i] && AreNeighbours(space[i], space[current_])) batch.push_back(i);
    }
    return batch;  // empty: a local optimum, the search is done
  }

 private:
  const NormConfig seed_;
  const SearchBudget budget_;
  int current_ = -1;
};

}  // namespace

bool AreNeighbours(const NormConfig& a, const NormConfig& b) {
  const int differences = (a.x_block != b.x_block) + (a.r_block != b.r_block) + (a.num_warps != b.num_warps) +
                          (a.vec != b.vec) + (a.pipeline_depth != b.pipeline_depth) + (a.split_size != b.split_size) +
                          (a.persistent != b.persistent) + (a.reduce_rows != b.reduce_rows) + (a.cluster != b.cluster);
  return differences == 1;
}

std::unique_ptr<SearchStrategy> NewGridSearch() { return std::make_unique<GridSearch>(); }

std::unique_ptr<SearchStrategy> NewCoordinateDescent(const NormConfig& seed, SearchBudget budget) {
  return std::make_unique<CoordinateDescent>(seed, budget);
}

}  // namespace ktune
