#pragma once
// What the routing tests share: a router with measured servers, and how often
// it chooses each in a row of forward choices.

#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "policy/routing.hpp"

namespace swarm::testing::routing_helpers {

// The routing policy's names, for the files that use these helpers.
using swarm::policy::routing_config;
using swarm::policy::stage_router;
using swarm::policy::static_pin;
using swarm::policy::throughput_ema;

/// A router with these servers at `now` = 0, each measured at the given rate
/// (samples per second) by one 10-sample request; rate 0 leaves it unmeasured.
inline stage_router make_router(const std::vector<std::pair<std::string, double>>& servers, routing_config cfg = {}) {
  stage_router r(cfg);
  for (const auto& [id, rate] : servers) {
    r.add(id, 0.0);
    if (rate > 0)
      r.on_success(id, 10.0, false, 10.0 / rate);
  }
  return r;
}

/// How many times each server is chosen in `n` forward choices of 1 sample,
/// each over (released) before the next.
inline std::map<std::string, int> count_choices(stage_router& r, int n, std::mt19937_64& rng, double now = 0.0) {
  std::map<std::string, int> counts;
  for (int i = 0; i < n; ++i) {
    const auto id = r.choose(1.0, false, now, rng);
    REQUIRE(id);
    r.release(*id);
    ++counts[*id];
  }
  return counts;
}

}  // namespace swarm::testing::routing_helpers
