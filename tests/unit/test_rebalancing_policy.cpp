// Tier (a): the rebalancing policy with exact expectations (policy/rebalancing.hpp).
#include <catch2/catch.hpp>

#include <cmath>

#include "policy/rebalancing.hpp"

using namespace swarm::policy;

namespace {

const double nan_rate = std::nan("");

server_load srv(const std::string& id, int stage, double rate, double settled_at = -1e9) {
  return {id, stage, rate, settled_at};
}

rebalance_config with_replicas(int n, double min_gain = 0.1) {
  rebalance_config c;
  c.min_replicas = n;
  c.min_gain = min_gain;
  c.cooldown_s = 60;
  return c;
}

/// The view after `m` happened (rates carried over through the stages' costs).
std::vector<server_load> apply(std::vector<server_load> servers, const move_plan& m, const std::vector<double>& cost,
                               double now) {
  for (auto& s : servers)
    if (s.id == m.server) {
      s.rate = s.rate * cost[static_cast<size_t>(m.from)] / cost[static_cast<size_t>(m.to)];
      s.stage = m.to;
      s.settled_at = now;
    }
  return servers;
}

}  // namespace

TEST_CASE("capacities: sum of rates; unmeasured servers count as the median speed", "[rebalancing]") {
  const std::vector<double> cost{1, 2};
  auto caps = capacities(cost, {srv("a", 0, 10), srv("b", 1, 5), srv("c", 1, nan_rate)});
  // b's speed is 5 x 2 = 10 work/s, like a's; c counts as 10 too: 10 / 2 = 5 samples/s.
  CHECK(caps == std::vector<double>{10, 10});
  // Nobody measured: every server counts as speed 1.
  CHECK(capacities(cost, {srv("a", 0, nan_rate), srv("b", 1, nan_rate)}) == std::vector<double>{1, 0.5});
  CHECK(capacities(cost, {}) == std::vector<double>{0, 0});
  CHECK(capacities({}, {}).empty());
}

TEST_CASE("a balanced swarm: no move", "[rebalancing]") {
  const std::vector<double> cost{1, 1};
  const std::vector<server_load> s{srv("a", 0, 10), srv("b", 0, 10), srv("c", 1, 10), srv("d", 1, 10)};
  CHECK_FALSE(plan_move(cost, s, 0, true, with_replicas(2)));
  CHECK_FALSE(plan_move(cost, s, 0, true, with_replicas(1)));
  CHECK_FALSE(plan_move({}, {}, 0, true, with_replicas(2)));
  CHECK_FALSE(plan_move(cost, {}, 0, true, with_replicas(2)));
}

TEST_CASE("3+1 servers on stages of equal cost: one moves to the lone stage", "[rebalancing]") {
  const std::vector<double> cost{1, 1};
  const std::vector<server_load> s{srv("c", 0, 10), srv("a", 0, 10), srv("b", 0, 10), srv("d", 1, 10)};
  // For throughput (min_replicas 1): only at the period; bottleneck 10 -> 20.
  CHECK_FALSE(plan_move(cost, s, 0, false, with_replicas(1)));
  auto m = plan_move(cost, s, 0, true, with_replicas(1));
  REQUIRE(m);
  CHECK(m->server == "a");  // equal candidates: the lowest id
  CHECK(m->from == 0);
  CHECK(m->to == 1);
  CHECK(m->reason == move_reason::load);
  CHECK(m->bottleneck_before == Approx(10));
  CHECK(m->bottleneck_after == Approx(20));
  CHECK(m->gain == Approx(1.0));
  // For redundancy (min_replicas 2): at once, between periods too.
  auto r = plan_move(cost, s, 0, false, with_replicas(2));
  REQUIRE(r);
  CHECK(r->reason == move_reason::redundancy);
  CHECK(r->to == 1);
}

