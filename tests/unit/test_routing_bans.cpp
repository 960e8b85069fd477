// SWARM routing policy: bans with their backoff, timeouts, and degenerate inputs
// (nobody eligible, exclusions, removals, choose_only). Time is injected.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>

#include "policy/routing.hpp"
#include "routing_helpers.hpp"

using namespace swarm::testing::routing_helpers;

// --- bans and timeouts -------------------------------------------------------------------

TEST_CASE("router: bans back off exponentially up to the cap", "[routing]") {
  auto r = make_router({{"a", 10}});
  const std::vector<double> want = {1, 2, 4, 8, 16, 32, 60, 60, 60};
  double now = 0.0;
  for (double w : want) {
    CHECK(r.ban("a", now) == w);
    CHECK(r.banned("a", now));
    CHECK(r.banned("a", now + w - 1e-9));
    CHECK_FALSE(r.banned("a", now + w));
    now += w;
  }
  // Many more bans still give the cap, no overflow.
  for (int i = 0; i < 3000; ++i)
    r.ban("a", now);
  CHECK(r.ban("a", now) == 60.0);
}

TEST_CASE("router: ban lengths follow the config", "[routing]") {
  routing_config cfg;
  cfg.ban_base_s = 0.5;
  cfg.ban_max_s = 3.0;
  auto r = make_router({{"a", 10}}, cfg);
  for (double w : {0.5, 1.0, 2.0, 3.0, 3.0})
    CHECK(r.ban("a", 0.0) == w);
}

TEST_CASE("router: a banned server is not chosen until its ban ends", "[routing]") {
  std::mt19937_64 rng(5);
  auto r = make_router({{"a", 10}, {"b", 10}});
  CHECK(r.ban("a", 0.0) == 1.0);
  CHECK(r.eligible(0.5) == 1);
  CHECK(r.size() == 2);
  for (double now : {0.0, 0.3, 0.999})
    for (int i = 0; i < 10; ++i)
      CHECK(r.choose(1.0, false, now, rng) == std::optional<std::string>("b"));
  CHECK(r.eligible(1.0) == 2);
  // Back at 1.0 s: a probe soon, but no flood of the 30 choices it missed.
  const auto counts = count_choices(r, 20, rng, 1.0);
  CHECK(counts.at("a") == 10);
  CHECK(counts.at("b") == 10);
}

TEST_CASE("router: success resets the backoff, re-registration lifts the ban", "[routing]") {
  auto r = make_router({{"a", 10}, {"b", 10}});
  CHECK(r.ban("a", 0.0) == 1.0);
  CHECK(r.ban("a", 0.0) == 2.0);
  r.on_success("a", 10.0, false, 1.0);
  CHECK(r.ban("a", 10.0) == 1.0);

  CHECK(r.ban("a", 20.0) == 2.0);
  CHECK(r.banned("a", 20.5));
  r.add("a", 20.5);
  CHECK_FALSE(r.banned("a", 20.5));
  REQUIRE(r.ema("a"));
  CHECK(*r.ema("a") == 10.0);      // EMA survives re-registration (constant rate: exact)
  CHECK(r.ban("a", 21.0) == 1.0);  // and the count starts over
  CHECK(r.size() == 2);
}

TEST_CASE("router: timeouts are counted, never banned", "[routing]") {
  std::mt19937_64 rng(9);
  auto r = make_router({{"a", 10}});
  for (int i = 1; i <= 5; ++i) {
    r.on_timeout("a", 1.0, false, 2.0);
    CHECK(r.timeouts("a") == i);
  }
  CHECK_FALSE(r.banned("a", 0.0));
  CHECK(r.choose(1.0, false, 0.0, rng) == std::optional<std::string>("a"));
  CHECK(r.timeouts("unknown") == 0);
  r.on_timeout("a", 1.0, false, 0.0);  // no usable time: counted only
  CHECK(r.timeouts("a") == 6);
}

TEST_CASE("router: a peer is charged the time it held a timed-out request", "[routing]") {
  std::mt19937_64 rng(4);
  auto r = make_router({{"a", 10}, {"b", 10}});
  r.on_timeout("a", 1.0, false, 5.0);  // held 1 sample for 5 s
  // b must do 5 s of its own work (50 samples at 10/s) before a is tried again.
  int before_a = 0;
  while (r.choose(1.0, false, 0.0, rng) == std::optional<std::string>("b"))
    ++before_a;
  CHECK(before_a >= 49);
  CHECK(before_a <= 51);
  // And a's rate reflects what the trainer got from it: (9 x 10 + 0.2) / 10 after bias correction.
  REQUIRE(r.ema("a"));
  CHECK(*r.ema("a") < 10.0);
}

// --- degenerate inputs ----------------------------------------------------------------------

