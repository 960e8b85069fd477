// The stage cut: exact expectations, including the degenerate ones.
#include <catch2/catch.hpp>

#include "models/partition.hpp"

using swarm::partition_blocks;

namespace {

std::vector<int> sizes(const std::vector<swarm::stage_span>& spans) {
  std::vector<int> out;
  for (const auto& s : spans)
    out.push_back(s.blocks());
  return out;
}

} // namespace

TEST_CASE("partition splits blocks contiguously, extras to the middle", "[partition]") {
  CHECK(sizes(partition_blocks(4, 1)) == std::vector<int>{4});
  CHECK(sizes(partition_blocks(4, 2)) == std::vector<int>{2, 2});
  CHECK(sizes(partition_blocks(5, 2)) == std::vector<int>{3, 2});
  CHECK(sizes(partition_blocks(7, 3)) == std::vector<int>{2, 3, 2});
  CHECK(sizes(partition_blocks(8, 3)) == std::vector<int>{3, 3, 2});
  CHECK(sizes(partition_blocks(6, 4)) == std::vector<int>{1, 2, 2, 1});
  CHECK(sizes(partition_blocks(3, 3)) == std::vector<int>{1, 1, 1});
}

TEST_CASE("partition covers every block once, in order", "[partition]") {
  for (int n = 1; n <= 24; ++n)
    for (int s = 1; s <= n; ++s) {
      const auto spans = partition_blocks(n, s);
      REQUIRE(static_cast<int>(spans.size()) == s);
      int next = 0;
      for (int k = 0; k < s; ++k) {
        CHECK(spans[k].stage == k);
        CHECK(spans[k].num_stages == s);
        CHECK(spans[k].first_block == next);
        CHECK(spans[k].blocks() >= 1);
        CHECK(spans[k].blocks() <= n / s + 1);
        next = spans[k].end_block;
      }
      CHECK(next == n);
      CHECK(spans.front().has_embedding());
      CHECK(spans.back().has_head());
    }
}

TEST_CASE("partition refuses impossible cuts", "[partition]") {
  CHECK(partition_blocks(4, 0).empty());
  CHECK(partition_blocks(4, 5).empty());
  CHECK(partition_blocks(0, 1).empty());
  CHECK(partition_blocks(4, -1).empty());
}