TEST_CASE("equal server counts, one stage twice as costly: a server moves to it", "[rebalancing]") {
  const std::vector<double> cost{1, 2};
  // Equal machines: 10 samples/s on stage 0, 5 on the stage that costs twice as much.
  const std::vector<server_load> s{srv("a", 0, 10), srv("b", 0, 10), srv("c", 0, 10),
                                   srv("d", 1, 5),  srv("e", 1, 5),  srv("f", 1, 5)};
  CHECK(capacities(cost, s) == std::vector<double>{30, 15});
  auto m = plan_move(cost, s, 0, true, with_replicas(2));
  REQUIRE(m);
  CHECK(m->from == 0);
  CHECK(m->to == 1);
  CHECK(m->bottleneck_after == Approx(20));  // 20 and 15 + 10 / 2
  CHECK(m->gain == Approx(1.0 / 3));
  // With two each, moving one would only make stage 0 the bottleneck (10 vs 15): no move.
  CHECK_FALSE(plan_move(cost, {s[0], s[1], s[3], s[4]}, 0, true, with_replicas(1)));
}

TEST_CASE("hysteresis: a gain below min-gain, a server in its cooldown, no move back", "[rebalancing]") {
  const std::vector<double> cost{1, 1};
  // Moving the slow server: bottleneck 10 -> 11, a gain of 0.1.
  const std::vector<server_load> s{srv("fast", 0, 11), srv("slow", 0, 1), srv("x", 1, 10)};
  CHECK_FALSE(plan_move(cost, s, 0, true, with_replicas(1, 0.2)));
  auto m = plan_move(cost, s, 0, true, with_replicas(1, 0.05));
  REQUIRE(m);
  CHECK(m->server == "slow");
  CHECK(m->gain == Approx(0.1));

  // The move made, with the cooldown over: the reverse move would lower the bottleneck.
  const std::vector<server_load> uneven{srv("a", 0, 10), srv("b", 0, 10), srv("c", 0, 10), srv("d", 1, 10)};
  auto first = plan_move(cost, uneven, 100, true, with_replicas(1));
  REQUIRE(first);
  auto after = apply(uneven, *first, cost, 100);
  CHECK_FALSE(plan_move(cost, after, 100, true, with_replicas(1)));
  CHECK_FALSE(plan_move(cost, after, 1000, true, with_replicas(1)));

  // Every server of the big stage moved or joined 10 s ago (cooldown 60 s): none moves yet.
  std::vector<server_load> fresh{srv("a", 0, 10, 90), srv("b", 0, 10, 90), srv("c", 0, 10, 90), srv("d", 1, 10)};
  CHECK_FALSE(plan_move(cost, fresh, 100, true, with_replicas(1)));
  CHECK_FALSE(plan_move(cost, fresh, 100, true, with_replicas(2)));  // redundancy waits for it too
  CHECK(plan_move(cost, fresh, 151, true, with_replicas(1)));
  fresh[1].settled_at = -1e9;  // one of them is settled: that one goes
  auto one = plan_move(cost, fresh, 100, true, with_replicas(1));
  REQUIRE(one);
  CHECK(one->server == "b");
}

TEST_CASE("a move never empties a stage", "[rebalancing]") {
  const std::vector<double> cost{1, 1};
  // One server each, however uneven: nobody can leave.
  CHECK_FALSE(plan_move(cost, {srv("a", 0, 100), srv("b", 1, 1)}, 0, true, with_replicas(1)));
  // An empty stage but no stage with two servers: nothing to take.
  CHECK_FALSE(plan_move({1, 1, 1}, {srv("a", 0, 10), srv("b", 1, 10)}, 0, false, with_replicas(2)));
  // Redundancy never takes a donor below min_replicas: 2 and 1, both short of 3.
  CHECK_FALSE(plan_move(cost, {srv("a", 0, 10), srv("b", 0, 10), srv("c", 1, 10)}, 0, false, with_replicas(3)));
}

TEST_CASE("emergency: an empty stage gets a server at once, cooldown or not", "[rebalancing]") {
  const std::vector<double> cost{1, 1, 1};
  // Everyone just moved (cooldown), and it is not the period: the empty stage is filled anyway.
  const std::vector<server_load> s{srv("a", 0, 10, 99), srv("b", 0, 4, 99), srv("c", 1, 5, 99)};
  auto m = plan_move(cost, s, 100, false, with_replicas(2));
  REQUIRE(m);
  CHECK(m->reason == move_reason::empty);
  CHECK(m->from == 0);
  CHECK(m->to == 2);
  // Moving a leaves 4 / 5 / 10, moving b leaves 10 / 5 / 4: a bottleneck of 4 either way; the tie goes to "a".
  CHECK(m->server == "a");
  CHECK(m->bottleneck_after == Approx(4));
  CHECK(std::isinf(m->gain));
  // Two empty stages: the lower one first.
  auto two = plan_move({1, 1, 1}, {srv("a", 0, 10), srv("b", 0, 10)}, 0, false, with_replicas(1));
  REQUIRE(two);
  CHECK(two->to == 1);
}

