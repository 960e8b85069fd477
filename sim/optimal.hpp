#pragma once
// The throughput the best assignment of live peers to stages would give, the
// yardstick of swarm-sim's "share of optimal". Pure, tested in test_core.
//
// Same model as the rebalancer (policy/rebalancing): a stage's capacity
// is the sum of its servers' rates, a peer's rate on stage s is its speed over
// the stage's cost, the pipeline runs at its slowest stage. Assigning peers to
// maximise the slowest stage is bin covering (NP-hard), so this takes the
// greedy answer (fastest peer first, each to the stage with the least
// capacity), evaluated with policy::capacities, and a fluid bound above it
// (work split perfectly: total speed over total cost).

#include <vector>

namespace swarm::sim {

struct optimum {
  double greedy = 0;  ///< samples/s of the greedy assignment's slowest stage (0 when a stage stays empty)
  double fluid = 0;   ///< samples/s upper bound: sum of speeds / sum of costs
};

/// `cost`: work per sample of each stage (> 0); `speed`: each live peer's work per second.
[[nodiscard]] optimum best_assignment(const std::vector<double>& cost, const std::vector<double>& speed);

}  // namespace swarm::sim
