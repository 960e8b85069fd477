// Issue #47's pure parts: CenteredClip (policy/allreduce.hpp) against a plain
// reference written here, and the attribution of a disagreement
// (policy/verification.hpp): two against one, ties, a server that lies only sometimes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "policy/allreduce.hpp"
#include "policy/verification.hpp"

namespace {

using namespace swarm::policy;
using vec = std::vector<double>;

/// CenteredClip as the paper writes it, unweighted-then-weighted, in whole vectors.
vec reference_clip(const std::vector<vec>& x, const vec& w, double tau, int iterations) {
  const double sw = [&] {
    double s = 0;
    for (double wi : w)
      s += wi;
    return s;
  }();
  vec v(x[0].size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = 0; j < v.size(); ++j)
      v[j] += w[i] * x[i][j] / sw;
  for (int l = 0; l < iterations; ++l) {
    vec next = v;
    for (size_t i = 0; i < x.size(); ++i) {
      double norm = 0;
      for (size_t j = 0; j < v.size(); ++j)
        norm += (x[i][j] - v[j]) * (x[i][j] - v[j]);
      norm = std::sqrt(norm);
      const double scale = std::min(1.0, tau / norm);
      for (size_t j = 0; j < v.size(); ++j)
        next[j] += w[i] / sw * (x[i][j] - v[j]) * scale;
    }
    v = next;
  }
  return v;
}

struct parts_of {
  std::vector<std::vector<float>> values;
  std::vector<weighted_part> parts;
  parts_of(const std::vector<vec>& x, const vec& w) {
    for (const auto& xi : x)
      values.emplace_back(xi.begin(), xi.end());
    for (size_t i = 0; i < x.size(); ++i)
      parts.push_back({values[i].data(), w[i]});
  }
};

double distance(const std::vector<float>& a, const vec& b) {
  double d = 0;
  for (size_t j = 0; j < a.size(); ++j)
    d += (a[j] - b[j]) * (a[j] - b[j]);
  return std::sqrt(d);
}

}  // namespace

TEST_CASE("CenteredClip matches a plain reference and bounds a liar's pull", "[robust]") {
  std::mt19937_64 rng(47);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t peers = 2 + static_cast<size_t>(trial % 5), n = 33;
    std::vector<vec> x(peers, vec(n));
    vec w(peers);
    for (size_t i = 0; i < peers; ++i) {
      w[i] = 1 + static_cast<double>(i % 3);
      for (auto& e : x[i])
        e = normal(rng) * (i == 0 ? 10.0 : 1.0);  // the first far off
    }
    for (size_t i = 0; i < peers; ++i)  // the reference sees the floats the parts hold
      for (auto& e : x[i])
        e = static_cast<float>(e);
    const parts_of p(x, w);
    std::vector<float> out(n);
    std::vector<double> clipped;
    REQUIRE(centered_clip(p.parts, static_cast<int64_t>(n), 2.0, 5, out.data(), &clipped));
    const auto ref = reference_clip(x, w, 2.0, 5);
    CHECK(distance(out, ref) < 1e-4);
    REQUIRE(clipped.size() == peers);
    CHECK(clipped[0] > 0.5);  // the one far off was clipped hard
  }
}

TEST_CASE("CenteredClip is the weighted mean when every part lies within tau", "[robust]") {
  const std::vector<float> a{1, 2, 3}, b{1.5, 2.5, 2.5};
  const std::vector<weighted_part> parts{{a.data(), 1}, {b.data(), 3}};
  std::vector<float> mean(3), clip(3);
  REQUIRE(weighted_mean(parts, 3, mean.data()));
  std::vector<double> clipped;
  REQUIRE(centered_clip(parts, 3, 10.0, 10, clip.data(), &clipped));
  for (size_t j = 0; j < 3; ++j)
    CHECK(clip[j] == Approx(mean[j]).margin(1e-6));
  CHECK(clipped == std::vector<double>{0.0, 0.0});
  CHECK_FALSE(centered_clip(parts, 3, 0.0, 10, clip.data()));            // no radius
  CHECK_FALSE(centered_clip({{a.data(), 0}}, 3, 1.0, 10, clip.data()));  // no samples
}