TEST_CASE("heterogeneous speeds: the server whose move gives the best bottleneck moves", "[rebalancing]") {
  const std::vector<double> cost{1, 1};
  // Stage 0: one fast (3) and three slow (1); stage 1: one slow. Fast over: 3 / 4; a slow one: 5 / 2.
  auto fast = plan_move(cost, {srv("f", 0, 3), srv("s1", 0, 1), srv("s2", 0, 1), srv("s3", 0, 1), srv("x", 1, 1)}, 0,
                        true, with_replicas(1));
  REQUIRE(fast);
  CHECK(fast->server == "f");
  CHECK(fast->bottleneck_after == Approx(3));
  // Stage 0: fast (4) and two slow (1); stage 1: one at 2. Fast over: 2 / 6; a slow one: 5 / 3.
  auto slow =
      plan_move(cost, {srv("f", 0, 4), srv("s1", 0, 1), srv("s2", 0, 1), srv("x", 1, 2)}, 0, true, with_replicas(1));
  REQUIRE(slow);
  CHECK(slow->server == "s1");
  CHECK(slow->bottleneck_after == Approx(3));
}

TEST_CASE("ties: the lower target stage, then the lower id", "[rebalancing]") {
  const std::vector<double> cost{1, 1, 1};
  // Stages 1 and 2 are both short of 2 replicas and equally served.
  const std::vector<server_load> s{srv("c", 0, 10), srv("b", 0, 10), srv("d", 0, 10), srv("x", 1, 10), srv("y", 2, 10)};
  auto m = plan_move(cost, s, 0, false, with_replicas(2));
  REQUIRE(m);
  CHECK(m->reason == move_reason::redundancy);
  CHECK(m->to == 1);
  CHECK(m->server == "b");
}

TEST_CASE("a new server goes to an empty, then an under-replicated, then the slowest stage", "[rebalancing]") {
  const std::vector<double> cost{1, 1, 1};
  auto empty = place_joiner(cost, {srv("a", 0, 10), srv("b", 0, 10)}, with_replicas(2));
  CHECK(empty.to == 1);
  CHECK(empty.from == -1);
  CHECK(empty.reason == move_reason::join);
  CHECK(std::isinf(empty.gain));
  // Stage 1 has one fast server, stage 2 two slow ones: stage 1 is short of replicas.
  auto under = place_joiner(cost, {srv("a", 0, 10), srv("b", 0, 10), srv("c", 1, 30), srv("d", 2, 1), srv("e", 2, 1)},
                            with_replicas(2));
  CHECK(under.to == 1);
  // Everyone has 2: the slowest stage (2), where the joiner (median speed 10) lifts the bottleneck 2 -> 12 (stage 1:
  // 20).
  auto slowest = place_joiner(
      cost, {srv("a", 0, 10), srv("b", 0, 10), srv("c", 1, 10), srv("c2", 1, 10), srv("d", 2, 1), srv("e", 2, 1)},
      with_replicas(2));
  CHECK(slowest.to == 2);
  CHECK(slowest.bottleneck_before == Approx(2));
  CHECK(slowest.bottleneck_after == Approx(12));
  CHECK(slowest.gain == Approx(5.0));
  // Equal stages: the lower index. Nobody yet: stage 0. No stages: nowhere.
  CHECK(place_joiner({1, 1}, {srv("a", 0, 5), srv("b", 1, 5)}, with_replicas(1)).to == 0);
  CHECK(place_joiner({1, 1}, {}, with_replicas(2)).to == 0);
  CHECK(place_joiner({}, {}, with_replicas(2)).to == -1);
  // Costs count: stage 1 costs 3x, so two unmeasured servers there serve less than one on stage 0.
  CHECK(place_joiner({1, 3}, {srv("a", 0, nan_rate), srv("b", 1, nan_rate), srv("c", 1, nan_rate)}, with_replicas(1))
            .to == 1);
}
