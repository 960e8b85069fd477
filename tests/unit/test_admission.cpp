// A server's admission (policy::admission): grants up to a bound, freed by
// their requests or lapsed. Exact; time is injected.
#include <catch2/catch.hpp>

#include <set>

#include "policy/admission.hpp"

using swarm::policy::admission;
using swarm::policy::admission_config;

TEST_CASE("admission grants max_outstanding places, each freed by its request", "[admission]") {
  admission door{admission_config{3, 60}};
  std::set<uint64_t> tickets;
  for (int i = 0; i < 3; ++i) {
    auto t = door.grant(1.0);
    REQUIRE(t);
    CHECK(*t != 0);
    tickets.insert(*t);
  }
  CHECK(tickets.size() == 3);    // distinct
  CHECK_FALSE(door.grant(1.0));  // busy
  CHECK(door.held(1.0) == 3);
  door.done(0);      // sent without a grant: nothing to free
  door.done(12345);  // unknown
  CHECK_FALSE(door.grant(2.0));
  door.done(*tickets.begin());
  auto again = door.grant(2.0);
  REQUIRE(again);
  CHECK(tickets.count(*again) == 0);  // a new ticket, not a reused one
  door.done(*tickets.begin());        // freed twice: the second is ignored
  CHECK_FALSE(door.grant(2.0));
}

TEST_CASE("admission: a grant whose request never came lapses after hold_s", "[admission]") {
  admission door{admission_config{2, 10}};
  REQUIRE(door.grant(0.0));
  REQUIRE(door.grant(4.0));
  CHECK_FALSE(door.grant(9.9));
  CHECK(door.held(9.9) == 2);
  CHECK(door.held(10.0) == 1);  // the first lapsed at 0 + 10
  auto t = door.grant(10.0);
  REQUIRE(t);
  CHECK_FALSE(door.grant(13.9));
  door.done(*t);            // done after the lapse of others: still frees its own place
  CHECK(door.grant(14.0));  // the one of 4.0 lapsed too
  CHECK(door.held(14.0) == 1);
}

TEST_CASE("admission with max_outstanding 0 grants every ask and holds none", "[admission]") {
  admission door{admission_config{0, 10}};
  for (int i = 0; i < 100; ++i)
    CHECK(door.grant(1.0));
  CHECK(door.held(1.0) == 0);
}
