// Tier (a/b): the stage worker behind the server's wire boundary
// (actors/stage_calls.hpp): every bad request gets its error code
// and leaves the worker usable with its parameters untouched; accumulation and
// steps match a reference computed with the whole model.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "models/losses.hpp"
#include "models/stage_backward.hpp"
#include "models/optimizer.hpp"
#include "models/shape/cost_model.hpp"
#include "models/stage_worker.hpp"
#include "messages/tensor_codec.hpp"
#include "actors/stage_calls.hpp"

#include <catch2/catch.hpp>

#include "model_configs.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

using namespace swarm;

namespace {

constexpr int64_t batch = 3;
constexpr int64_t len = 16;

using testing::small_model;  // microbatches of `batch` x `len`

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
errc code(const result<T>& r) {
  return r ? errc::OK : r.error().code();
}

template <class T>
std::string message(const caf::expected<T>& r) {
  return r ? "OK" : describe(r.error());
}
template <class T>
std::string message(const result<T>& r) {
  return r ? "OK" : describe(r.error());
}

#define REQUIRE_CODE(expr, expected)           \
  do {                                         \
    auto result_ = (expr);                     \
    INFO(#expr << " -> " << message(result_)); \
    REQUIRE(code(result_) == (expected));      \
  } while (false)

/// Stage 0's outputs for a fixed input: equal before and after iff the parameters are.
torch::Tensor probe(stage_worker& w) {
  auto r = serve_forward(w, fwd(0, tokens(batch, len, 42)));
  REQUIRE(r);
  return *decode_tensor(r->outputs(), "outputs");
}

proto::tensor with_value(torch::Tensor t, int64_t index, double value) {
  t.view({-1})[index] = value;
  return encode_tensor(t);
}

/// One stage-0 microbatch of `b` samples through the stateless backward; `seed` picks the data.
void feed(stage_worker& w, uint64_t seed, int64_t b = batch) {
  REQUIRE(serve_backward(w, bwd(0, tokens(b, len, seed), hidden(b, len, small_model().d_model, seed + 1000))));
}

errc code(const caf::error& err) { return err ? code_of(err) : errc::OK; }
errc code(const error& err) { return err.code(); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

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

/// `state` with its parameters but a fresh AdamW state: what a download that
/// forgot the optimizer would install. Follows the key layout in stage_worker.cpp.
std::string without_optimizer_state(const std::string& state) {
  torch::serialize::InputArchive in;
  std::istringstream is(state);
  in.load_from(is);
  torch::serialize::OutputArchive out;
  for (const char* key : {"format", "names"}) {
    c10::IValue v;
    in.read(key, v);
    out.write(key, v);
  }
  for (const char* key : {"span", "steps"}) {
    torch::Tensor t;
    in.read(key, t);
    out.write(key, t);
  }
  const auto keys = in.keys();
  const auto n =
      std::count_if(keys.begin(), keys.end(), [](const std::string& k) { return k.rfind("param_", 0) == 0; });
  REQUIRE(n > 0);
  for (int64_t i = 0; i < n; ++i) {
    const auto idx = std::to_string(i);
    torch::Tensor p;
    in.read("param_" + idx, p);
    out.write("param_" + idx, p);
    out.write("exp_avg_" + idx, torch::zeros_like(p));
    out.write("exp_avg_sq_" + idx, torch::zeros_like(p));
    out.write("step_" + idx, torch::tensor(int64_t{0}));
  }
  std::ostringstream os;
  out.save_to(os);
  return os.str();
}

}  // namespace

TEST_CASE("a non-last stage rejects bad requests and stays usable", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 0, 2, "cpu");
  const auto before = probe(w);
  const auto good = tokens(batch, len, 1);
  const auto good_grad = hidden(batch, len, cfg.d_model, 2);

  SECTION("forward") {
    REQUIRE_CODE(serve_forward(w, fwd(1, good)), errc::UNKNOWN_STAGE);
    REQUIRE_CODE(serve_forward(w, fwd(7, good)), errc::UNKNOWN_STAGE);
    REQUIRE_CODE(serve_forward(w, proto::forward_request{}), errc::BAD_REQUEST);  // no inputs
    REQUIRE_CODE(serve_forward(w, fwd(0, good, good)), errc::BAD_REQUEST);        // targets on a non-last stage
    REQUIRE_CODE(serve_forward(w, fwd(0, hidden(batch, len, cfg.d_model, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, encode_tensor(torch::zeros({batch, len}, torch::kInt32)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, encode_tensor(torch::zeros({batch, len}, torch::kFloat32)))),
                 errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, encode_tensor(torch::zeros({batch, len, 1}, torch::kLong)))),
                 errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, encode_tensor(torch::zeros({len}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, encode_tensor(torch::zeros({0, len}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, encode_tensor(torch::zeros({batch, 0}, torch::kLong)))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_forward(w, fwd(0, tokens(batch, len + 1, 3))), errc::WRONG_SHAPE);  // T > seq_len
    REQUIRE_CODE(serve_forward(w, fwd(0, with_value(torch::zeros({batch, len}, torch::kLong), 5, 300))),
                 errc::BAD_REQUEST);
    REQUIRE_CODE(serve_forward(w, fwd(0, with_value(torch::zeros({batch, len}, torch::kLong), 5, -1))),
                 errc::BAD_REQUEST);
    auto garbage = good;
    garbage.set_codec(static_cast<proto::codec>(5));
    REQUIRE_CODE(serve_forward(w, fwd(0, garbage)), errc::BAD_REQUEST);
    garbage = good;
    garbage.mutable_data()->pop_back();
    REQUIRE_CODE(serve_forward(w, fwd(0, garbage)), errc::BAD_REQUEST);
    garbage = good;
    garbage.set_dtype(static_cast<proto::dtype>(77));
    REQUIRE_CODE(serve_forward(w, fwd(0, garbage)), errc::BAD_REQUEST);
  }
  SECTION("backward") {
    REQUIRE_CODE(serve_backward(w, bwd(1, good, good_grad)), errc::UNKNOWN_STAGE);
    REQUIRE_CODE(serve_backward(w, bwd(0, good, hidden(batch, len, cfg.d_model + 1, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_backward(w, bwd(0, good, hidden(batch, len - 1, cfg.d_model, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(serve_backward(w, bwd(0, good, hidden(batch + 1, len, cfg.d_model, 3))), errc::WRONG_SHAPE);
    REQUIRE_CODE(
        serve_backward(w, bwd(0, good, encode_tensor(torch::zeros({batch, len, cfg.d_model}, torch::kFloat64)))),
        errc::WRONG_SHAPE);
    auto nan_grad = torch::randn({batch, len, cfg.d_model});
    REQUIRE_CODE(serve_backward(w, bwd(0, good, with_value(nan_grad, 17, std::nan("")))), errc::NON_FINITE);
    REQUIRE_CODE(serve_backward(w, bwd(0, good, with_value(nan_grad, 17, INFINITY))), errc::NON_FINITE);
    REQUIRE_CODE(serve_backward(w, bwd(0, with_value(torch::zeros({batch, len}, torch::kLong), 0, 256), good_grad)),
                 errc::BAD_REQUEST);
    REQUIRE_CODE(serve_backward(w, proto::backward_request{}), errc::BAD_REQUEST);
  }

  // Nothing above may have touched the parameters or the accounting.
  REQUIRE(w.accumulated_samples() == 0);
  const double drift = (probe(w) - before).abs().max().item<double>();
  std::cout << "stage 0 after rejected requests: max output drift " << drift << "\n";
  REQUIRE(drift == 0.0);

  // And the worker still serves valid requests.
  auto out = serve_forward(w, fwd(0, good));
  REQUIRE(out);
  REQUIRE(out->outputs().shape_size() == 3);
  REQUIRE(out->outputs().shape(2) == cfg.d_model);
  auto back = serve_backward(w, bwd(0, good, good_grad));
  REQUIRE(back);
  REQUIRE(!back->has_input_grad());  // token ids have no gradient
  REQUIRE(w.accumulated_samples() == batch);
}

TEST_CASE("wrong shapes are reported with what was expected", "[worker]") {
  stage_worker w(small_model(), 1, 2, "cpu");
  auto r = serve_forward(w, fwd(1, tokens(8, 64, 1), tokens(8, 64, 2)));
  REQUIRE(code(r) == errc::WRONG_SHAPE);
  std::cout << "example: " << message(r) << "\n";
  REQUIRE(message(r).find("inputs [8, 64] Long expected [B, T<=16, 32] Float") != std::string::npos);
}

TEST_CASE("the last stage rejects bad requests and non-finite losses", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 1, 2, "cpu");
  const auto x = hidden(batch, len, cfg.d_model, 1);
  const auto y = tokens(batch, len, 2);
  auto h = *decode_tensor(x, "x");

  REQUIRE_CODE(serve_forward(w, fwd(0, x, y)), errc::UNKNOWN_STAGE);
  REQUIRE_CODE(serve_forward(w, fwd(1, x)), errc::BAD_REQUEST);  // no targets
  REQUIRE_CODE(serve_forward(w, fwd(1, x, tokens(batch, len - 1, 2))), errc::WRONG_SHAPE);
  REQUIRE_CODE(serve_forward(w, fwd(1, x, encode_tensor(torch::zeros({batch, len}, torch::kInt32)))),
               errc::WRONG_SHAPE);
  REQUIRE_CODE(serve_forward(w, fwd(1, x, with_value(torch::zeros({batch, len}, torch::kLong), 3, 256))),
               errc::BAD_REQUEST);
  REQUIRE_CODE(serve_forward(w, fwd(1, with_value(h.clone(), 9, std::nan("")), y)), errc::NON_FINITE);
  REQUIRE_CODE(serve_forward(w, fwd(1, with_value(h.clone(), 9, -INFINITY), y)), errc::NON_FINITE);
  REQUIRE_CODE(serve_backward(w, bwd(1, x, x)), errc::BAD_REQUEST);  // its forward already ran backward
  // Finite inputs whose squares overflow float32: LayerNorm turns them into NaN.
  auto huge = torch::full({batch, len, cfg.d_model}, 3e38f);
  huge.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, 16)}, -3e38f);
  auto overflow = serve_forward(w, fwd(1, encode_tensor(huge), y));
  std::cout << "overflowing inputs: " << message(overflow) << "\n";
  REQUIRE(code(overflow) == errc::NON_FINITE);
  REQUIRE(w.accumulated_samples() == 0);

  auto r = serve_forward(w, fwd(1, x, y));
  REQUIRE(r);
  std::cout << "last stage loss " << r->loss() << "\n";
  REQUIRE(std::abs(r->loss() - std::log(256.0)) < 0.3);
  REQUIRE(r->input_grad().shape_size() == 3);
  REQUIRE(!r->has_outputs());
  REQUIRE(w.accumulated_samples() == batch);
  // Parameters change only on apply_step: the same request gives the same loss.
  auto again = serve_forward(w, fwd(1, x, y));
  REQUIRE(again);
  REQUIRE(again->loss() == r->loss());
}

TEST_CASE("a validation request gives the training loss and adds nothing, on the last stage only", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 1, 2, "cpu");
  const auto x = hidden(batch, len, cfg.d_model, 1);
  const auto y = tokens(batch, len, 2);
  auto eval = fwd(1, x, y);
  eval.set_eval(true);
  const auto hash = w.parameter_hash();
  auto measured = serve_forward(w, eval);
  REQUIRE(measured);
  CHECK(!measured->has_input_grad());
  CHECK(!measured->has_outputs());
  CHECK(w.accumulated_samples() == 0);
  CHECK(w.parameter_hash() == hash);
  auto trained = serve_forward(w, fwd(1, x, y));  // the same microbatch in training
  REQUIRE(trained);
  CHECK(std::abs(measured->loss() - trained->loss()) < 1e-5);
  CHECK(w.accumulated_samples() == batch);
  auto bad = eval;
  *bad.mutable_targets() = tokens(batch, len - 1, 2);
  REQUIRE_CODE(serve_forward(w, bad), errc::WRONG_SHAPE);
  // A non-last stage runs its plain forward for a validation request.
  stage_worker first(cfg, 0, 2, "cpu");
  auto through = fwd(0, tokens(batch, len, 3));
  through.set_eval(true);
  REQUIRE(serve_forward(first, through)->has_outputs());
  CHECK(first.accumulated_samples() == 0);
  REQUIRE_CODE(first.evaluate(torch::zeros({batch, len}, torch::kLong), torch::zeros({batch, len}, torch::kLong)),
               errc::BAD_REQUEST);
}

TEST_CASE("apply_step steps only when gradients were accumulated", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 0, 2, "cpu");
  const auto before = probe(w);
  w.apply_step();  // nothing accumulated
  REQUIRE(w.steps() == 0);
  REQUIRE(torch::equal(probe(w), before));

  for (uint64_t i = 0; i < 2; ++i)
    REQUIRE(serve_backward(w, bwd(0, tokens(batch, len, 10 + i), hidden(batch, len, cfg.d_model, 20 + i))));
  REQUIRE(w.accumulated_samples() == 2 * batch);
  w.apply_step();
  REQUIRE(w.steps() == 1);
  REQUIRE(w.accumulated_samples() == 0);
  REQUIRE(!torch::equal(probe(w), before));
  REQUIRE(serve_forward(w, fwd(0, tokens(batch, len, 1)))->server_step() == 1);
  REQUIRE(w.parameter_count() > 0);
  // It steps exactly as a server's take_gradient and apply_gradient do, bit for bit.
  stage_worker server(cfg, 0, 2, "cpu");
  for (uint64_t i = 0; i < 2; ++i)
    REQUIRE(serve_backward(server, bwd(0, tokens(batch, len, 10 + i), hidden(batch, len, cfg.d_model, 20 + i))));
  REQUIRE_FALSE(server.apply_gradient(server.take_gradient().values));
  CHECK(server.parameter_hash() == w.parameter_hash());
}

TEST_CASE("two workers and two microbatches step like the whole model", "[worker]") {
  auto cfg = small_model();
  // Each worker clips the norm of its own stage's gradient, not the whole model's,
  // so the reference matches only without clipping.
  cfg.grad_clip = 0;
  stage_worker s0(cfg, 0, 2, "cpu"), s1(cfg, 1, 2, "cpu");
  auto full = make_full_model(cfg);
  auto opt = make_optimizer(*full, cfg);

  auto loss_of_chain = [&](const proto::tensor& x, const proto::tensor& y) {
    auto h = serve_forward(s0, fwd(0, x));
    REQUIRE(h);
    auto r = serve_forward(s1, fwd(1, h->outputs(), y));
    REQUIRE(r);
    REQUIRE(serve_backward(s0, bwd(0, x, r->input_grad())));
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
  auto h = serve_forward(s0, fwd(0, x));
  auto r = serve_forward(s1, fwd(1, h->outputs(), y));
  REQUIRE(r);
  const double diff = std::abs(r->loss() - reference);
  std::cout << "after one step: swarm loss " << r->loss() << " reference " << reference << " |diff| " << diff << "\n";
  REQUIRE(diff < 1e-4);
}

TEST_CASE("impossible configurations are refused with a fix", "[worker]") {
  const auto cfg = small_model();
  auto refuses = [&](const model_config& c, int stage, int stages, const std::string& device) {
    try {
      stage_worker w(c, stage, stages, device);
    } catch (const std::invalid_argument& e) {
      std::cout << "refused: " << e.what() << "\n";
      return true;
    }
    return false;
  };
  REQUIRE(refuses(cfg, 0, 5, "cpu"));  // more stages than layers
  REQUIRE(refuses(cfg, 0, 0, "cpu"));
  REQUIRE(refuses(cfg, 2, 2, "cpu"));  // stage outside
  REQUIRE(refuses(cfg, -1, 2, "cpu"));
  if (!torch::cuda::is_available()) {  // the CPU-only Debian libtorch: a clear refusal, not a crash
    REQUIRE(refuses(cfg, 0, 2, "cuda"));
    REQUIRE(refuses(cfg, 0, 2, "cuda:1"));
  }
  REQUIRE(refuses(cfg, 0, 2, "tpu"));
  auto odd = cfg;
  odd.n_heads = 3;
  REQUIRE(refuses(odd, 0, 2, "cpu"));
  REQUIRE(!refuses(cfg, 3, 4, "cpu"));
}

TEST_CASE("tensors go to the worker's device and come back from it encoded", "[worker]") {
  // Only the CPU here; on a CUDA build the same path runs with "cuda" (see docs/deploy.md, Running on a GPU).
  const auto cfg = small_model();
  stage_worker w(cfg, 0, 2, "cpu");
  REQUIRE(w.device() == torch::Device("cpu"));
  const auto x = *decode_tensor(tokens(batch, len, 1), "x", w.device());
  auto r = w.forward(x);
  REQUIRE(r);
  REQUIRE(r->outputs.device() == w.device());
  REQUIRE(r->outputs.sizes() == torch::IntArrayRef{batch, len, cfg.d_model});
  // The worker's own validation, without the wire: plain tensors in.
  REQUIRE(code(w.forward(torch::zeros({batch, len}, torch::kInt32))) == errc::WRONG_SHAPE);
  REQUIRE(code(w.forward(x, &x)) == errc::BAD_REQUEST);  // targets on a non-last stage
  REQUIRE(code(w.backward(x, torch::Tensor{})) == errc::BAD_REQUEST);
  // The reply's codec is the request's: blockwise8 outputs decode within its error bound.
  auto req = fwd(0, tokens(batch, len, 1));
  req.set_reply_codec(proto::BLOCKWISE8);
  auto compressed = serve_forward(w, req);
  REQUIRE(compressed);
  REQUIRE(compressed->outputs().codec() == proto::BLOCKWISE8);
  const auto back = *decode_tensor(compressed->outputs(), "outputs");
  const double err = ((back - r->outputs).norm() / r->outputs.norm()).item<double>();
  std::cout << "blockwise8 outputs of stage 0: relative L2 error " << err << "\n";
  REQUIRE(err > 0);
  REQUIRE(err < 0.02);
  req.set_reply_codec(static_cast<proto::codec>(9));
  REQUIRE(code(serve_forward(w, req)) == errc::BAD_REQUEST);
}

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

TEST_CASE("a joining server imports parameters and optimizer state", "[worker]") {
  const auto cfg = small_model();
  stage_worker a(cfg, 0, 2, "cpu");
  for (uint64_t step = 0; step < 3; ++step) {
    feed(a, 200 + 2 * step);
    feed(a, 201 + 2 * step);
    a.apply_step();
  }
  REQUIRE(a.steps() == 3);
  const auto state = a.export_state();
  const double param_bytes = static_cast<double>(a.parameter_count()) * sizeof(float);
  std::cout << "export_state: " << state.size() << " bytes for " << a.parameter_count()
            << " parameters = " << state.size() / param_bytes
            << " x parameter bytes (params + exp_avg + exp_avg_sq = 3x = " << 3 * param_bytes << " bytes)\n";
  REQUIRE(state.size() >= 3 * param_bytes);
  REQUIRE(state.size() < 3 * param_bytes + 64 * 1024);

  stage_worker b(cfg, 0, 2, "cpu"), c(cfg, 0, 2, "cpu");
  feed(b, 7);  // import drops whatever b had accumulated
  REQUIRE(b.parameter_hash() != a.parameter_hash());
  REQUIRE(code(b.import_state(state)) == errc::OK);
  REQUIRE(b.parameter_hash() == a.parameter_hash());
  REQUIRE(b.steps() == 3);
  REQUIRE(b.accumulated_samples() == 0);
  // c gets the parameters only: the check below must tell it apart.
  REQUIRE(code(c.import_state(without_optimizer_state(state))) == errc::OK);
  REQUIRE(c.parameter_hash() == a.parameter_hash());

  for (uint64_t round = 0; round < 2; ++round) {
    feed(a, 300 + round);
    const auto g = a.take_gradient();
    for (auto* w : {&a, &b, &c})
      REQUIRE(code(w->apply_gradient(g.values)) == errc::OK);
  }
  const double c_drift = (probe(c) - probe(a)).abs().max().item<double>();
  std::cout << "after 2 more steps: a " << std::hex << a.parameter_hash() << " b " << b.parameter_hash()
            << " params-only c " << c.parameter_hash() << std::dec << ", max |c - a| on a probe " << c_drift << "\n";
  REQUIRE(b.parameter_hash() == a.parameter_hash());
  REQUIRE(torch::equal(probe(b), probe(a)));
  REQUIRE(c.parameter_hash() != a.parameter_hash());
  const bool same_state = b.export_state() == a.export_state();  // bool: Catch would print the bytes
  REQUIRE(same_state);
}

TEST_CASE("import_state refuses garbage and other stages' states untouched", "[worker]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 0, 2, "cpu");
  feed(w, 1);
  w.apply_step();
  const auto before = w.parameter_hash();
  const auto good = w.export_state();
  auto wider = cfg;
  wider.d_model = 64;

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"empty", ""},
      {"garbage", "this is not a torch archive"},
      {"truncated", good.substr(0, good.size() / 2)},
      {"params only, no format",
       [] {
         torch::serialize::OutputArchive out;
         out.write("param_0", torch::zeros({3}));
         std::ostringstream os;
         out.save_to(os);
         return os.str();
       }()},
  };
  for (const auto& [what, bytes] : bad) {
    const auto err = w.import_state(bytes);
    std::cout << what << ": " << (err ? describe(err) : "OK") << "\n";
    REQUIRE(code(err) == errc::BAD_REQUEST);
  }
  const std::vector<std::pair<std::string, std::string>> foreign = {
      {"last stage", stage_worker(cfg, 1, 2, "cpu").export_state()},
      {"stage 0 of 4", stage_worker(cfg, 0, 4, "cpu").export_state()},
      {"d_model 64", stage_worker(wider, 0, 2, "cpu").export_state()},
  };
  for (const auto& [what, bytes] : foreign) {
    const auto err = w.import_state(bytes);
    std::cout << what << ": " << (err ? describe(err) : "OK") << "\n";
    REQUIRE(code(err) == errc::WRONG_SHAPE);
  }
  REQUIRE(w.parameter_hash() == before);
  REQUIRE(w.steps() == 1);
  const bool same_state = w.export_state() == good;  // optimizer state untouched too
  REQUIRE(same_state);
}

TEST_CASE("cost model: parameter counts equal the real stages'", "[model][sim]") {
  // swarm-sim sizes state copies and all-reduces from models/shape/cost_model's
  // formula; it must count what models/stage_module.cpp builds.
  for (int stages : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
    model_config m;
    m.d_model = 64;
    m.n_layers = 3;
    m.seq_len = 32;
    if (stages > 7) {  // --boundary on 3 stages: gpt bottleneck, llama maxout
      m.boundary = stages == 8 ? "bottleneck:4" : "maxout:2";
      m.arch = stages == 8 ? "gpt" : "llama";
      stages = 3;
    }
    if (stages > 3) {  // llama, with grouped-query attention from 5 on, sharing at 7
      m.arch = "llama";
      m.n_kv_heads = stages > 4 ? 2 : 0;
      m.ffn_dim = stages > 5 ? 100 : 0;
      stages -= 3;
    }
    if (stages == 4) {  // 6 layers in runs of 3 on 2 stages: one block each
      m.n_layers = 6;
      m.share_layers = 3;
      stages = 2;
    }
    INFO(m.arch << " kv " << m.kv_heads() << " ffn " << m.ffn_width() << " share " << m.share_layers << " boundary "
                << m.boundary << ", " << stages << " stages");
    const model_shape shape{m, stages, "none"};
    for (int k = 0; k < stages; ++k) {
      stage_worker worker(m, k, stages, "cpu");
      CHECK(worker.parameter_count() == stage_parameters(shape, k));
      // The bulk plane refuses frames above this (net/bulk.hpp max_frame): a
      // state copy, the largest payload, must stay under it.
      CHECK(worker.export_state().size() <= largest_payload_bytes(shape));
    }
  }
  // qwen2: llama's counts and its q, k and v biases, with grouped-query attention, with and without a boundary.
  for (const std::string boundary : {"none", "bottleneck:4"}) {
    model_config m;
    m.arch = "qwen2";
    m.d_model = 64;
    m.n_layers = 3;
    m.seq_len = 32;
    m.n_kv_heads = 2;
    m.boundary = boundary;
    INFO("qwen2 boundary " << boundary);
    const model_shape shape{m, 3, "none"};
    for (int k = 0; k < 3; ++k) {
      stage_worker worker(m, k, 3, "cpu");
      CHECK(worker.parameter_count() == stage_parameters(shape, k));
    }
  }
}