TEST_CASE("a flipped, scaled contribution moves CenteredClip little and the mean a lot", "[robust]") {
  // issue #47's `flip` fault: one of three members sends -10 x its gradient.
  const std::vector<float> g1{1.0f, -0.5f, 0.25f}, g2{1.1f, -0.4f, 0.2f}, liar{-10.5f, 4.5f, -2.25f};
  const std::vector<weighted_part> parts{{g1.data(), 1}, {g2.data(), 1}, {liar.data(), 1}};
  std::vector<float> mean(3), clip(3);
  REQUIRE(weighted_mean(parts, 3, mean.data()));
  REQUIRE(centered_clip(parts, 3, 0.5, 60, clip.data()));  // from the mean, 4 away: 1/6 closer per iteration
  const vec honest{1.05, -0.45, 0.225};
  CHECK(distance(mean, honest) > 3.0);
  CHECK(distance(clip, honest) < 0.4);
}

TEST_CASE("CenteredClip gives a part holding NaN no weight", "[robust]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a{1, 1}, b{3, 3}, bad{nan, 0};
  std::vector<float> out(2);
  std::vector<double> clipped;
  REQUIRE(centered_clip({{a.data(), 1}, {b.data(), 1}, {bad.data(), 5}}, 2, 100.0, 3, out.data(), &clipped));
  CHECK(out[0] == Approx(2.0));
  CHECK(out[1] == Approx(2.0));
  CHECK(clipped[2] == 1.0);
  CHECK_FALSE(centered_clip({{bad.data(), 1}}, 2, 1.0, 3, out.data()));
}

TEST_CASE("the server outside the agreeing majority is charged; ties and lone pairs charge nobody", "[robust]") {
  const double tol = 0.1, far = 5.0, nan = std::numeric_limits<double>::quiet_NaN();
  // Two against one: the first (the answer being checked) is the odd one.
  CHECK(charged({{0, far, far}, {far, 0, 0.05}, {far, 0.05, 0}}, tol) == std::vector<size_t>{0});
  // The verifier lied instead.
  CHECK(charged({{0, far, 0.02}, {far, 0, far}, {0.02, far, 0}}, tol) == std::vector<size_t>{1});
  // Everyone agrees: nobody.
  CHECK(charged({{0, 0.01, 0.02}, {0.01, 0, 0.01}, {0.02, 0.01, 0}}, tol).empty());
  // Two that disagree: nobody can be told wrong yet (a referee is asked).
  CHECK(charged({{0, far}, {far, 0}}, tol).empty());
  // Three that all disagree: no majority.
  CHECK(charged({{0, far, far}, {far, 0, far}, {far, far, 0}}, tol).empty());
  // A chain (A~B, B~C, not A~C): two groups of two, tied.
  CHECK(charged({{0, 0.05, far}, {0.05, 0, 0.05}, {far, 0.05, 0}}, tol).empty());
  // NaN is disagreement, wherever it stands.
  CHECK(charged({{0, nan, far}, {nan, 0, 0.0}, {far, 0.0, 0}}, tol) == std::vector<size_t>{0});
  // Five: two liars who agree with each other, three honest ones.
  std::vector<std::vector<double>> five(5, std::vector<double>(5, 0.0));
  for (size_t i = 0; i < 5; ++i)
    for (size_t j = 0; j < 5; ++j)
      five[i][j] = (i < 2) == (j < 2) ? 0.0 : far;
  CHECK(charged(five, tol) == std::vector<size_t>{0, 1});
  // Malformed input: nobody.
  CHECK(charged({{0, far}, {far}}, tol).empty());
  CHECK(charged({}, tol).empty());
}

