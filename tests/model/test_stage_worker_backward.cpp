// Tier (a): how the stage worker computes a backward: on the parameters of its
// forward's step (kept versions), from the forward's recorded graph (the activation
// cache), and in bf16 near fp32; each against a reference, bit for bit where it can be.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "models/stage_backward.hpp"
#include "models/stage_worker.hpp"

#include <catch2/catch.hpp>

#include "stage_worker_helpers.hpp"

#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

using namespace swarm;
using namespace swarm::testing::stage_worker_helpers;

TEST_CASE("a backward whose forward ran a step ago recomputes on the parameters before that step", "[worker]") {
  const auto cfg = small_model();
  // `before` stays at step 0: the reference; `w` steps once, then gets the backward of a forward of step 0.
  stage_worker before(cfg, 0, 2, "cpu"), w(cfg, 0, 2, "cpu"), same(cfg, 0, 2, "cpu");
  feed(w, 1);
  feed(same, 1);
  const auto step = w.take_gradient();
  REQUIRE_FALSE(w.apply_gradient(step.values));
  REQUIRE_FALSE(same.apply_gradient(same.take_gradient().values));
  const auto stepped = probe(w);
  const auto hash = w.parameter_hash();
  REQUIRE(w.steps() == 1);

  const auto inputs = *decode_tensor(tokens(batch, len, 7), "inputs");
  const auto grad = *decode_tensor(hidden(batch, len, cfg.d_model, 8), "grad");
  REQUIRE(before.backward(inputs, grad));
  const auto reference = before.take_gradient();
  REQUIRE(w.backward(inputs, grad, {}, int64_t{0}));
  const auto on_previous = w.take_gradient();
  // Bit for bit the gradient the parameters of step 0 give, counted stale, and the parameters back as they were.
  CHECK(on_previous.values == reference.values);
  CHECK(on_previous.stale_samples == batch);
  CHECK(w.parameter_hash() == hash);
  CHECK(torch::equal(probe(w), stepped));

  // At its own step, or older than one step, or unknown: the current parameters, as before this rule.
  REQUIRE(same.backward(inputs, grad));
  const auto current = same.take_gradient();
  CHECK(current.values != reference.values);
  for (std::optional<int64_t> at : {std::optional<int64_t>{1}, std::optional<int64_t>{}}) {
    REQUIRE(w.backward(inputs, grad, {}, at));
    const auto g = w.take_gradient();
    CHECK(g.values == current.values);
    CHECK(g.stale_samples == 0);
  }
  // Later steps: each kept version serves its own step, up to kept_versions behind; older ones get the current.
  std::vector<std::vector<float>> at_step{reference.values, current.values};
  for (int64_t k = 2; k <= static_cast<int64_t>(stage_worker::kept_versions) + 1; ++k) {
    feed(w, static_cast<uint64_t>(k));
    feed(same, static_cast<uint64_t>(k));
    REQUIRE_FALSE(w.apply_gradient(w.take_gradient().values));
    REQUIRE_FALSE(same.apply_gradient(same.take_gradient().values));
    REQUIRE(same.backward(inputs, grad));
    at_step.push_back(same.take_gradient().values);
  }
  REQUIRE(w.steps() == static_cast<int64_t>(stage_worker::kept_versions) + 1);
  for (int64_t at = 0; at <= w.steps(); ++at) {
    INFO("forward at step " << at << ", backward at step " << w.steps());
    REQUIRE(w.backward(inputs, grad, {}, at));
    const bool kept = at >= w.steps() - static_cast<int64_t>(stage_worker::kept_versions);
    CHECK(w.take_gradient().values == at_step[static_cast<size_t>(kept ? at : w.steps())]);
  }
  // An import replaces the parameters: nothing from before it is kept.
  REQUIRE_FALSE(w.import_state(same.export_state()));
  REQUIRE(w.backward(inputs, grad, {}, w.steps() - 1));
  REQUIRE(same.backward(inputs, grad));
  CHECK(w.take_gradient().values == same.take_gradient().values);
}

