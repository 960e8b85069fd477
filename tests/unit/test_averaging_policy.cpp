// When rounds start and who takes part: exact cases of the pure plan.
#include <catch2/catch.hpp>

#include "policy/averaging.hpp"

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
  CHECK(plan.stale.empty());                         // never reported: neither member nor stale
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

TEST_CASE("a member stopped on purpose with gradient starts a short round; only an eligible one counts",
          "[averaging]") {
  std::vector<member_view> s{{"a", true, 3, 8, 7}, {"b", true, 3, 16, 7}};
  CHECK_FALSE(plan_round(s, {3, 7}, 64).start);
  s[0].leaving = true;
  auto plan = plan_round(s, {3, 7}, 64);
  CHECK(plan.start);
  CHECK(plan.samples == 24);  // everyone's gradient goes in, not only the leaver's
  CHECK(plan.members == std::vector<size_t>{0, 1});
  s[0].samples = 0;  // nothing left to hand in: it exits, no member
  plan = plan_round(s, {3, 7}, 64);
  CHECK_FALSE(plan.start);
  CHECK(plan.members == std::vector<size_t>{1});
  s[1].samples = 64;
  CHECK(plan_round(s, {3, 7}, 64).members == std::vector<size_t>{1});
  s[1].samples = 16;
  s[0] = {"a", true, 2, 8, 5, true};  // behind the stage: reloaded, not a member
  plan = plan_round(s, {3, 7}, 64);
  CHECK_FALSE(plan.start);
  CHECK(plan.stale == std::vector<size_t>{0});
}

TEST_CASE("a round moves its stage to the most common result one step on", "[averaging]") {
  CHECK(majority({{4, 1}, {4, 2}, {4, 2}}, 3)->hash == 2);
  CHECK(majority({{4, 1}, {4, 2}}, 3)->hash == 1);  // tie: rank order
  // A step no round made is a claim, however high: it neither wins nor counts.
  CHECK(majority({{4, 5}, {4, 5}, {1000000, 6}}, 3)->step == 4);
  CHECK(majority({{1000000, 6}, {4, 5}}, 3)->hash == 5);
  CHECK_FALSE(majority({{9, 6}}, 3));
  CHECK_FALSE(majority({}, 3));
}

TEST_CASE("a result against a strict majority is a dissent; without one nobody is wrong", "[averaging]") {
  CHECK(dissenters({{4, 2}, {4, 1}, {4, 2}}, {4, 2}) == std::vector<size_t>{1});
  CHECK(dissenters({{4, 2}, {4, 2}, {9, 9}}, {4, 2}) == std::vector<size_t>{2});
  CHECK(dissenters({{4, 2}, {4, 1}}, {4, 2}).empty());  // one against one: undecided
  CHECK(dissenters({{4, 2}, {4, 2}}, {4, 2}).empty());
}

TEST_CASE("before its first round a stage stands where most servers say, not where one claims", "[averaging]") {
  const member_view a{"a", true, 7, 0, 3}, b{"b", true, 7, 0, 3}, liar{"l", true, 1u << 30, 0, 9},
      behind{"c", true, 5, 0, 4}, silent{"d", false, 0, 0, 0};
  CHECK(reported_position({a, liar, b}, {}).step == 7);
  CHECK(reported_position({a, liar, b}, {}).hash == 3);
  CHECK(reported_position({a, behind}, {}).step == 7);   // one each: the higher step
  CHECK(reported_position({silent}, {6, 1}).step == 6);  // nobody heard: the record stands
  // A server behind the record is to be reloaded, not a vote for going back.
  CHECK(reported_position({behind, behind}, {6, 1}).step == 6);
  CHECK(reported_position({a, behind, behind}, {6, 1}).step == 7);  // the record lags a round
}

TEST_CASE("a stage's state survives while a live server is at its position or still owes a round result",
          "[averaging]") {
  const stage_position at{32, 7};
  const member_view current{"a", true, 32, 0, 7}, behind{"b", true, 31, 0, 5}, fresh{"c", true, 0, 0, 9},
      silent{"d", false, 0, 0, 0};
  CHECK(state_held({current}, {false}, at));
  CHECK(state_held({silent}, {false}, at));  // may be a holder not heard from yet
  CHECK_FALSE(state_held({}, {}, at));
  CHECK_FALSE(state_held({fresh}, {false}, at));  // came with nobody to copy from
  // A round member that has not answered yet holds the step before plus its
  // share: its result is still to come (its peer's report moved the position
  // ahead of it). Once excluded or finished it is no longer awaited.
  CHECK(state_held({behind}, {true}, at));
  CHECK_FALSE(state_held({behind, fresh}, {false, false}, at));
  CHECK(state_held({fresh, behind}, {false, true}, at));
}

TEST_CASE("a round waits for a server catching up to the stage's position, unless one leaving must go", "[averaging]") {
  const stage_position at{5, 0xabc};
  std::vector<member_view> v{{"a", true, 5, 64, 0xabc}, {"b", true, 4, 24, 0x111}};
  v[1].catching_up = true;  // told to reload step 5 a moment ago
  auto plan = plan_round(v, at, 64);
  CHECK_FALSE(plan.start);
  CHECK(plan.members == std::vector<size_t>{0});
  CHECK(plan.stale == std::vector<size_t>{1});
  // Reloaded: at the position with what it kept, a member of the round.
  v[1] = {"b", true, 5, 24, 0xabc};
  plan = plan_round(v, at, 64);
  CHECK(plan.start);
  CHECK(plan.members == std::vector<size_t>{0, 1});
  CHECK(plan.samples == 88);
  // A member stopped on purpose hands its gradient in without waiting.
  v[1] = {"b", true, 4, 24, 0x111};
  v[1].catching_up = true;
  v[0].leaving = true;
  CHECK(plan_round(v, at, 64).start);
}
