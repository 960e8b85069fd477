// The butterfly round as a pure state machine: whole groups run in one thread,
// messages are delivered, delayed or dropped by the test, members die at
// chosen points. Survivors must always end bit-identical.
#include <catch2/catch.hpp>

#include <deque>
#include <functional>
#include <memory>

#include "policy/butterfly.hpp"

#include <cmath>

using namespace swarm::policy;

namespace {

/// A group of members and the messages between them.
struct group {
  std::vector<std::unique_ptr<butterfly_round>> m;
  std::vector<bool> dead;
  std::deque<piece> wire;

  group(const std::vector<std::vector<float>>& grads, const std::vector<int64_t>& samples, int64_t piece_elems,
        aggregation how = {}) {
    const int n = static_cast<int>(grads.size());
    for (int r = 0; r < n; ++r)
      m.push_back(std::make_unique<butterfly_round>(
          r, n, grads[static_cast<size_t>(r)], samples[static_cast<size_t>(r)], piece_elems, round_trip_fn{}, how));
    dead.assign(static_cast<size_t>(n), false);
  }
  void post(std::vector<piece> out) {
    for (auto& p : out)
      wire.push_back(std::move(p));
  }
  void start() {
    for (auto& x : m)
      post(x->start());
  }
  /// Delivers queued messages (those `keep` accepts; others are dropped) until none are left.
  void run(const std::function<bool(const piece&)>& keep = [](const piece&) { return true; }) {
    while (!wire.empty()) {
      auto p = std::move(wire.front());
      wire.pop_front();
      if (dead[static_cast<size_t>(p.to)] || dead[static_cast<size_t>(p.from)] || !keep(p))
        continue;
      std::string err;
      post(m[static_cast<size_t>(p.to)]->receive(p, &err));
      REQUIRE(err.empty());
    }
  }
  /// Kills `r`: its queued messages are lost, every survivor sees it gone.
  void kill(int r) {
    dead[static_cast<size_t>(r)] = true;
    for (size_t i = 0; i < m.size(); ++i)
      if (!dead[i])
        post(m[i]->gone(r));
  }
  std::vector<int> survivors() const {
    std::vector<int> s;
    for (size_t i = 0; i < m.size(); ++i)
      if (!dead[i])
        s.push_back(static_cast<int>(i));
    return s;
  }
  /// Every survivor is complete with the same vector; returns it.
  std::vector<float> agreed() const {
    const auto s = survivors();
    REQUIRE(!s.empty());
    for (int r : s)
      REQUIRE(m[static_cast<size_t>(r)]->complete());
    for (int r : s)
      CHECK(m[static_cast<size_t>(r)]->result() == m[static_cast<size_t>(s[0])]->result());
    return m[static_cast<size_t>(s[0])]->result();
  }
};

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = scale * static_cast<float>(i + 1);
  return v;
}

/// The exact expected average, element by element, of `grads` weighted by `samples`.
std::vector<float> expected_mean(const std::vector<std::vector<float>>& grads, const std::vector<int64_t>& samples) {
  const auto n = static_cast<int64_t>(grads[0].size());
  std::vector<float> out(static_cast<size_t>(n));
  std::vector<weighted_part> parts;
  for (size_t i = 0; i < grads.size(); ++i)
    parts.push_back({grads[i].data(), static_cast<double>(samples[i])});
  REQUIRE(weighted_mean(parts, n, out.data()));
  return out;
}

}  // namespace

TEST_CASE("three members, odd size, small pieces: everyone gets the weighted mean", "[butterfly]") {
  const std::vector<std::vector<float>> grads{ramp(10, 1), ramp(10, -2), ramp(10, 0.5f)};
  const std::vector<int64_t> samples{8, 16, 24};
  group g(grads, samples, 3);
  g.start();
  g.run();
  CHECK(g.agreed() == expected_mean(grads, samples));
  CHECK(g.m[1]->waiting_on().empty());
  // Ideal traffic: each sends 2/3 of its vector out as parts and 2 x its shard back.
  for (auto& x : g.m) {
    CHECK(x->bytes_sent() == x->bytes_received());
    CHECK(x->reassigned() == 0);
  }
  CHECK(g.m[0]->bytes_sent() == 4 * (6 + 2 * 4));  // shards are 4, 3, 3 elements
}

