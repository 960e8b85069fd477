// How a node reaches its coordinator: the wait between tries (policy/backoff.hpp;
// exact answers for the doubling, the cap and the jitter, degenerate inputs) and
// which leader it follows (policy/following.hpp).
#include <catch2/catch.hpp>

#include <limits>
#include <random>

#include "policy/backoff.hpp"
#include "policy/following.hpp"

using namespace swarm::policy;
using std::chrono::milliseconds;

TEST_CASE("backoff: doubles from 0.2 s to the 5 s cap; none before a failure", "[backoff]") {
  const backoff_settings s;  // 0.2 s, x2, 5 s, jitter 0.5
  CHECK(backoff_delay(s, 0, 0.0) == milliseconds{0});
  CHECK(backoff_delay(s, -3, 0.0) == milliseconds{0});
  const int64_t expected[] = {200, 400, 800, 1600, 3200, 5000, 5000};
  for (int i = 0; i < 7; ++i) {
    INFO("failures " << i + 1);
    CHECK(backoff_delay(s, i + 1, 0.0).count() == expected[i]);
  }
  // A long outage: no overflow, still the cap.
  CHECK(backoff_delay(s, 10000, 0.0) == milliseconds{5000});
  CHECK(backoff_delay(s, std::numeric_limits<int>::max(), 0.0) == milliseconds{5000});
}

TEST_CASE("backoff: the draw takes up to the jitter's share off; bad draws clamped", "[backoff]") {
  const backoff_settings s;
  CHECK(backoff_delay(s, 1, 0.5) == milliseconds{150});
  CHECK(backoff_delay(s, 6, 0.9) == milliseconds{2750});
  CHECK(backoff_delay(s, 1, 1.0) == milliseconds{100});
  CHECK(backoff_delay(s, 1, 7.0) == milliseconds{100});
  CHECK(backoff_delay(s, 1, -1.0) == milliseconds{200});
  CHECK(backoff_delay(s, 1, std::numeric_limits<double>::quiet_NaN()) == milliseconds{200});
  backoff_settings none = s;
  none.jitter = 0.0;
  CHECK(backoff_delay(none, 3, 0.9) == milliseconds{800});
  backoff_settings flat = s;
  flat.factor = 0.5;  // below 1: never shrinks
  CHECK(backoff_delay(flat, 4, 0.0) == milliseconds{200});
}

TEST_CASE("backoff: nodes that fail together spread out", "[backoff]") {
  // 100 nodes at their 6th failure in a row: waits over [2.5 s, 5 s], not one instant.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> draw(0.0, 1.0);
  int64_t low = std::numeric_limits<int64_t>::max(), high = 0;
  for (int n = 0; n < 100; ++n) {
    const auto d = backoff_delay(backoff_settings{}, 6, draw(rng)).count();
    low = std::min(low, d);
    high = std::max(high, d);
  }
  CHECK(low >= 2500);
  CHECK(high <= 5000);
  CHECK(high - low > 1500);
}

TEST_CASE("following: the leader etcd names, a lower term too", "[following]") {
  CHECK(follow_leader(0, 0) == follow::stay);  // etcd named none yet
  CHECK(follow_leader(0, 9) == follow::stay);
  CHECK(follow_leader(9, 9) == follow::stay);
  CHECK(follow_leader(12, 9) == follow::rejoin);
  CHECK(follow_leader(3, 0) == follow::rejoin);  // none joined yet
  // etcd restored from an older snapshot (or a watch behind a dial): never
  // ignored, as when only higher terms counted.
  CHECK(follow_leader(3, 9) == follow::confirm);
}
