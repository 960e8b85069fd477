// When rounds start and who takes part: exact cases of the pure plan.
#include <catch2/catch.hpp>

#include "actors/policy/averaging.hpp"

using namespace swarm::policy;

TEST_CASE("a round starts once eligible servers hold the target batch", "[averaging]") {
  std::vector<member_view> s{{"s0-2", true, 3, 40, 7}, {"s0-1", true, 3, 20, 7}, {"s0-3", false, 0, 0, 0}};
  auto plan = plan_round(s, {3, 7}, 64);
  CHECK_FALSE(plan.start);
  CHECK(plan.samples == 60);
  s[1].samples = 24;
  plan = plan_round(s, {3, 7}, 64);
  CHECK(plan.start);
  CHECK(plan.members == std::vector<size_t>{1, 0});  // rank order is id order
  CHECK(plan.stale.empty());                          // never reported: neither member nor stale
}

TEST_CASE("servers behind the stage or with other parameters are stale, not members", "[averaging]") {
  std::vector<member_view> s{{"a", true, 5, 100, 9}, {"b", true, 4, 100, 2}, {"c", true, 5, 100, 8}};
  const auto plan = plan_round(s, {5, 9}, 64);
  CHECK(plan.start);
  CHECK(plan.members == std::vector<size_t>{0});
  CHECK(plan.stale == std::vector<size_t>{1, 2});
  CHECK(plan.samples == 100);
}

TEST_CASE("a single server averages alone; no server or no samples never starts", "[averaging]") {
  CHECK(plan_round({{"a", true, 0, 8, 1}}, {0, 1}, 8).start);
  CHECK_FALSE(plan_round({}, {0, 0}, 8).start);
  CHECK_FALSE(plan_round({{"a", true, 0, 0, 1}}, {0, 1}, 0).start);  // target 0 acts as 1
}

TEST_CASE("the stage moves to the most common result at the highest step", "[averaging]") {
  CHECK(majority({{4, 1}, {4, 2}, {4, 2}}).hash == 2);
  CHECK(majority({{4, 1}, {4, 2}}).hash == 1);          // tie: rank order
  CHECK(majority({{3, 5}, {3, 5}, {4, 6}}).step == 4);  // a step ahead beats a crowd behind
  CHECK(majority({}).step == 0);
}