TEST_CASE("a group of one averages with itself and sends nothing", "[butterfly]") {
  butterfly_round solo(0, 1, ramp(5, 1), 7, 2);
  CHECK(solo.start().empty());
  REQUIRE(solo.complete());
  CHECK(solo.result() == ramp(5, 1));
  CHECK(solo.bytes_sent() == 0);
}

TEST_CASE("a member with zero samples does not count", "[butterfly]") {
  const std::vector<std::vector<float>> grads{ramp(7, 1), ramp(7, 100), ramp(7, 3)};
  group g(grads, {4, 0, 4}, 2);
  g.start();
  g.run();
  CHECK(g.agreed() == expected_mean({grads[0], grads[2]}, {4, 4}));
}

TEST_CASE("fewer elements than members and an empty vector both complete", "[butterfly]") {
  group g({ramp(2, 1), ramp(2, 3), ramp(2, 5)}, {1, 1, 2}, 8);
  g.start();
  g.run();
  CHECK(g.agreed() == expected_mean({ramp(2, 1), ramp(2, 3), ramp(2, 5)}, {1, 1, 2}));
  group e({{}, {}, {}}, {1, 1, 1}, 8);
  e.start();
  e.run();
  CHECK(e.agreed().empty());
}

TEST_CASE("a member dead before sending: survivors cover its shard and agree", "[butterfly]") {
  const std::vector<std::vector<float>> grads{ramp(11, 1), ramp(11, 2), ramp(11, 4)};
  group g(grads, {2, 2, 2}, 2);
  for (int r : {0, 1})
    g.post(g.m[static_cast<size_t>(r)]->start());
  (void)g.m[2]->start();  // rank 2 computed its parts but died before they left
  g.dead[2] = true;       // ... and before anything reached it; the others learn it below
  g.run();
  CHECK_FALSE(g.m[0]->complete());
  // Rank 0 waits for rank 2's part of shard 0, its reduced shard 2, and the
  // reduced shard 1 that rank 1 cannot reduce without rank 2 either.
  CHECK(g.m[0]->waiting_on() == std::vector<int>{1, 2});
  CHECK(g.m[1]->waiting_on() == std::vector<int>{0, 2});
  g.kill(2);
  g.run();
  CHECK(g.agreed() == expected_mean({grads[0], grads[1]}, {2, 2}));
  CHECK(g.m[0]->reassigned() == 1);  // rank 0, the lowest live rank, reduced shard 2
}

TEST_CASE("an owner that dies after reaching one survivor: its values win everywhere", "[butterfly]") {
  const std::vector<std::vector<float>> grads{ramp(9, 1), ramp(9, -1), ramp(9, 7)};
  const std::vector<int64_t> samples{1, 2, 3};
  for (int reached : {0, 1}) {
    group g(grads, samples, 2);
    g.start();
    // Shard 2's REDUCED reaches only `reached`; the other loses it when rank 2 dies.
    g.run([&](const piece& p) { return !(p.from == 2 && p.reduced && p.to != reached); });
    CHECK(g.m[static_cast<size_t>(reached)]->complete());
    CHECK_FALSE(g.m[static_cast<size_t>(1 - reached)]->complete());
    const auto held = g.m[static_cast<size_t>(reached)]->result();
    g.kill(2);
    g.run();
    CHECK(g.agreed() == held);
    CHECK(held == expected_mean(grads, samples));
  }
}

