// Tier (a): the stage worker's gradients as the averaging round sees them: take_gradient
// hands out the mean and counts stale samples, restore and held microbatches, the clip over
// the model's norm, replicas that stay bit-identical, and apply_gradient's refusals.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "models/stage_worker.hpp"
#include "actors/stage_calls.hpp"

#include <catch2/catch.hpp>

#include "stage_worker_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <vector>

using namespace swarm;
using namespace swarm::testing::stage_worker_helpers;

namespace {

/// The samples-weighted mean of two servers' gradients, as the stage all-reduce computes it.
std::vector<float> weighted_mean(const local_gradient& a, const local_gradient& b) {
  REQUIRE(a.values.size() == b.values.size());
  const double total = static_cast<double>(a.samples + b.samples);
  std::vector<float> out(a.values.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(
        (a.values[i] * static_cast<double>(a.samples) + b.values[i] * static_cast<double>(b.samples)) / total);
  return out;
}

}  // namespace

TEST_CASE("take_gradient hands out the mean over microbatches and empties the accumulator", "[worker]") {
  const auto cfg = small_model();
  stage_worker both(cfg, 0, 2, "cpu"), one_by_one(cfg, 0, 2, "cpu");
  const auto n = static_cast<size_t>(both.parameter_count());
  feed(both, 1);
  feed(both, 2);
  feed(one_by_one, 1);
  const auto g1 = one_by_one.take_gradient();
  feed(one_by_one, 2);
  const auto g2 = one_by_one.take_gradient();
  const auto g = both.take_gradient();

  REQUIRE(g.values.size() == n);
  REQUIRE(g.samples == 2 * batch);
  REQUIRE(g.microbatches == 2);
  REQUIRE(g1.samples == batch);
  REQUIRE(g1.microbatches == 1);
  std::vector<float> half_sum(n);
  double largest = 0;
  for (size_t i = 0; i < n; ++i) {
    half_sum[i] = (g1.values[i] + g2.values[i]) / 2.0f;
    largest = std::max(largest, std::abs(static_cast<double>(g.values[i])));
  }
  const double diff = max_abs_diff(g.values, half_sum);
  const double spread = max_abs_diff(g1.values, g2.values);
  std::cout << "take_gradient: " << n << " values, max |g| " << largest << ", max |g - (g1 + g2) / 2| " << diff
            << ", max |g1 - g2| " << spread << "\n";
  REQUIRE(spread > 0);  // the two microbatches differ, so a sum or a single one would not pass
  REQUIRE(diff <= 1e-6 * std::max(1.0, largest));

  // Emptied: a second take is all zeros and later microbatches start the next step.
  REQUIRE(both.accumulated_samples() == 0);
  const auto empty = both.take_gradient();
  REQUIRE(empty.values.size() == n);
  REQUIRE(empty.samples == 0);
  REQUIRE(empty.microbatches == 0);
  REQUIRE(std::all_of(empty.values.begin(), empty.values.end(), [](float v) { return v == 0.0f; }));
  feed(both, 3);
  const auto next = both.take_gradient();
  REQUIRE(next.samples == batch);
  REQUIRE(next.microbatches == 1);
  REQUIRE(both.steps() == 0);  // taking is not stepping
}

TEST_CASE("take_gradient counts the samples accumulated before the last step as stale", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 0, 2, "cpu");
  feed(w, 1);
  auto first = w.take_gradient();  // a round takes it ...
  CHECK(first.stale_samples == 0);
  feed(w, 2);  // ... and this one comes while the round runs: on the parameters the round steps
  REQUIRE_FALSE(w.apply_gradient(first.values));
  feed(w, 3);  // after the step: fresh
  const auto second = w.take_gradient();
  CHECK(second.samples == 2 * batch);
  CHECK(second.stale_samples == batch);
  REQUIRE_FALSE(w.apply_gradient(second.values));
  feed(w, 4);
  CHECK(w.take_gradient().stale_samples == 0);  // counted once: the take starts afresh
  w.apply_step();                               // local training takes and steps at once: nothing is ever stale
  feed(w, 5);
  w.apply_step();
  feed(w, 6);
  CHECK(w.take_gradient().stale_samples == 0);
}

