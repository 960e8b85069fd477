// SWARM routing policy: throughput EMA, weighted round-robin, bans. Exact
// expectations; time and randomness are injected, so nothing sleeps.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "policy/routing.hpp"
#include "routing_helpers.hpp"

using namespace swarm::testing::routing_helpers;

// --- throughput EMA ------------------------------------------------------------------

TEST_CASE("ema: nothing before the first update, that sample exactly after it", "[routing]") {
  throughput_ema e(0.1);
  CHECK_FALSE(e.estimate());
  CHECK(e.updates() == 0);
  e.update(10.0, 1.0);
  REQUIRE(e.estimate());
  CHECK(*e.estimate() == 10.0);  // bias correction: raw 1.0 / (1 - 0.9)
  CHECK(e.updates() == 1);
}

TEST_CASE("ema: second update matches the hand computation", "[routing]") {
  // raw1 = 0.1 * 10 = 1; raw2 = 0.9 * 1 + 0.1 * 20 = 2.9; corrected 2.9 / (1 - 0.81).
  throughput_ema e(0.1);
  e.update(10.0, 1.0);
  e.update(40.0, 2.0);  // 20 samples/s
  REQUIRE(e.estimate());
  CHECK(*e.estimate() == Approx(2.9 / 0.19).epsilon(1e-12));
  CHECK(*e.estimate() == Approx(15.263157894736842).epsilon(1e-12));
  CHECK(e.updates() == 2);
}

TEST_CASE("ema: a constant rate stays exact", "[routing]") {
  for (double alpha : {0.1, 0.5, 1.0}) {
    throughput_ema e(alpha);
    for (int i = 1; i <= 200; ++i) {
      e.update(21.0, 3.0);  // 7 samples/s
      REQUIRE(e.estimate());
      CHECK(*e.estimate() == Approx(7.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("ema: invalid requests are ignored", "[routing]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct row {
    double samples, seconds;
  };
  const std::vector<row> bad = {{10, 0}, {10, -1}, {10, nan}, {10, inf},      {0, 1},
                                {-3, 1}, {nan, 1}, {inf, 1},  {1e300, 1e-300}};
  for (const auto& b : bad) {
    INFO("samples " << b.samples << " seconds " << b.seconds);
    throughput_ema fresh;
    fresh.update(b.samples, b.seconds);
    CHECK_FALSE(fresh.estimate());
    CHECK(fresh.updates() == 0);

    throughput_ema used;
    used.update(5.0, 1.0);
    used.update(b.samples, b.seconds);
    REQUIRE(used.estimate());
    CHECK(*used.estimate() == 5.0);
    CHECK(used.updates() == 1);
  }
}

// --- weighted round-robin ----------------------------------------------------------------

TEST_CASE("router: work in proportion to measured throughput", "[routing]") {
  struct row {
    std::vector<std::pair<std::string, double>> servers;
    int choices;
  };
  const std::vector<row> table = {
      {{{"a", 10}, {"b", 30}}, 4000},
      {{{"a", 10}, {"b", 20}, {"c", 50}}, 8000},
      {{{"a", 7}, {"b", 7}}, 1000},
      {{{"a", 1}, {"b", 100}}, 10100},
  };
  for (const auto& t : table) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      std::mt19937_64 rng(seed);
      auto r = make_router(t.servers);
      const auto counts = count_choices(r, t.choices, rng);
      double total_rate = 0;
      for (const auto& s : t.servers)
        total_rate += s.second;
      for (const auto& [id, rate] : t.servers) {
        const double want = t.choices * rate / total_rate;
        const int got = counts.count(id) ? counts.at(id) : 0;
        INFO("server " << id << " got " << got << " want " << want);
        CHECK(std::abs(got / double(t.choices) - rate / total_rate) < 0.01);
        CHECK(std::abs(got - want) <= 2.0);  // round-robin: off by at most a choice or so
      }
    }
  }
}

TEST_CASE("router: work is interleaved, not in bursts", "[routing]") {
  // 1:3 -> the slow server gets 2 of every 8 consecutive choices, give or take one.
  std::mt19937_64 rng(7);
  auto r = make_router({{"slow", 10}, {"fast", 30}});
  count_choices(r, 101, rng);
  for (int window = 0; window < 50; ++window) {
    const auto counts = count_choices(r, 8, rng);
    const int slow = counts.count("slow") ? counts.at("slow") : 0;
    CHECK(slow >= 1);
    CHECK(slow <= 3);
  }
}

TEST_CASE("router: a new server is probed within two choices", "[routing]") {
  // It enters at the current minimum, so it is next, or ties with the one old
  // server there. After a multiple of 4 choices at 1:3 both old servers sit at
  // the same virtual time, a three-way tie: then it may take three choices.
  for (int warmup = 1000; warmup < 1040; ++warmup) {
    std::mt19937_64 rng(static_cast<uint64_t>(warmup));
    auto r = make_router({{"a", 10}, {"b", 30}});
    count_choices(r, warmup, rng);
    r.add("new", 5.0);
    CHECK_FALSE(r.ema("new"));
    const int limit = warmup % 4 == 0 ? 3 : 2;
    int waited = 1;
    while (r.choose(1.0, false, 5.0, rng) != std::optional<std::string>("new"))
      REQUIRE(++waited < 100);
    INFO("after " << warmup << " choices");
    CHECK(waited <= limit);
    r.release("new");  // its probe is over
    // Probed, not flooded: from here it gets its average share, 20 of 60.
    const auto counts = count_choices(r, 60, rng, 5.0);
    CHECK(std::abs(counts.at("new") - 20) <= 2);
  }
}

TEST_CASE("router: an unmeasured server counts as the average measured one", "[routing]") {
  // Mean of 10 and 30 is 20, so "new" gets 20 / 60 of the work until measured.
  std::mt19937_64 rng(3);
  auto r = make_router({{"a", 10}, {"b", 30}, {"new", 0}});
  const auto counts = count_choices(r, 6000, rng);
  CHECK(std::abs(counts.at("a") - 1000) <= 2);
  CHECK(std::abs(counts.at("b") - 3000) <= 2);
  CHECK(std::abs(counts.at("new") - 2000) <= 2);
}

TEST_CASE("router: with nobody measured, choices rotate over all servers", "[routing]") {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed);
    auto r = make_router({{"a", 0}, {"b", 0}, {"c", 0}});
    for (int round = 0; round < 5; ++round) {
      const auto counts = count_choices(r, 3, rng);
      INFO("seed " << seed << " round " << round);
      CHECK(counts.size() == 3);  // each of the three exactly once per round
    }
  }
}

