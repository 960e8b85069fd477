#include "sim/optimal.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>

#include "policy/rebalancing.hpp"

namespace swarm::sim {

optimum best_assignment(const std::vector<double>& cost, const std::vector<double>& speed) {
  optimum o;
  if (cost.empty() || speed.empty())
    return o;
  const double total_cost = std::accumulate(cost.begin(), cost.end(), 0.0);
  o.fluid = std::accumulate(speed.begin(), speed.end(), 0.0) / total_cost;
  std::vector<double> sorted = speed;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  std::vector<double> cap(cost.size(), 0.0);
  std::vector<policy::server_load> loads;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto k = static_cast<size_t>(std::min_element(cap.begin(), cap.end()) - cap.begin());
    cap[k] += sorted[i] / cost[k];
    policy::server_load l;
    l.id = std::to_string(i);
    l.stage = static_cast<int>(k);
    l.rate = sorted[i] / cost[k];
    loads.push_back(l);
  }
  const auto caps = policy::capacities(cost, loads);
  o.greedy = *std::min_element(caps.begin(), caps.end());
  return o;
}

}  // namespace swarm::sim