TEST_CASE("the clip bounds the model's norm: this stage's with the other stages' squared norms", "[worker]") {
  auto cfg = small_model();
  cfg.grad_clip = 1.0;
  stage_worker clipped(cfg, 0, 2, "cpu"), own(cfg, 0, 2, "cpu");
  auto plain_cfg = cfg;
  plain_cfg.grad_clip = 0;
  stage_worker scaled(plain_cfg, 0, 2, "cpu");
  const auto n = static_cast<size_t>(clipped.parameter_count());
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = 0.001f * static_cast<float>(static_cast<int>(i % 17) - 8);
  double sq = 0;
  for (float v : g)
    sq += static_cast<double>(v) * v;
  const double norm = std::sqrt(sq);
  REQUIRE(norm > 0.5);             // clipped alone too: the two cases below must differ
  const double others = 4.0 * sq;  // the model's norm is sqrt(5) x this stage's
  REQUIRE_FALSE(clipped.apply_gradient(g, others));
  CHECK(clipped.last_grad_norm() == Approx(norm).epsilon(1e-6));
  const double scale = 1.0 / (std::sqrt(sq + others) + 1e-6);
  std::vector<float> by_hand(n);
  for (size_t i = 0; i < n; ++i)
    by_hand[i] = static_cast<float>(g[i] * scale);
  REQUIRE_FALSE(scaled.apply_gradient(by_hand));
  REQUIRE_FALSE(own.apply_gradient(g));  // the stage's norm alone: a larger step direction after Adam's moments
  const auto a = clipped.named_parameters(), b = scaled.named_parameters(), c = own.named_parameters();
  double diff = 0, own_diff = 0;
  for (const auto& [name, t] : a) {
    diff = std::max(diff, (t - b.at(name)).abs().max().item<double>());
    own_diff = std::max(own_diff, (t - c.at(name)).abs().max().item<double>());
  }
  std::printf("clip over the model's norm: max |clipped - scaled by hand| %.3g, against the stage's own norm %.3g\n",
              diff, own_diff);
  CHECK(diff <= 1e-6);
  // A first Adam step hardly sees a gradient's scale, so compare a second step.
  REQUIRE_FALSE(clipped.apply_gradient(g, 0));
  REQUIRE_FALSE(own.apply_gradient(g, others));
  const auto a2 = clipped.named_parameters(), c2 = own.named_parameters();
  double swapped = 0;
  for (const auto& [name, t] : a2)
    swapped = std::max(swapped, (t - c2.at(name)).abs().max().item<double>());
  CHECK(swapped > 1e-7);
}

TEST_CASE("restore_gradient puts back what a take gave out, as if never taken", "[worker]") {
  const auto cfg = small_model();
  stage_worker kept(cfg, 0, 2, "cpu"), whole(cfg, 0, 2, "cpu");
  feed(kept, 1);
  feed(kept, 2);
  feed(whole, 1);
  feed(whole, 2);
  feed(whole, 3);
  auto back = kept.take_gradient();  // a round that failed before using it hands it back
  REQUIRE_FALSE(kept.restore_gradient(back, false));
  CHECK(kept.accumulated_samples() == 2 * batch);
  feed(kept, 3);
  const auto a = kept.take_gradient(), b = whole.take_gradient();
  CHECK(a.samples == b.samples);
  CHECK(a.microbatches == 3);
  CHECK(a.stale_samples == 0);
  CHECK(max_abs_diff(a.values, b.values) <= 1e-6);  // mean x 2 / 3 + third / 3: rounding only
  // Carried past a step: every sample of it is stale.
  REQUIRE_FALSE(kept.restore_gradient(a, true));
  CHECK(kept.take_gradient().stale_samples == 3 * batch);
  // Another length is refused, the accumulator untouched.
  local_gradient wrong{std::vector<float>(3, 1.0f), batch, 1, 0};
  CHECK(kept.restore_gradient(wrong, false).code() == errc::WRONG_SHAPE);
  CHECK(kept.accumulated_samples() == 0);
}