TEST_CASE("router: ties between identical servers are broken at random", "[routing]") {
  std::map<std::string, int> firsts;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    auto r = make_router({{"a", 0}, {"b", 0}});
    ++firsts[*r.choose(1.0, false, 0.0, rng)];
  }
  CHECK(firsts["a"] > 50);
  CHECK(firsts["b"] > 50);
}

TEST_CASE("router: a backward costs backward_cost forwards", "[routing]") {
  // Two servers at 10 samples/s. One backward to X puts it at 0.1 * cost; the
  // other then takes forwards at 0, 0.1, 0.2, ... until it passes that, i.e.
  // ceil(cost) of them, before X is chosen again. Costs avoid exact ties.
  const std::vector<std::pair<double, int>> table = {{1.5, 2}, {2.5, 3}, {3.5, 4}, {0.5, 1}};
  for (const auto& [cost, forwards] : table) {
    for (uint64_t seed = 0; seed < 10; ++seed) {
      std::mt19937_64 rng(seed);
      routing_config cfg;
      cfg.backward_cost = cost;
      auto r = make_router({{"a", 10}, {"b", 10}}, cfg);
      const auto x = r.choose(1.0, true, 0.0, rng);
      REQUIRE(x);
      int run = 0;
      while (r.choose(1.0, false, 0.0, rng) != x)
        REQUIRE(++run < 100);
      INFO("backward_cost " << cost << " seed " << seed);
      CHECK(run == forwards);
    }
  }
}

TEST_CASE("router: default backward cost is 2.5 and task size scales the cost", "[routing]") {
  CHECK(routing_config{}.backward_cost == 2.5);
  // Backward of 2 samples at 10 samples/s = 0.5 s of virtual time: 5 forwards of 1 on the other.
  std::mt19937_64 rng(1);
  auto r = make_router({{"a", 10}, {"b", 10}});
  const auto x = r.choose(2.0, true, 0.0, rng);
  int run = 0;
  while (r.choose(1.0, false, 0.0, rng) != x)
    REQUIRE(++run < 100);
  CHECK(run >= 5);
  CHECK(run <= 6);  // 0.5 vs 0.1 * 5 may tie
}
