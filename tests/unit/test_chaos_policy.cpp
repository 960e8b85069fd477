// The cluster's chaos and coordinator supervision as pure decisions
// (policy/chaos.hpp): exact answers, degenerate inputs, seeds replayed.
#include <catch2/catch.hpp>

#include <map>

#include "policy/chaos.hpp"

using namespace swarm::policy;

namespace {

const std::vector<chaos_target> servers{{101, 0}, {102, 0}, {103, 1}, {104, 1}, {105, 1}};

}  // namespace

TEST_CASE("chaos: --chaos words, and nothing else", "[chaos]") {
  CHECK(chaos_mode_of("none") == chaos_mode::none);
  CHECK(chaos_mode_of("kill") == chaos_mode::kill);
  CHECK(chaos_mode_of("stop") == chaos_mode::stop);
  CHECK(chaos_mode_of("mixed") == chaos_mode::mixed);
  CHECK_FALSE(chaos_mode_of("Kill"));
  CHECK_FALSE(chaos_mode_of(""));
}

TEST_CASE("chaos: no victim without servers, of the stage, or with mode none", "[chaos]") {
  std::mt19937_64 rng(1);
  CHECK_FALSE(choose_victim({}, -1, chaos_mode::kill, rng));
  CHECK_FALSE(choose_victim(servers, 2, chaos_mode::kill, rng));
  CHECK_FALSE(choose_victim(servers, -1, chaos_mode::none, rng));
}

TEST_CASE("chaos: a stage's servers only, uniformly, killed or stopped as the mode says", "[chaos]") {
  std::mt19937_64 rng(7);
  std::map<int64_t, int> hits;
  int kills = 0;
  const int n = 6000;
  for (int i = 0; i < n; ++i) {
    const auto hit = choose_victim(servers, 1, chaos_mode::mixed, rng);
    REQUIRE(hit);
    ++hits[hit->id];
    kills += hit->kill;
  }
  REQUIRE(hits.size() == 3);  // 103, 104, 105: stage 1 only
  for (const auto& [id, count] : hits) {
    INFO(id);
    CHECK(id >= 103);
    CHECK(count == Approx(n / 3.0).margin(n * 0.03));
  }
  CHECK(kills == Approx(n / 2.0).margin(n * 0.03));  // mixed: a fair coin
  for (int i = 0; i < 50; ++i) {
    CHECK(choose_victim(servers, -1, chaos_mode::kill, rng)->kill);
    CHECK_FALSE(choose_victim(servers, -1, chaos_mode::stop, rng)->kill);
  }
}

TEST_CASE("chaos: one seed replays the same victims", "[chaos]") {
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 100; ++i) {
    const auto x = choose_victim(servers, -1, chaos_mode::mixed, a);
    const auto y = choose_victim(servers, -1, chaos_mode::mixed, b);
    REQUIRE(x);
    REQUIRE(y);
    CHECK(x->id == y->id);
    CHECK(x->kill == y->kill);
  }
}

TEST_CASE("chaos: a wipe takes the given stage, else one of all", "[chaos]") {
  std::mt19937_64 rng(3);
  CHECK(choose_wipe_stage(1, 4, rng) == 1);
  std::map<int, int> seen;
  for (int i = 0; i < 400; ++i)
    ++seen[choose_wipe_stage(-1, 4, rng)];
  CHECK(seen.size() == 4);
  CHECK(seen.begin()->first == 0);
  CHECK(seen.rbegin()->first == 3);
  CHECK(choose_wipe_stage(-1, 1, rng) == 0);
}

TEST_CASE("supervision: quick deaths in a row give up; slow ones and chaos's own reset the count", "[chaos]") {
  const coordinator_supervision s;  // quick under 10 s, give up at the 5th, 1 s before a start after a quick one
  int quick = 0;
  for (int death = 1; death <= 4; ++death) {
    const auto v = after_coordinator_death(s, quick, 2.0, false);
    CHECK(v.quick_deaths == death);
    CHECK_FALSE(v.give_up);
    CHECK(v.restart_in_s == 1.0);
    quick = v.quick_deaths;
  }
  CHECK(after_coordinator_death(s, quick, 2.0, false).give_up);  // the 5th in a row
  const auto by_chaos = after_coordinator_death(s, quick, 2.0, true);
  CHECK(by_chaos.quick_deaths == 0);
  CHECK_FALSE(by_chaos.give_up);
  CHECK(by_chaos.restart_in_s == 0);  // at once
  const auto slow = after_coordinator_death(s, quick, 10.0, false);
  CHECK(slow.quick_deaths == 0);
  CHECK(slow.restart_in_s == 0);
}
