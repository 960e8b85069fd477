// The all-reduce's pure arithmetic: shard partition and weighted reduction,
// with exact expectations and the degenerate inputs.
#include <catch2/catch.hpp>

#include "policy/allreduce.hpp"

using namespace swarm::policy;

TEST_CASE("shards are contiguous, cover everything, differ by at most one", "[allreduce]") {
  CHECK(partition_shards(10, 1) == std::vector<shard>{{0, 10}});
  CHECK(partition_shards(10, 3) == std::vector<shard>{{0, 4}, {4, 7}, {7, 10}});
  CHECK(partition_shards(7, 2) == std::vector<shard>{{0, 4}, {4, 7}});
  CHECK(partition_shards(2, 3) == std::vector<shard>{{0, 1}, {1, 2}, {2, 2}});
  CHECK(partition_shards(0, 3) == std::vector<shard>{{0, 0}, {0, 0}, {0, 0}});
  CHECK(partition_shards(5, 0).empty());
  CHECK(partition_shards(-1, 2).empty());
  for (int64_t total : {0, 1, 2, 3, 17, 1000, 1001}) {
    for (int peers = 1; peers <= 9; ++peers) {
      const auto s = partition_shards(total, peers);
      REQUIRE(static_cast<int>(s.size()) == peers);
      int64_t next = 0, smallest = total, largest = 0;
      for (const auto& x : s) {
        CHECK(x.begin == next);
        next = x.end;
        smallest = std::min(smallest, x.size());
        largest = std::max(largest, x.size());
      }
      CHECK(next == total);
      CHECK(largest - smallest <= 1);
    }
  }
}

TEST_CASE("weighted mean weights each peer by its samples", "[allreduce]") {
  const std::vector<float> a{1, 2, 3}, b{3, 6, 9};
  float out[3] = {};
  REQUIRE(weighted_mean({{a.data(), 1}, {b.data(), 3}}, 3, out));
  CHECK(out[0] == 2.5f);  // (1*1 + 3*3) / 4
  CHECK(out[1] == 5.0f);
  CHECK(out[2] == 7.5f);
}

TEST_CASE("weighted mean degenerate inputs", "[allreduce]") {
  const std::vector<float> a{1, -2}, b{100, 100};
  float out[2] = {42, 42};
  SECTION("group of one returns its own values") {
    REQUIRE(weighted_mean({{a.data(), 5}}, 2, out));
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.0f);
  }
  SECTION("a peer with zero samples contributes nothing") {
    REQUIRE(weighted_mean({{a.data(), 2}, {b.data(), 0}}, 2, out));
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.0f);
  }
  SECTION("no samples anywhere: nothing to average, output untouched") {
    CHECK_FALSE(weighted_mean({{a.data(), 0}, {b.data(), 0}}, 2, out));
    CHECK_FALSE(weighted_mean({}, 2, out));
    CHECK(out[0] == 42.0f);
  }
  SECTION("empty shard") {
    CHECK(weighted_mean({{nullptr, 3}, {nullptr, 1}}, 0, out));
    CHECK(out[0] == 42.0f);
  }
}

TEST_CASE("ideal all-reduce traffic", "[allreduce]") {
  CHECK(ideal_allreduce_bytes(1000, 1) == 0.0);
  CHECK(ideal_allreduce_bytes(1000, 2) == 1000.0);
  CHECK(ideal_allreduce_bytes(900, 3) == 1200.0);
}
