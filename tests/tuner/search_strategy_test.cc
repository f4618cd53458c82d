// Search strategies driven over synthetic spaces and cost functions.
#include "tuner/norm/search_strategy.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

namespace ktune {
namespace {

std::vector<NormConfig> Space() {
  std::vector<NormConfig> space;
  for (int warps : {1, 2, 4, 8, 16}) {
    for (int xb : {1, 2, 4, 8}) {
      for (int vec : {2, 4, 8}) {
        NormConfig c;
        c.num_warps = warps;
        c.x_block = xb;
        c.vec = vec;
        c.r_block = 4096;
        space.push_back(c);
      }
    }
  }
  return space;
}

struct Run {
  int measured = 0;
  int rounds = 0;
  int best = -1;
};

// Drives `strategy` to the end with `cost` (nullopt = the candidate fails).
Run Drive(SearchStrategy& strategy, const std::vector<NormConfig>& space,
          const std::function<std::optional<double>(const NormConfig&)>& cost, double seconds_per_candidate = 0) {
  std::vector<std::optional<double>> us(space.size());
  std::vector<bool> measured(space.size(), false);
  Run run;
  double elapsed = 0;
  while (true) {
    std::vector<int> batch = strategy.Next(space, us, measured, elapsed);
    if (batch.empty()) break;
    ++run.rounds;
    for (int i : batch) {
      REQUIRE_FALSE(measured[i]);  // never proposes a candidate twice
      measured[i] = true;
      us[i] = cost(space[i]);
      ++run.measured;
      elapsed += seconds_per_candidate;
    }
    REQUIRE(run.rounds < 1000);
  }
  for (size_t i = 0; i < space.size(); ++i) {
    if (us[i] && (run.best < 0 || *us[i] < *us[run.best])) run.best = static_cast<int>(i);
  }
  return run;
}

// A bowl with its minimum at warps 4, xb 2, vec 8.
std::optional<double> Bowl(const NormConfig& c) {
  return 100 + std::pow(std::log2(c.num_warps) - 2, 2) * 7 + std::pow(std::log2(c.x_block) - 1, 2) * 5 +
         (8 - c.vec) * 3;
}

TEST_CASE("grid search measures everything once", "[tuner][strategy]") {
  const auto space = Space();
  auto grid = NewGridSearch();
  const Run run = Drive(*grid, space, Bowl);
  CHECK(run.measured == static_cast<int>(space.size()));
  CHECK(run.rounds == 1);
  CHECK(space[run.best].num_warps == 4);
}

TEST_CASE("coordinate descent finds the bowl's bottom with a fraction of the grid", "[tuner][strategy]") {
  const auto space = Space();
  NormConfig seed = space.front();  // warps 1, xb 1, vec 2: far from the optimum
  auto descent = NewCoordinateDescent(seed, {});
  const Run run = Drive(*descent, space, Bowl);
  CHECK(space[run.best].num_warps == 4);
  CHECK(space[run.best].x_block == 2);
  CHECK(space[run.best].vec == 8);
  CHECK(run.measured < static_cast<int>(space.size()) / 2);
}

TEST_CASE("coordinate descent keeps to its budget", "[tuner][strategy]") {
  const auto space = Space();
  auto by_count = NewCoordinateDescent(space.front(), SearchBudget{5, 0});
  CHECK(Drive(*by_count, space, Bowl).measured <= 5);
  auto by_time = NewCoordinateDescent(space.front(), SearchBudget{0, 2.5});
  // Each candidate "takes" one second; a batch already started is finished.
  CHECK(Drive(*by_time, space, Bowl, 1.0).measured < 12);
}

TEST_CASE("coordinate descent survives failing candidates and a seed outside the space", "[tuner][strategy]") {
  const auto space = Space();
  NormConfig outside;
  outside.num_warps = 3;  // not in the space: start at the first config
  auto descent = NewCoordinateDescent(outside, {});
  auto fails_small_warps = [](const NormConfig& c) -> std::optional<double> {
    if (c.num_warps < 4) return std::nullopt;
    return Bowl(c);
  };
  const Run run = Drive(*descent, space, fails_small_warps);
  REQUIRE(run.best >= 0);
  CHECK(space[run.best].num_warps == 4);
}

TEST_CASE("neighbours differ in exactly one knob", "[tuner][strategy]") {
  NormConfig a;
  NormConfig b = a;
  CHECK_FALSE(AreNeighbours(a, b));
  b.num_warps = 8;
  CHECK(AreNeighbours(a, b));
  b.vec = 2;
  CHECK_FALSE(AreNeighbours(a, b));
  NormConfig c = a;
  c.persistent = !a.persistent;
  CHECK(AreNeighbours(a, c));
  // Every knob counts: a backward's cluster and reduce rows too.
  NormConfig clustered = a;
  clustered.cluster = 2;
  CHECK(AreNeighbours(a, clustered));
  clustered.vec = 2;
  CHECK_FALSE(AreNeighbours(a, clustered));
  NormConfig reduce = a;
  reduce.reduce_rows = 8;
  CHECK(AreNeighbours(a, reduce));
}

}  // namespace
}  // namespace ktune
