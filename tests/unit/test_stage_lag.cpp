// policy/stage_lag: which stage has stopped learning, and when to say so.
#include <catch2/catch.hpp>

#include "policy/stage_lag.hpp"

using swarm::stage_watch;
using swarm::warn_about_lag;

TEST_CASE("a stage that stops stepping while the others go on is stalled; drift and offsets are not", "[stage_lag]") {
  stage_watch w(2);
  CHECK_FALSE(w.stalled(5));
  CHECK(w.steps_text() == "?/?");
  // Healthy, with stage 1 drifting ahead (rounds close past the target batch)
  // and then 40 steps ahead after stage 0 reloaded an older checkpoint.
  for (int64_t i = 1; i <= 200; ++i) {
    w.observe(0, i);
    w.observe(1, i + i / 10);
    CHECK_FALSE(w.stalled(5));
  }
  w.observe(0, 180);
  for (int64_t i = 181; i <= 220; ++i) {
    w.observe(1, i + 40);
    w.observe(0, i);
  }
  CHECK_FALSE(w.stalled(5));
  CHECK(w.steps_text() == "220/260");
  // Stage 0's rounds stop completing.
  for (int64_t i = 261; i <= 265; ++i)
    w.observe(1, i);
  CHECK_FALSE(w.stalled(5));  // 5 gained: within
  w.observe(1, 266);
  const auto lag = w.stalled(5);
  REQUIRE(lag);
  CHECK(lag->stage == 0);
  CHECK(lag->step == 220);
  CHECK(lag->leader == 1);
  CHECK(lag->gained == 6);
  w.observe(0, 221);  // it moved again
  CHECK_FALSE(w.stalled(5));
}

TEST_CASE("a stage not heard from is not stalled; one heard of later is measured from then", "[stage_lag]") {
  stage_watch w(0);
  for (int64_t i = 0; i < 50; ++i)
    w.observe(2, i);
  w.observe(0, 7);  // first heard of now: stage 2's steps before count for nothing
  CHECK_FALSE(w.stalled(5));
  for (int64_t i = 50; i < 56; ++i)
    w.observe(2, i);
  REQUIRE(w.stalled(5));
  CHECK(w.stalled(5)->stage == 0);
  CHECK(w.gained_on(0) == std::pair<int64_t, int>{6, 2});
  CHECK(w.gained_on(1) == std::pair<int64_t, int>{0, 1});
  CHECK(w.steps_text() == "7/?/55");
  w.observe(4, 1);  // a stage past the count so far joins it
  CHECK(w.steps_text() == "7/?/55/?/1");
}

TEST_CASE("a stage catching up on one that stands ahead is not a stall until it passes it", "[stage_lag]") {
  stage_watch w(2);
  // Stage 0's rounds were held up; stage 1 stands at 52 while stage 0 drains
  // from 43 to 51 (a false warning in the mixed chaos soak of 2026-12-05).
  w.observe(0, 43);
  w.observe(1, 52);
  for (int64_t i = 44; i <= 52; ++i) {
    w.observe(0, i);
    CHECK_FALSE(w.stalled(5));
  }
  CHECK(w.gained_on(1).first == 0);
  // Past it, stage 0's steps count: stage 1 has stopped.
  for (int64_t i = 53; i <= 57; ++i)
    w.observe(0, i);
  CHECK_FALSE(w.stalled(5));
  w.observe(0, 58);
  const auto lag = w.stalled(5);
  REQUIRE(lag);
  CHECK(lag->stage == 1);
  CHECK(lag->leader == 0);
  CHECK(lag->gained == 6);
}

TEST_CASE("a stall is warned about as it grows, once per further allowance", "[stage_lag]") {
  int64_t warned = 0;
  std::vector<int64_t> at;
  for (int64_t gained = 0; gained <= 40; ++gained)
    if (warn_about_lag(gained, warned, 5)) {
      warned = gained;
      at.push_back(gained);
    }
  CHECK(at == std::vector<int64_t>{6, 11, 16, 21, 26, 31, 36});
}