TEST_CASE("router: no eligible server gives nullopt", "[routing]") {
  std::mt19937_64 rng(1);
  stage_router empty;
  CHECK_FALSE(empty.choose(1.0, false, 0.0, rng));
  CHECK(empty.size() == 0);
  CHECK(empty.eligible(0.0) == 0);

  auto all_banned = make_router({{"a", 10}, {"b", 20}});
  all_banned.ban("a", 0.0);
  all_banned.ban("b", 0.0);
  CHECK_FALSE(all_banned.choose(1.0, false, 0.5, rng));
  CHECK(all_banned.eligible(0.5) == 0);

  auto one = make_router({{"a", 10}});
  CHECK_FALSE(one.choose(1.0, false, 0.0, rng, {"a"}));
  CHECK(one.choose(1.0, false, 0.0, rng, {"zzz"}) == std::optional<std::string>("a"));
}

TEST_CASE("router: the exclude list is respected", "[routing]") {
  std::mt19937_64 rng(2);
  auto r = make_router({{"a", 10}, {"b", 30}, {"c", 20}});
  for (int i = 0; i < 100; ++i) {
    const auto id = r.choose(1.0, i % 2 == 0, 0.0, rng, {"b", "c"});
    CHECK(id == std::optional<std::string>("a"));
  }
  for (int i = 0; i < 100; ++i)
    CHECK(r.choose(1.0, false, 0.0, rng, {"a"}) != std::optional<std::string>("a"));
}

TEST_CASE("router: remove forgets a server; unknown ids are no-ops", "[routing]") {
  std::mt19937_64 rng(4);
  auto r = make_router({{"a", 10}, {"b", 30}});
  r.remove("nobody");
  CHECK(r.size() == 2);
  r.on_success("nobody", 1.0, false, 1.0);
  r.on_timeout("nobody", 1.0, false, 1.0);
  CHECK(r.ban("nobody", 0.0) == 0.0);
  CHECK_FALSE(r.banned("nobody", 0.0));
  CHECK_FALSE(r.ema("nobody"));
  CHECK_FALSE(r.contains("nobody"));
  CHECK(r.size() == 2);

  count_choices(r, 10, rng);
  r.remove("b");
  CHECK(r.size() == 1);
  CHECK_FALSE(r.contains("b"));
  CHECK(r.contains("a"));
  for (int i = 0; i < 50; ++i)
    CHECK(r.choose(1.0, false, 0.0, rng) == std::optional<std::string>("a"));
  r.remove("a");
  CHECK_FALSE(r.choose(1.0, false, 0.0, rng));
}

TEST_CASE("router: a server added while all others are banned does not fall behind them", "[routing]") {
  // "c" joins while a and b are banned; they return later and must not take
  // every choice until c catches up with their old virtual times (or vice versa).
  std::mt19937_64 rng(6);
  auto r = make_router({{"a", 10}, {"b", 10}});
  count_choices(r, 100, rng);  // a and b at ~5 s of virtual time
  r.ban("a", 0.0);
  r.ban("b", 0.0);
  r.add("c", 0.0);
  r.on_success("c", 10.0, false, 1.0);
  count_choices(r, 10, rng, 0.5);  // only c, while they are banned
  const auto counts = count_choices(r, 30, rng, 2.0);
  CHECK(std::abs(counts.at("a") - 10) <= 1);
  CHECK(std::abs(counts.at("b") - 10) <= 1);
  CHECK(std::abs(counts.at("c") - 10) <= 1);
}

TEST_CASE("router: choose_only charges like choose with every other server excluded", "[routing]") {
  // Two identical routers; one picks "b" through choose() with the rest
  // excluded, the other through choose_only(): the next 200 choices of both
  // must agree (same virtual times), including a returning (unbanned) "b".
  auto a = make_router({{"a", 10}, {"b", 20}, {"c", 40}});
  auto b = make_router({{"a", 10}, {"b", 20}, {"c", 40}});
  REQUIRE(a.ban("b", 0) == b.ban("b", 0));
  const double later = 100;  // the ban is over
  std::mt19937_64 ra(5), rb(5);
  REQUIRE(a.choose(8, true, later, ra, {"a", "c"}) == std::optional<std::string>("b"));
  REQUIRE(b.choose_only("b", 8, true, later) == std::optional<std::string>("b"));
  for (int i = 0; i < 200; ++i)
    REQUIRE(a.choose(8, i % 2 == 0, later, ra) == b.choose(8, i % 2 == 0, later, rb));
  // Unknown and banned servers are never chosen.
  REQUIRE_FALSE(b.choose_only("zz", 8, false, later));
  b.ban("c", later);
  REQUIRE_FALSE(b.choose_only("c", 8, false, later));
}