TEST_CASE("a server that lies only sometimes is banned all the same, once", "[robust]") {
  strike_book book(3);
  int bans = 0, checks = 0;
  for (; checks < 30 && !book.banned("sometimes"); ++checks)
    if (checks % 3 == 2)  // every third answer checked is a lie
      bans += book.charge("sometimes");
  CHECK(book.banned("sometimes"));
  CHECK(checks == 9);
  CHECK(bans == 1);
  CHECK_FALSE(book.charge("sometimes"));  // a fourth strike bans nobody again
  CHECK(book.strikes("honest") == 0);
  CHECK_FALSE(book.banned("honest"));
}

TEST_CASE("clipped_mean starts from the median: three rounds' worth of iterations leave a flipped part out",
          "[robust]") {
  // What a stage's all-reduce runs (--aggregation centered-clip, radius 1,
  // iterations 3): the same flipped, scaled member as above, no scale given.
  const std::vector<float> g1{1.0f, -0.5f, 0.25f}, g2{1.1f, -0.4f, 0.2f}, liar{-10.5f, 4.5f, -2.25f};
  const std::vector<weighted_part> parts{{g1.data(), 1}, {g2.data(), 1}, {liar.data(), 1}};
  std::vector<float> out(3);
  std::vector<double> outlying;
  REQUIRE(clipped_mean(parts, 3, aggregation{true, 1.0, 3}, out.data(), &outlying));
  const vec honest{1.05, -0.45, 0.225};
  CHECK(distance(out, honest) < 0.15);  // the two honest parts are 0.15 apart
  REQUIRE(outlying.size() == 3);
  CHECK(outlying[2] > outlier_ratio);  // the liar, far outside
  CHECK(outlying[0] <= outlier_ratio);
  CHECK(outlying[1] <= outlier_ratio);
  // Every part alike but one: that one is simply left out.
  const std::vector<float> same{2.0f, 2.0f, 2.0f};
  REQUIRE(clipped_mean({{same.data(), 1}, {same.data(), 2}, {liar.data(), 1}}, 3, aggregation{true, 1.0, 3}, out.data(),
                       &outlying));
  CHECK(out == same);
  CHECK(outlying[0] == 0.0);
  CHECK(outlying[2] > outlier_ratio);
  // Honest parts of unequal samples (noise shrinking with sqrt(samples), the
  // stage's usual case): near the weighted mean, and nobody an outlier, in
  // every one of 200 draws; the same parts with one flipped and scaled by 10:
  // that one an outlier in every draw.
  std::mt19937 rng(47);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  int false_outliers = 0, caught = 0;
  double worst = 0;
  for (int draw = 0; draw < 200; ++draw) {
    const std::vector<double> samples{8, 16, 24, 32, 8};
    std::vector<std::vector<float>> p(samples.size(), std::vector<float>(64));
    std::vector<weighted_part> all;
    for (size_t i = 0; i < p.size(); ++i) {
      for (size_t j = 0; j < p[i].size(); ++j)
        p[i][j] = 0.2f * std::sin(static_cast<float>(j)) + noise(rng) / std::sqrt(static_cast<float>(samples[i]));
      all.push_back({p[i].data(), samples[i]});
    }
    std::vector<float> mean(64), clip(64);
    REQUIRE(weighted_mean(all, 64, mean.data()));
    REQUIRE(clipped_mean(all, 64, aggregation{true, 1.0, 3}, clip.data(), &outlying));
    worst = std::max(worst, *std::max_element(outlying.begin(), outlying.end()));
    false_outliers += std::count_if(outlying.begin(), outlying.end(), [](double x) { return x > outlier_ratio; });
    CHECK(distance(clip, vec(mean.begin(), mean.end())) < 0.5);  // the mean's own error is ~0.5 (64 x 1/sqrt(88))
    for (auto& x : p[4])
      x *= -10.0f;
    REQUIRE(clipped_mean(all, 64, aggregation{true, 1.0, 3}, clip.data(), &outlying));
    caught += outlying[4] > outlier_ratio;
  }
  std::cout << "honest parts' largest outlying score in 200 draws: " << worst << "\n";
  CHECK(false_outliers == 0);
  CHECK(caught == 200);
  CHECK_FALSE(clipped_mean({{g1.data(), 0}}, 3, aggregation{true, 1.0, 3}, out.data()));  // no samples
}
