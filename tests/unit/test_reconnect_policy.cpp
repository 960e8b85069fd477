// How a node reaches its coordinator: which leader it follows (policy/following.hpp).
#include <catch2/catch.hpp>

#include "policy/following.hpp"

using namespace swarm::policy;

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
