// Tier (a/b): the stage worker's boundary: every bad request gets its error code
// and leaves the worker usable with its parameters untouched; accumulation and
// steps match a reference computed with the whole model.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "models/gpt.hpp"
#include "models/stage_worker.hpp"
#include "models/tensor_codec.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <limits>

using namespace swarm;

namespace {

constexpr int64_t batch = 3;
constexpr int64_t len = 16;

model_config small_config() {
  model_config cfg;
  cfg.d_model = 32;
  cfg.n_heads = 2;
  cfg.n_layers = 4;
  cfg.seq_len = len;
  cfg.microbatch = batch;
  cfg.seed = 1234;
  return cfg;
}

proto::tensor tokens(int64_t b, int64_t t, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return encode_tensor(torch::randint(0, 256, {b, t}, gen, torch::kLong));
}

proto::tensor hidden(int64_t b, int64_t t, int64_t d, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return encode_tensor(torch::randn({b, t, d}, gen));
}

proto::forward_request fwd(uint32_t stage, proto::tensor inputs) {
  proto::forward_request req;
  req.set_stage(stage);
  *req.mutable_inputs() = std::move(inputs);
  return req;
}

proto::forward_request fwd(uint32_t stage, proto::tensor inputs, proto::tensor targets) {
  auto req = fwd(stage, std::move(inputs));
  *req.mutable_targets() = std::move(targets);
  return req;
}

proto::backward_request bwd(uint32_t stage, proto::tensor inputs, proto::tensor output_grad) {
  proto::backward_request req;
  req.set_stage(stage);
  *req.mutable_inputs() = std::move(inputs);
  *req.mutable_output_grad() = std::move(output_grad);
  return req;
}

template <class T>
errc code(const caf::expected<T>& r) {
  return r ? errc::OK : code_of(r.error());
}

template <class T>
std::string message(const caf::expected<T>& r) {
  return r ? "OK" : describe(r.error());
}

#define REQUIRE_CODE(expr, expected)                 \
  do {                                               \
    auto result_ = (expr);                           \
    INFO(#expr << " -> " << message(result_));       \
    REQUIRE(code(result_) == (expected));            \
  } while (false)

/// Stage 0's outputs for a fixed input: equal before and after iff the parameters are.
torch::Tensor probe(stage_worker& w) {
  auto r = w.forward(fwd(0, tokens(batch, len, 42)));
  REQUIRE(r);
  return *decode_tensor(r->outputs(), "outputs");
}

proto::tensor with_value(torch::Tensor t, int64_t index, double value) {
  t.view({-1})[index] = value;
  return encode_tensor(t);
}

} // namespace

TEST_CASE("a non-last stage rejects bad requests and stays usable", "[worker]") {
  const auto cfg = small_config();
  stage_worker w(cfg, 0, 2, "cpu");
  const auto before = probe(w);
  const auto good = tokens(batch, len, 1);
  const auto good_grad = hidden(batch, len, cfg.d_model, 2);

  SECTION("forward") {
    REQUIRE_CODE(w.forward(fwd(1, good)), errc::UNKNOWN_STAGE);
    REQUIRE_CODE(w.forward(fwd(7, good)), errc::UNKNOWN_STAGE);
    REQUIRE_CODE(w.forward(proto::forward_request{}), errc::BAD_REQUEST);  // no inputs
    REQUIRE_CODE(w.forward(fwd(0, good, good)), errc::BAD_REQUEST);         // targets on a non-last stage
    REQUIRE_CODE(w.forward(fwd(0, hidden(batch, len, cfg.d_model, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, encode_tensor(torch::zeros({batch, len}, torch::kInt32)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, encode_tensor(torch::zeros({batch, len}, torch::kFloat32)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, encode_tensor(torch::zeros({batch, len, 1}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, encode_tensor(torch::zeros({len}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, encode_tensor(torch::zeros({0, len}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, encode_tensor(torch::zeros({batch, 0}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.forward(fwd(0, tokens(batch, len + 1, 3))), errc::WRONG_SHAPE);  // T > seq_len
    REQUIRE_CODE(w.forward(fwd(0, with_value(torch::zeros({batch, len}, torch::kLong), 5, 300))), errc::BAD_REQUEST);
    REQUIRE_CODE(w.forward(fwd(0, with_value(torch::zeros({batch, len}, torch::kLong), 5, -1))), errc::BAD_REQUEST);
    auto garbage = good;
    garbage.set_codec(static_cast<proto::codec>(5));
    REQUIRE_CODE(w.forward(fwd(0, garbage)), errc::BAD_REQUEST);
    garbage = good;
    garbage.mutable_data()->pop_back();
    REQUIRE_CODE(w.forward(fwd(0, garbage)), errc::BAD_REQUEST);
    garbage = good;
    garbage.set_dtype(static_cast<proto::dtype>(77));
    REQUIRE_CODE(w.forward(fwd(0, garbage)), errc::BAD_REQUEST);
  }
  SECTION("backward") {
    REQUIRE_CODE(w.backward(bwd(1, good, good_grad)), errc::UNKNOWN_STAGE);
    REQUIRE_CODE(w.backward(bwd(0, good, hidden(batch, len, cfg.d_model + 1, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.backward(bwd(0, good, hidden(batch, len - 1, cfg.d_model, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.backward(bwd(0, good, hidden(batch + 1, len, cfg.d_model, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(w.backward(bwd(0, good, encode_tensor(torch::zeros({batch, len, cfg.d_model}, torch::kFloat64)))),
                 errc::WRONG_SHAPE);
    auto nan_grad = torch::randn({batch, len, cfg.d_model});
    REQUIRE_CODE(w.backward(bwd(0, good, with_value(nan_grad, 17, std::nan("")))), errc::NON_FINITE);
    REQUIRE_CODE(w.backward(bwd(0, good, with_value(nan_grad, 17, INFINITY))), errc::NON_FINITE);
    REQUIRE_CODE(w.backward(bwd(0, with_value(torch::zeros({batch, len}, torch::kLong), 0, 256), good_grad)),
                 errc::BAD_REQUEST);
    REQUIRE_CODE(w.backward(proto::backward_request{}), errc::BAD_REQUEST);
  }

  // Nothing above may have touched the parameters or the accounting.
  REQUIRE(w.accumulated_samples() == 0);
  const double drift = (probe(w) - before).abs().max().item<double>();
  std::cout << "stage 0 after rejected requests: max output drift " << drift << "\n";
  REQUIRE(drift == 0.0);

  // And the worker still serves valid requests.
  auto out = w.forward(fwd(0, good));
  REQUIRE(out);
  REQUIRE(out->outputs().shape_size() == 3);
  REQUIRE(out->outputs().shape(2) == cfg.d_model);
  auto back = w.backward(bwd(0, good, good_grad));
  REQUIRE(back);
  REQUIRE(!back->has_input_grad());  // token ids have no gradient
  REQUIRE(w.accumulated_samples() == batch);
}

TEST_CASE("wrong shapes are reported with what was expected", "[worker]") {
  stage_worker w(small_config(), 1, 2, "cpu");
  auto r = w.forward(fwd(1, tokens(8, 64, 1), tokens(8, 64, 2)));
  REQUIRE(code(r) == errc::WRONG_SHAPE);
  std::cout << "example: " << message(r) << "\n";
  REQUIRE(message(r).find("inputs [8, 64] int64 expected [B, T<=16, 32] float32") != std::string::npos);
}

TEST_CASE("the last stage rejects bad requests and non-finite losses", "[worker]") {
  const auto cfg = small_config();
  stage_worker w(cfg, 1, 2, "cpu");
  const auto x = hidden(batch, len, cfg.d_model, 1);
  const auto y = tokens(batch, len, 2);
  auto h = *decode_tensor(x, "x");

  REQUIRE_CODE(w.forward(fwd(0, x, y)), errc::UNKNOWN_STAGE);
  REQUIRE_CODE(w.forward(fwd(1, x)), errc::BAD_REQUEST);  // no targets
  REQUIRE_CODE(w.forward(fwd(1, x, tokens(batch, len - 1, 2))), errc::WRONG_SHAPE);
  REQUIRE_CODE(w.forward(fwd(1, x, encode_tensor(torch::zeros({batch, len}, torch::kInt32)))), errc::WRONG_SHAPE);
  REQUIRE_CODE(w.forward(fwd(1, x, with_value(torch::zeros({batch, len}, torch::kLong), 3, 256))), errc::BAD_REQUEST);
  REQUIRE_CODE(w.forward(fwd(1, with_value(h.clone(), 9, std::nan("")), y)), errc::NON_FINITE);
  REQUIRE_CODE(w.forward(fwd(1, with_value(h.clone(), 9, -INFINITY), y)), errc::NON_FINITE);
  REQUIRE_CODE(w.backward(bwd(1, x, x)), errc::BAD_REQUEST);  // its forward already ran backward
  // Finite inputs whose squares overflow float32: LayerNorm turns them into NaN.
  auto huge = torch::full({batch, len, cfg.d_model}, 3e38f);
  huge.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, 16)}, -3e38f);
  auto overflow = w.forward(fwd(1, encode_tensor(huge), y));
  std::cout << "overflowing inputs: " << message(overflow) << "\n";
  REQUIRE(code(overflow) == errc::NON_FINITE);
  REQUIRE(w.accumulated_samples() == 0);

  auto r = w.forward(fwd(1, x, y));
  REQUIRE(r);
  std::cout << "last stage loss " << r->loss() << "\n";
  REQUIRE(std::abs(r->loss() - std::log(256.0)) < 0.3);
  REQUIRE(r->input_grad().shape_size() == 3);
  REQUIRE(!r->has_outputs());
  REQUIRE(w.accumulated_samples() == batch);
  // Parameters change only on apply_step: the same request gives the same loss.
  auto again = w.forward(fwd(1, x, y));
  REQUIRE(again);
  REQUIRE(again->loss() == r->loss());
}

TEST_CASE("apply_step steps only when gradients were accumulated", "[worker]") {
  const auto cfg = small_config();
  stage_worker w(cfg, 0, 2, "cpu");
  const auto before = probe(w);
  w.apply_step();  // nothing accumulated
  REQUIRE(w.steps() == 0);
  REQUIRE(torch::equal(probe(w), before));

  for (uint64_t i = 0; i < 2; ++i)
    REQUIRE(w.backward(bwd(0, tokens(batch, len, 10 + i), hidden(batch, len, cfg.d_model, 20 + i))));
  REQUIRE(w.accumulated_samples() == 2 * batch);
  w.apply_step();
  REQUIRE(w.steps() == 1);
  REQUIRE(w.accumulated_samples() == 0);
  REQUIRE(!torch::equal(probe(w), before));
  REQUIRE(w.forward(fwd(0, tokens(batch, len, 1)))->server_step() == 1);
  REQUIRE(w.parameter_count() > 0);
}

TEST_CASE("two workers and two microbatches step like the whole model", "[worker]") {
  auto cfg = small_config();
  // Each worker clips the norm of its own stage's gradient, not the whole model's,
  // so the reference matches only without clipping.
  cfg.grad_clip = 0;
  stage_worker s0(cfg, 0, 2, "cpu"), s1(cfg, 1, 2, "cpu");
  auto full = make_full_model(cfg);
  auto opt = make_optimizer(*full, cfg);

  auto loss_of_chain = [&](const proto::tensor& x, const proto::tensor& y) {
    auto h = s0.forward(fwd(0, x));
    REQUIRE(h);
    auto r = s1.forward(fwd(1, h->outputs(), y));
    REQUIRE(r);
    REQUIRE(s0.backward(bwd(0, x, r->input_grad())));
    return r->loss();
  };
  torch::Tensor full_loss = torch::zeros({});
  for (uint64_t i = 0; i < 2; ++i) {
    const auto x = tokens(batch, len, 30 + i), y = tokens(batch, len, 40 + i);
    const float chain = loss_of_chain(x, y);
    auto loss = lm_loss(full->forward(*decode_tensor(x, "x")), *decode_tensor(y, "y"));
    REQUIRE(std::abs(chain - loss.item<float>()) < 1e-5);
    full_loss = full_loss + loss / 2;
  }
  full_loss.backward();
  opt->step();
  s0.apply_step();
  s1.apply_step();

  // Compare after the step through a fresh forward on both.
  const auto x = tokens(batch, len, 50), y = tokens(batch, len, 51);
  torch::NoGradGuard no_grad;
  const double reference = lm_loss(full->forward(*decode_tensor(x, "x")), *decode_tensor(y, "y")).item<double>();
  auto h = s0.forward(fwd(0, x));
  auto r = s1.forward(fwd(1, h->outputs(), y));
  REQUIRE(r);
  const double diff = std::abs(r->loss() - reference);
  std::cout << "after one step: swarm loss " << r->loss() << " reference " << reference << " |diff| " << diff << "\n";
  REQUIRE(diff < 1e-4);
}

TEST_CASE("impossible configurations are refused with a fix", "[worker]") {
  const auto cfg = small_config();
  auto refuses = [&](const model_config& c, int stage, int stages, const std::string& device) {
    try {
      stage_worker w(c, stage, stages, device);
    } catch (const std::invalid_argument& e) {
      std::cout << "refused: " << e.what() << "\n";
      return true;
    }
    return false;
  };
  REQUIRE(refuses(cfg, 0, 5, "cpu"));   // more stages than layers
  REQUIRE(refuses(cfg, 0, 0, "cpu"));
  REQUIRE(refuses(cfg, 2, 2, "cpu"));   // stage outside
  REQUIRE(refuses(cfg, -1, 2, "cpu"));
  REQUIRE(refuses(cfg, 0, 2, "cuda"));
  auto odd = cfg;
  odd.n_heads = 3;
  REQUIRE(refuses(odd, 0, 2, "cpu"));
  REQUIRE(!refuses(cfg, 3, 4, "cpu"));
}