TEST_CASE("a held microbatch counts only once settled: kept, as if added at once; dropped, not at all", "[worker]") {
  const auto cfg = small_model();
  stage_worker direct(cfg, 0, 2, "cpu"), held(cfg, 0, 2, "cpu");
  const commit_gate hold = [] { return commit_decision{true, true, {}}; };
  auto feed_held = [&](uint64_t seed) {
    REQUIRE(serve_backward(held, bwd(0, tokens(batch, len, seed), hidden(batch, len, cfg.d_model, seed + 1000)), hold));
  };
  feed(direct, 1);
  feed(direct, 2);
  feed_held(1);
  CHECK(held.held_samples() == batch);
  CHECK(held.accumulated_samples() == 0);
  feed_held(2);  // holding another adds the first
  CHECK(held.accumulated_samples() == batch);
  CHECK(held.settle_held(true) == batch);
  CHECK(held.held_samples() == 0);
  CHECK(held.settle_held(true) == 0);  // nothing held: nothing added twice
  const auto a = direct.take_gradient();
  const auto b = held.take_gradient();
  REQUIRE(b.samples == 2 * batch);
  REQUIRE(b.microbatches == 2);
  CHECK(max_abs_diff(a.values, b.values) == 0.0);

  // Dropped: the sums stay those of what was kept; a take leaves the held one alone.
  feed(direct, 3);
  feed_held(3);
  feed_held(4);
  const auto before_drop = held.take_gradient();  // microbatch 3 only: 4 is still held
  CHECK(before_drop.samples == batch);
  CHECK(held.held_samples() == batch);
  CHECK(held.settle_held(false) == batch);
  CHECK(held.accumulated_samples() == 0);
  CHECK(max_abs_diff(direct.take_gradient().values, before_drop.values) == 0.0);

  // A state import drops a held microbatch with the accumulator.
  feed_held(5);
  REQUIRE_FALSE(held.import_state(direct.export_state()));
  CHECK(held.held_samples() == 0);
  CHECK(held.accumulated_samples() == 0);
}

TEST_CASE("replicas that apply the same averaged gradient stay bit-identical", "[worker]") {
  const auto cfg = small_model();  // grad_clip on: clipping must be deterministic too
  stage_worker a(cfg, 0, 2, "cpu"), b(cfg, 0, 2, "cpu");
  uint64_t previous = a.parameter_hash();
  REQUIRE(b.parameter_hash() == previous);
  for (uint64_t round = 0; round < 3; ++round) {
    // Different data and different sample counts on the two replicas.
    feed(a, 100 + 10 * round);
    feed(a, 101 + 10 * round, 2);
    feed(b, 105 + 10 * round);
    const auto ga = a.take_gradient(), gb = b.take_gradient();
    REQUIRE(ga.samples == batch + 2);
    REQUIRE(gb.samples == batch);
    const auto own_diff = max_abs_diff(ga.values, gb.values);
    const auto avg = weighted_mean(ga, gb);
    REQUIRE(code(a.apply_gradient(avg)) == errc::OK);
    REQUIRE(code(b.apply_gradient(avg)) == errc::OK);
    const auto ha = a.parameter_hash(), hb = b.parameter_hash();
    std::cout << "round " << round << ": local gradients differ by up to " << own_diff << "; hashes " << std::hex << ha
              << " " << hb << " (before " << previous << ")" << std::dec << "\n";
    REQUIRE(own_diff > 0);
    REQUIRE(ha == hb);
    REQUIRE(ha != previous);
    previous = ha;
  }
  REQUIRE(a.steps() == 3);
  REQUIRE(b.steps() == 3);
  REQUIRE(torch::equal(probe(a), probe(b)));
}

TEST_CASE("apply_gradient rejects a wrong length or non-finite values untouched", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 1, 2, "cpu");
  const auto n = static_cast<size_t>(w.parameter_count());
  const auto before = w.parameter_hash();
  // A microbatch in the accumulator: rejected (and accepted) gradients leave it alone.
  REQUIRE(serve_forward(w, fwd(1, hidden(batch, len, cfg.d_model, 1), tokens(batch, len, 2))));

  for (size_t size : {size_t{0}, n - 1, n + 1}) {
    const auto err = w.apply_gradient(std::vector<float>(size, 0.01f));
    std::cout << "length " << size << ": " << (err ? describe(err) : "OK") << "\n";
    REQUIRE(code(err) == errc::WRONG_SHAPE);
  }
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> g(n, 0.01f);
    g[n / 2] = bad;
    const auto err = w.apply_gradient(g);
    std::cout << "value " << bad << ": " << (err ? describe(err) : "OK") << "\n";
    REQUIRE(code(err) == errc::NON_FINITE);
  }
  REQUIRE(w.parameter_hash() == before);
  REQUIRE(w.steps() == 0);
  REQUIRE(w.accumulated_samples() == batch);

  REQUIRE(code(w.apply_gradient(std::vector<float>(n, 0.01f))) == errc::OK);
  REQUIRE(w.steps() == 1);
  REQUIRE(w.parameter_hash() != before);
  REQUIRE(w.accumulated_samples() == batch);
}
