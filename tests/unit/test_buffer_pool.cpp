// Tier (a): the data plane's buffer pool (base/buffer_pool.hpp): reuse, fit and bounds.
#include "base/buffer_pool.hpp"

#include <catch2/catch.hpp>

using namespace swarm;

namespace {
constexpr size_t mib = size_t{1} << 20;
}

TEST_CASE("buffer pool: a given buffer serves the next take of a size it fits", "[pool]") {
  buffer_pool pool(64 * mib, 8, 64 << 10);
  auto a = pool.take(4 * mib);
  REQUIRE(a.size() == 4 * mib);
  const char* memory = a.data();
  a[0] = 'x';
  pool.give(std::move(a));
  REQUIRE(pool.stats().held == 1);
  REQUIRE(pool.stats().held_bytes >= 4 * mib);

  auto b = pool.take(3 * mib);  // smaller, within 4x: the same memory, shrunk
  REQUIRE(b.size() == 3 * mib);
  REQUIRE(b.data() == memory);
  REQUIRE(pool.stats().hits == 1);
  REQUIRE(pool.stats().held == 0);

  auto c = pool.take(3 * mib);  // nothing kept: allocated and zeroed
  REQUIRE(c.data() != memory);
  REQUIRE(c.size() == 3 * mib);
  REQUIRE(c.find_first_not_of('\0') == std::string::npos);
  REQUIRE(pool.stats().misses == 2);

  pool.give(std::move(b));  // for a writer: the same memory, empty, with room
  auto d = pool.take_empty(2 * mib);
  REQUIRE(d.data() == memory);
  REQUIRE(d.empty());
  REQUIRE(d.capacity() >= 2 * mib);
  REQUIRE(pool.stats().hits == 2);
  auto e = pool.take_empty(2 * mib);  // nothing kept: room, nothing written
  REQUIRE(e.empty());
  REQUIRE(e.capacity() >= 2 * mib);
}

TEST_CASE("buffer pool: the smallest fitting buffer, never one over 4x the size", "[pool]") {
  buffer_pool pool(256 * mib, 8, 64 << 10);
  auto big = pool.take(32 * mib), mid = pool.take(8 * mib);
  const char *big_at = big.data(), *mid_at = mid.data();
  pool.give(std::move(big));
  pool.give(std::move(mid));
  auto small = pool.take(mib);  // 8 MiB is over 4x: neither is used
  REQUIRE(small.data() != big_at);
  REQUIRE(small.data() != mid_at);
  REQUIRE(pool.stats().held == 2);
  REQUIRE(pool.take(7 * mib).data() == mid_at);  // the smaller of the two that fit
  REQUIRE(pool.take(9 * mib).data() == big_at);
}

TEST_CASE("buffer pool: bounded in bytes and buffers, oldest dropped; small buffers are malloc's", "[pool]") {
  buffer_pool pool(10 * mib, 3, 64 << 10);
  for (int i = 0; i < 4; ++i)
    pool.give(pool.take(2 * mib));  // each take reuses the one given before
  REQUIRE(pool.stats().held == 1);
  std::string held[4];
  for (auto& h : held)
    h = pool.take(2 * mib);
  for (auto& h : held)
    pool.give(std::move(h));
  REQUIRE(pool.stats().held == 3);  // max_buffers
  REQUIRE(pool.stats().held_bytes <= 10 * mib);
  pool.give(std::string(8 * mib, 'y'));  // past max_bytes: the two oldest go
  REQUIRE(pool.stats().held_bytes == 10 * mib);
  REQUIRE(pool.stats().held == 2);

  pool.give(std::string(1000, 'z'));  // under min_size: not kept
  REQUIRE(pool.stats().held == 2);
  pool.give(std::string(11 * mib, 'z'));  // larger than the whole pool: not kept
  REQUIRE(pool.stats().held == 2);
  auto tiny = pool.take(100);
  REQUIRE(tiny.size() == 100);
  REQUIRE(pool.stats().held == 2);
}
