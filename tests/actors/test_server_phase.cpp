// Tier (a): the stage server's phases (actors/stage_server_phase.hpp): every
// (phase, event) pair against the diagram, so a transition added in code and
// not in the diagram (or the other way round) fails here.
#include <catch2/catch.hpp>

#include <map>
#include <utility>

#include "actors/stage_server_phase.hpp"

using namespace swarm;
using p = server_phase;
using e = phase_event;

TEST_CASE("stage server phases: the diagram's arrows and no others", "[actors]") {
  const std::map<std::pair<p, e>, p> arrows = {
      {{p::starting, e::registered}, p::serving},    {{p::serving, e::registered}, p::serving},
      {{p::draining, e::registered}, p::draining},   {{p::moving, e::registered}, p::moving},
      {{p::stopping, e::registered}, p::stopping},   {{p::serving, e::move_ordered}, p::draining},
      {{p::draining, e::move_ordered}, p::draining}, {{p::draining, e::drained}, p::moving},
      {{p::moving, e::moved}, p::serving},           {{p::starting, e::stop_asked}, p::stopping},
      {{p::serving, e::stop_asked}, p::stopping},    {{p::draining, e::stop_asked}, p::stopping},
      {{p::stopping, e::stop_asked}, p::stopping},
  };
  for (auto from : {p::starting, p::serving, p::draining, p::moving, p::stopping})
    for (auto event : {e::registered, e::move_ordered, e::drained, e::moved, e::stop_asked}) {
      INFO(to_string(from) << " + " << to_string(event));
      const auto it = arrows.find({from, event});
      const auto to = next_phase(from, event);
      if (it == arrows.end())
        CHECK_FALSE(to.has_value());
      else
        CHECK((to && *to == it->second));
    }
  // Requests are computed only before any move or stop.
  CHECK(takes_requests(p::starting));
  CHECK(takes_requests(p::serving));
  CHECK_FALSE(takes_requests(p::draining));
  CHECK_FALSE(takes_requests(p::stopping));
}