TEST_CASE("a backward on its forward's recorded graph gives what recomputing gives, bit for bit", "[worker][cache]") {
  auto cfg = small_model();
  cfg.n_layers = 3;
  for (int stage : {0, 1}) {  // token ids in; hidden states in, with d/d inputs out
    INFO("stage " << stage << " of 3");
    stage_worker plain(cfg, stage, 3, "cpu"), cached(cfg, stage, 3, "cpu");
    const int64_t entry = recorded_forward_bytes(cfg, cached.span().blocks(), batch, len);
    cached.set_activation_cache(2 * entry);  // room for two
    auto input = [&](uint64_t seed) {
      return *decode_tensor(stage == 0 ? tokens(batch, len, seed) : hidden(batch, len, cfg.d_model, seed), "inputs");
    };
    const auto grad = *decode_tensor(hidden(batch, len, cfg.d_model, 99), "grad");
    // Backward of `x` on both: the same input gradient and accumulated gradient.
    auto same_backward = [&](const torch::Tensor& x, const std::string& key, std::optional<int64_t> at = {}) {
      auto a = plain.backward(x, grad, {}, at);
      auto b = cached.backward(x, grad, {}, at, key);
      REQUIRE(a);
      REQUIRE(b);
      CHECK(a->input_grad.defined() == (stage > 0));
      if (stage > 0)
        CHECK(torch::equal(a->input_grad, b->input_grad));
      CHECK(plain.take_gradient().values == cached.take_gradient().values);
    };
    auto forward = [&](const torch::Tensor& x, const std::string& key) {
      auto a = plain.forward(x);
      auto b = cached.forward(x, nullptr, {}, key);
      REQUIRE(a);
      REQUIRE(b);
      CHECK(torch::equal(a->outputs, b->outputs));  // recording changes nothing the wire carries
    };
    const auto x1 = input(1), x2 = input(2), x3 = input(3);
    forward(x1, "t#1");
    CHECK(cached.activation_cache().bytes == entry);
    same_backward(x1, "t#1");
    CHECK(cached.activation_cache().hits == 1);
    CHECK(cached.activation_cache().bytes == 0);  // taken out
    // Oldest out first: of three forwards with room for two, the first recomputes.
    forward(x1, "t#1");
    forward(x2, "t#2");
    forward(x3, "t#3");
    CHECK(cached.activation_cache().evicted == 1);
    CHECK(cached.activation_cache().peak_bytes == 2 * entry);
    same_backward(x3, "t#3");
    same_backward(x1, "t#1");
    CHECK(cached.activation_cache().hits == 2);
    CHECK(cached.activation_cache().misses == 1);
    // Other inputs under the key of a kept forward: recomputed, never the other microbatch's graph.
    same_backward(x1, "t#2");
    CHECK(cached.activation_cache().misses == 2);
    // A step between forward and backward: the recorded graph is gone; the
    // backward recomputes on the parameters before the step, as without a cache.
    forward(x2, "t#2");
    REQUIRE(plain.backward(input(5), grad));
    const auto step = plain.take_gradient().values;
    REQUIRE_FALSE(plain.apply_gradient(step));
    REQUIRE_FALSE(cached.apply_gradient(step));
    CHECK(cached.activation_cache().stepped == 1);
    CHECK(cached.activation_cache().bytes == 0);
    same_backward(x2, "t#2", 0);
    CHECK(cached.activation_cache().hits == 2);
    forward(x2, "t#2");
    same_backward(x2, "t#2", plain.steps());
    CHECK(cached.activation_cache().hits == 3);
    // Off: nothing kept.
    cached.set_activation_cache(0);
    forward(x3, "t#3");
    same_backward(x3, "t#3");
    CHECK(cached.activation_cache().hits == 3);
    CHECK(cached.activation_cache().bytes == 0);
  }
}

TEST_CASE("bf16 computes near fp32, keeps float32 everywhere else, and sees every step", "[worker][bf16]") {
  auto cfg = small_model();
  cfg.n_layers = 3;
  for (int stage : {0, 1, 2}) {
    INFO("stage " << stage << " of 3");
    stage_worker fp32(cfg, stage, 3, "cpu"), bf16(cfg, stage, 3, "cpu");
    bf16.set_bf16(true);
    const auto x = *decode_tensor(stage == 0 ? tokens(batch, len, 1) : hidden(batch, len, cfg.d_model, 1), "inputs");
    const auto targets = *decode_tensor(tokens(batch, len, 2), "targets");
    const auto grad = *decode_tensor(hidden(batch, len, cfg.d_model, 3), "grad");
    // One microbatch through both: forward (and the loss) and backward.
    auto through = [&](stage_worker& w) {
      torch::Tensor wire;
      float loss = 0;
      if (stage == 2) {
        auto r = w.forward(x, &targets);
        REQUIRE(r);
        wire = r->input_grad;
        loss = r->loss;
      } else {
        auto f = w.forward(x);
        REQUIRE(f);
        wire = f->outputs;
        auto b = w.backward(x, grad);
        REQUIRE(b);
        if (stage == 1)
          CHECK(b->input_grad.scalar_type() == torch::kFloat32);
      }
      return std::make_tuple(wire, loss, w.take_gradient());
    };
    const auto [wire32, loss32, g32] = through(fp32);
    const auto [wire16, loss16, g16] = through(bf16);
    // What crosses the wire stays float32, near fp32's: bfloat16 keeps 8 bits of mantissa.
    CHECK(wire16.scalar_type() == torch::kFloat32);
    const double scale = wire32.abs().max().item<double>();
    CHECK((wire16 - wire32).abs().max().item<double>() < 0.05 * scale + 1e-6);
    CHECK(std::abs(loss16 - loss32) < 0.01 * std::max(1.0f, loss32));
    // Exactly bf16's own rounding, not fp32's: the products did run in bfloat16.
    CHECK_FALSE(torch::equal(wire16, wire32));
    const double norm32 = std::sqrt(std::inner_product(g32.values.begin(), g32.values.end(), g32.values.begin(), 0.0));
    CHECK(max_abs_diff(g32.values, g16.values) < 0.05 * norm32);
    // A step changes the float32 masters in place; the next forward must use
    // them, not a bfloat16 copy cast before the step (autocast's cache).
    REQUIRE_FALSE(bf16.apply_gradient(g16.values));
    stage_worker fresh(cfg, stage, 3, "cpu");
    fresh.set_bf16(true);
    REQUIRE_FALSE(fresh.import_state(bf16.export_state()));
    CHECK(fresh.parameter_hash() == bf16.parameter_hash());
    const auto [after, loss_after, g_after] = through(bf16);
    const auto [fresh_wire, fresh_loss, g_fresh] = through(fresh);
    CHECK(torch::equal(after, fresh_wire));
    CHECK(g_after.values == g_fresh.values);
    CHECK_FALSE(torch::equal(after, wire16));
  }
}