TEST_CASE("the new owner dies too: the next lowest rank takes over", "[butterfly]") {
  const std::vector<std::vector<float>> grads{ramp(13, 1), ramp(13, 2), ramp(13, 3), ramp(13, 5)};
  group g(grads, {1, 1, 1, 1}, 3);
  g.start();
  g.run([](const piece& p) { return !(p.from == 3 && p.reduced); });  // shard 3 never leaves rank 3
  g.kill(3);
  g.run([](const piece& p) { return !(p.from == 0 && p.reduced && p.shard == 3); });  // rank 0 reduces, then dies
  g.kill(0);
  g.run();
  const auto got = g.agreed();
  REQUIRE(got.size() == 13);
  // Shards 0-2 were reduced over all four; shard 3 (elements 10..12) by rank 1 over ranks 1, 2.
  const auto all = expected_mean(grads, {1, 1, 1, 1});
  const auto late = expected_mean({grads[1], grads[2]}, {1, 1});
  for (size_t i = 0; i < 10; ++i)
    CHECK(got[i] == all[i]);
  for (size_t i = 10; i < 13; ++i)
    CHECK(got[i] == late[i]);
}

TEST_CASE("an excluded member's later messages are ignored; malformed pieces are refused", "[butterfly]") {
  butterfly_round a(0, 2, ramp(4, 1), 1, 4);
  (void)a.start();
  (void)a.gone(1);
  REQUIRE(a.complete());  // alone now: its own gradient
  CHECK(a.result() == ramp(4, 1));
  piece late{1, 0, true, 0, 0, 2, 1, {9, 9}};
  std::string err;
  (void)a.receive(late, &err);
  CHECK(err.empty());
  CHECK(a.result() == ramp(4, 1));

  butterfly_round b(0, 2, ramp(4, 1), 1, 4);
  (void)b.start();
  auto refused = [&](piece p) {
    std::string why;
    (void)b.receive(p, &why);
    return !why.empty();
  };
  CHECK(refused({5, 0, false, 0, 0, 2, 1, {1, 1}}));    // unknown rank
  CHECK(refused({1, 0, false, 3, 0, 2, 1, {1, 1}}));    // unknown shard
  CHECK(refused({1, 0, false, 0, 0, 3, 1, {1, 1}}));    // wrong shard size
  CHECK(refused({1, 0, false, 0, 1, 2, 1, {1}}));       // misaligned offset
  CHECK(refused({1, 0, false, 0, 0, 2, 1, {1}}));       // short piece
  CHECK(refused({1, 0, false, 0, 0, 2, 1, {1, NAN}}));  // NaN
  CHECK(refused({1, 0, false, 0, 0, 2, -1, {1, 1}}));   // negative weight
  CHECK_FALSE(b.complete());
}

TEST_CASE("a round under centered-clip leaves a flipped member out, every member alike, and names it an outlier",
          "[butterfly][robust]") {
  // issue #47's `flip` fault: member 2 hands in -10 x a gradient like the others'.
  const int64_t n = 90;
  auto a = ramp(n, 0.01f), b = ramp(n, 0.011f), liar = ramp(n, -0.105f);
  std::vector<float> honest(static_cast<size_t>(n));
  for (size_t i = 0; i < honest.size(); ++i)
    honest[i] = 0.5f * (a[i] + b[i]);
  const auto off = [&](const std::vector<float>& v) {
    double d = 0, h = 0;
    for (size_t i = 0; i < v.size(); ++i)
      d += (v[i] - honest[i]) * (v[i] - honest[i]), h += honest[i] * honest[i];
    return std::sqrt(d / h);
  };
  group mean({a, b, liar}, {8, 8, 8}, 7);
  mean.start();
  mean.run();
  group clip({a, b, liar}, {8, 8, 8}, 7, aggregation{true, 1.0, 3});
  clip.start();
  clip.run();
  const double mean_off = off(mean.agreed()), clip_off = off(clip.agreed());
  CHECK(mean_off > 3.0);   // the mean goes the liar's way: -8/3 of the honest gradient
  CHECK(clip_off < 0.06);  // within the honest members' own spread (they differ by 10%)
  for (int r = 0; r < 3; ++r) {
    const auto& c = clip.m[static_cast<size_t>(r)]->outlying();
    REQUIRE(c.size() == 3);
    CHECK(c[2] > outlier_ratio);  // each owner saw the liar's part far out
    CHECK(c[0] <= outlier_ratio);
    CHECK(c[1] <= outlier_ratio);
    CHECK(mean.m[static_cast<size_t>(r)]->outlying() == std::vector<double>{0, 0, 0});
  }
}
