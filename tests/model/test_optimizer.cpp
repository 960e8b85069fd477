// The learning-rate schedule and LAMB (models/optimizer.hpp) against values
// computed by hand, and a schedule that survives a state transfer.
#include <cmath>

#include <torch/torch.h>

#include "models/optimizer.hpp"
#include "models/stage_worker.hpp"

#include <catch2/catch.hpp>

#include "model_configs.hpp"

using namespace swarm;

namespace {

model_config schedule(const std::string& kind, int64_t warmup, double lr, double min_lr, int64_t decay) {
  model_config c;
  c.lr_schedule = kind;
  c.warmup_steps = warmup;
  c.lr = lr;
  c.min_lr = min_lr;
  c.decay_steps = decay;
  return c;
}

}  // namespace

TEST_CASE("learning-rate schedules: warm-up, constant, cosine to min-lr", "[optimizer]") {
  const auto constant = schedule("constant", 0, 0.01, 0, 0);
  CHECK(learning_rate(constant, 0) == 0.01);
  CHECK(learning_rate(constant, 1000000) == 0.01);

  const auto warm = schedule("constant", 4, 0.01, 0, 0);
  CHECK(learning_rate(warm, 0) == Approx(0.0025));  // lr x 1/4
  CHECK(learning_rate(warm, 2) == Approx(0.0075));
  CHECK(learning_rate(warm, 3) == Approx(0.01));
  CHECK(learning_rate(warm, 4) == 0.01);

  // warm-up 10, then cosine over 100 steps from 1e-3 to 1e-4: halfway (step 60) it is the mean.
  const auto cosine = schedule("cosine", 10, 1e-3, 1e-4, 110);
  CHECK(learning_rate(cosine, 9) == Approx(1e-3));
  CHECK(learning_rate(cosine, 10) == Approx(1e-3));
  CHECK(learning_rate(cosine, 60) == Approx(5.5e-4));
  CHECK(learning_rate(cosine, 35) == Approx(1e-4 + 0.5 * 9e-4 * (1 + std::cos(M_PI * 0.25))));
  CHECK(learning_rate(cosine, 110) == Approx(1e-4));
  CHECK(learning_rate(cosine, 500) == Approx(1e-4));  // past the end: min-lr, not a second cycle
  for (int64_t s = 11; s <= 110; ++s)
    CHECK(learning_rate(cosine, s) <= learning_rate(cosine, s - 1));
}

TEST_CASE("LAMB: one step of each tensor scaled by its own trust ratio, as computed by hand", "[optimizer]") {
  // Two tensors in one group: w = [3, 4] (norm 5), grad [1, -2]; b = [0, 0] (norm 0), grad [0.5, 0.5].
  auto w = torch::tensor({3.0f, 4.0f}).requires_grad_(true);
  auto b = torch::tensor({0.0f, 0.0f}).requires_grad_(true);
  const double lr = 0.1, wd = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8;
  lamb opt({w, b}, torch::optim::AdamWOptions(lr).betas({b1, b2}).weight_decay(wd).eps(eps));
  w.mutable_grad() = torch::tensor({1.0f, -2.0f});
  b.mutable_grad() = torch::tensor({0.5f, 0.5f});
  opt.step();
  // Step 1: m = (1-b1) g, v = (1-b2) g^2; bias-corrected m/(1-b1) = g, v/(1-b2) = g^2, so the
  // Adam direction is g / (|g| + eps) = sign(g) = [1, -1]; plus wd w = [0.03, 0.04]:
  // r_w = [1.03, -0.96], ||r_w|| = sqrt(1.03^2 + 0.96^2); trust = 5 / ||r_w||.
  const double rn = std::sqrt(1.03 * 1.03 + 0.96 * 0.96);
  const double trust = 5.0 / rn;
  CHECK(w[0].item<double>() == Approx(3.0 - lr * trust * 1.03).epsilon(1e-5));
  CHECK(w[1].item<double>() == Approx(4.0 - lr * trust * -0.96).epsilon(1e-5));
  // b has norm 0: trust ratio 1, so it moves by lr x sign(g) (no decay on zeros).
  CHECK(b[0].item<double>() == Approx(-0.1).epsilon(1e-5));
  CHECK(b[1].item<double>() == Approx(-0.1).epsilon(1e-5));
  // AdamW itself moves w by about lr per element whatever its norm: LAMB differs.
  auto w2 = torch::tensor({3.0f, 4.0f}).requires_grad_(true);
  torch::optim::AdamW adamw({w2}, torch::optim::AdamWOptions(lr).betas({b1, b2}).weight_decay(wd).eps(eps));
  w2.mutable_grad() = torch::tensor({1.0f, -2.0f});
  adamw.step();
  CHECK(std::abs(w2[0].item<double>() - w[0].item<double>()) > 0.1);
}

TEST_CASE("a stage's schedule follows its optimizer step through a state transfer", "[optimizer][worker]") {
  auto cfg = testing::tiny_model();
  cfg.optimizer = "lamb";
  cfg.lr_schedule = "cosine";
  cfg.warmup_steps = 2;
  cfg.decay_steps = 6;
  cfg.min_lr = 1e-4;
  stage_worker a(cfg, 0, 2, "cpu"), b(cfg, 0, 2, "cpu");
  const auto n = static_cast<size_t>(a.parameter_count());
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = 0.01f * static_cast<float>((i * 7919) % 13) - 0.06f;
  for (int s = 0; s < 3; ++s)
    REQUIRE_FALSE(a.apply_gradient(g));
  // b joins at step 3 by copying a's state; the next step must use the rate of step 3 on both.
  REQUIRE_FALSE(b.import_state(a.export_state()));
  REQUIRE(b.steps() == 3);
  REQUIRE_FALSE(a.apply_gradient(g));
  REQUIRE_FALSE(b.apply_gradient(g));
  CHECK(a.parameter_hash() == b.parameter_hash());
  // And a fresh worker that took the same steps from the start agrees too (no hidden state).
  stage_worker c(cfg, 0, 2, "cpu");
  for (int s = 0; s < 4; ++s)
    REQUIRE_FALSE(c.apply_gradient(g));
  CHECK(c.parameter_hash() == a.parameter_hash());
  // The schedule did something: a constant rate ends elsewhere.
  auto flat = cfg;
  flat.lr_schedule = "constant";
  flat.warmup_steps = 0;
  stage_worker d(flat, 0, 2, "cpu");
  for (int s = 0; s < 4; ++s)
    REQUIRE_FALSE(d.apply_gradient(g));
  CHECK(d.parameter_hash() != a.parameter_hash());
}
