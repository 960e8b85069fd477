// The attempt planner (policy/attempt.hpp): which server each attempt of one
// stage request goes to. swarm's load balancer and swarm-sim's trainers both
// call it (tests/check_layers.py fails a router choice made anywhere else), so
// these cases are the binary's and the simulator's at once. Exact
// expectations: a twin router with a twin engine says what the router alone
// would pick.
#include <catch2/catch.hpp>

#include <algorithm>

#include "policy/attempt.hpp"

using namespace swarm::policy;

namespace {

/// Servers a, b, c measured at 30, 20 and 10 samples/s (one 10-sample forward each).
stage_router three_servers() {
  stage_router r;
  const std::pair<const char*, double> rates[] = {{"a", 30}, {"b", 20}, {"c", 10}};
  for (const auto& [id, rate] : rates) {
    r.add(id, 0.0);
    r.on_success(id, 10.0, false, 10.0 / rate);
  }
  return r;
}

std::vector<std::string> none() {
  FAIL("candidates asked for without static routing");
  return {};
}

struct planner {
  attempt_config cfg;
  stage_router router = three_servers();
  static_pin pin;
  std::mt19937_64 rng{7};

  std::optional<std::string> next(const attempt_history& h, double now = 0) {
    return next_server(cfg, h, router, pin, now, rng, none);
  }
};

attempt_history forward(double samples = 1) {
  attempt_history h;
  h.samples = samples;
  return h;
}

}  // namespace

TEST_CASE("planner: a fresh forward goes where the router alone sends it", "[attempt]") {
  planner p;
  stage_router twin = three_servers();
  std::mt19937_64 twin_rng{7};
  for (int i = 0; i < 30; ++i) {
    const auto got = p.next(forward());
    const auto want = twin.choose(1.0, false, 0.0, twin_rng);
    REQUIRE(got);
    CHECK(got == want);
  }
}

TEST_CASE("planner: servers that failed a request are avoided, then tried again rather than none", "[attempt]") {
  planner p;
  auto h = forward();
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    const auto pick = p.next(h);
    REQUIRE(pick);
    order.push_back(*pick);
    on_ended(h, p.router, *pick);
  }
  std::sort(order.begin(), order.end());
  CHECK(order == std::vector<std::string>{"a", "b", "c"});  // each once: none twice while another was left
  CHECK(h.tried.size() == 3);
  CHECK(p.next(h));  // all three failed it: one of them again, not nothing
}

TEST_CASE("planner: a busy server is passed over while the request asks, not after", "[attempt]") {
  planner p;
  p.cfg.busy_retries = 2;
  auto h = forward();
  const auto first = p.next(h);
  REQUIRE(first);
  on_busy(h, p.router, *first);
  CHECK(h.busy.size() == 1);
  CHECK(h.attempts == 0);  // a busy answer is not an attempt
  CHECK(p.router.in_flight(*first) == 0);
  CHECK(asks(p.cfg, h));
  for (int i = 0; i < 20; ++i) {
    const auto again = p.next(h);
    REQUIRE(again);
    CHECK(*again != *first);
    p.router.release(*again);
  }
  const auto second = p.next(h);
  REQUIRE(second);
  on_busy(h, p.router, *second);
  CHECK_FALSE(asks(p.cfg, h));  // busy_retries refusals: sent without asking, busy servers eligible again
  stage_router twin = p.router;
  std::mt19937_64 twin_rng = p.rng;
  CHECK(p.next(h) == twin.choose(1.0, false, 0.0, twin_rng));
}

TEST_CASE("planner: busy_retries 0 never asks; a failed server is avoided even then", "[attempt]") {
  planner p;
  p.cfg.busy_retries = 0;
  auto h = forward();
  CHECK_FALSE(asks(p.cfg, h));
  h.busy = {"a", "b", "c"};  // ignored: it does not ask
  h.tried = {"a", "b"};
  for (int i = 0; i < 10; ++i) {
    CHECK(p.next(h) == "c");
    p.router.release("c");
  }
}

TEST_CASE("planner: a backward goes back to its forward's server when it is due", "[attempt]") {
  planner p;
  attempt_history h;
  h.backward = true;
  h.samples = 1;
  h.preferred = "c";
  stage_router twin = p.router;
  std::mt19937_64 twin_rng = p.rng;
  CHECK(p.next(h) == twin.choose_backward("c", 1.0, 0.0, twin_rng));

  SECTION("not when it failed the backward") {
    h.tried = {"c"};
    for (int i = 0; i < 10; ++i) {
      const auto pick = p.next(h);
      REQUIRE(pick);
      CHECK(*pick != "c");
      p.router.release(*pick);
    }
  }
  SECTION("not when it is banned or gone; the request is routed as any") {
    p.router.ban("c", 0.0);
    CHECK(p.next(h) != std::optional<std::string>{"c"});
    p.router.remove("c");
    stage_router t2 = p.router;
    std::mt19937_64 r2 = p.rng;
    CHECK(p.next(h) == t2.choose(1.0, true, 0.0, r2));
  }
}

TEST_CASE("planner: servers the router does not know are no reason to retry without exclusion", "[attempt]") {
  planner p;
  auto h = forward();
  h.tried = {"gone"};  // left the stage: removed from the router
  stage_router twin = p.router;
  std::mt19937_64 twin_rng = p.rng;
  CHECK(p.next(h) == twin.choose(1.0, false, 0.0, twin_rng));
  CHECK(p.rng == twin_rng);  // the one choice only: the same draws as the router's
}

TEST_CASE("planner: nothing eligible is nullopt (the caller waits)", "[attempt]") {
  planner p;
  for (const char* id : {"a", "b", "c"})
    p.router.ban(id, 0.0);
  CHECK_FALSE(p.next(forward(), 0.5));
  CHECK(p.next(forward(), 100.0));  // bans over
  stage_router empty;
  std::mt19937_64 rng{1};
  static_pin pin;
  CHECK_FALSE(next_server({}, forward(), empty, pin, 0.0, rng, none));
}

TEST_CASE("planner: static routing pins one live server and keeps it", "[attempt]") {
  planner p;
  p.cfg.pinned = true;
  int asked = 0;
  const auto live = [&] {
    ++asked;
    return std::vector<std::string>{"x", "y"};
  };
  auto h = forward();
  const auto first = next_server(p.cfg, h, p.router, p.pin, 0.0, p.rng, live);
  REQUIRE(first);
  CHECK((*first == "x" || *first == "y"));  // the pin's candidates, not the router's servers
  h.tried = {*first};                       // no rerouting: the pin again
  CHECK(next_server(p.cfg, h, p.router, p.pin, 0.0, p.rng, live) == first);
  CHECK(asked == 1);
  CHECK_FALSE(asks(p.cfg, h));
  static_pin unpinned;
  CHECK_FALSE(next_server(p.cfg, h, p.router, unpinned, 0.0, p.rng, [] { return std::vector<std::string>{}; }));
}

TEST_CASE("planner: attempts_left counts attempts, not busy answers", "[attempt]") {
  attempt_config cfg;
  cfg.max_attempts = 2;
  attempt_history h;
  h.busy.assign(10, "a");  // busy answers
  CHECK(attempts_left(cfg, h));
  h.attempts = 1;
  CHECK(attempts_left(cfg, h));
  h.attempts = 2;
  CHECK_FALSE(attempts_left(cfg, h));
}
