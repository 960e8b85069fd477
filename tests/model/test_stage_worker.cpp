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
#include "policy/verification.hpp"

#include <catch2/catch.hpp>

#include "model_configs.hpp"
#include "stage_worker_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

using namespace swarm;
using namespace swarm::testing::stage_worker_helpers;

namespace {

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

proto::tensor with_value(torch::Tensor t, int64_t index, double value) {
  t.view({-1})[index] = value;
  return encode_tensor(t);
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

TEST_CASE("honest servers answer one forward within the verification tolerance; noise is far outside",
          "[worker][verify]") {
  // Issue #47's verified work compares two servers' outputs of one request.
  // They differ honestly by the thread count (kernel summation order) and
  // bf16 rounding; this measures how much, so the tolerance has a margin.
  const int threads = at::get_num_threads();
  const auto x = tokens(batch, len, 47);
  auto output = [&](bool bf16, int n) {
    at::set_num_threads(n);
    stage_worker w(small_model(), 0, 2, "cpu");
    w.set_bf16(bf16);
    auto r = serve_forward(w, fwd(0, x));
    REQUIRE(r);
    auto t = decode_tensor(r->outputs(), "outputs");
    REQUIRE(t);
    auto f = t->to(torch::kFloat32).contiguous();
    return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  };
  {
    // Servers of one swarm may differ in --precision: an fp32 and a bf16 answer.
    const auto fp32 = output(false, 2), bf16 = output(true, 2);
    const double apart = policy::relative_distance(fp32.data(), bf16.data(), fp32.size());
    std::cout << "fp32 vs bf16: " << apart << "\n";
    CHECK(apart <= policy::verify_tolerance(true));
  }
  for (bool bf16 : {false, true}) {
    const auto one = output(bf16, 1), two = output(bf16, 2), again = output(bf16, 1);
    REQUIRE(one.size() == two.size());
    const double threads_apart = policy::relative_distance(one.data(), two.data(), one.size());
    const double repeat_apart = policy::relative_distance(one.data(), again.data(), one.size());
    // Noise of the same scale (the `noise` fault): independent of the answer.
    auto noise = torch::randn({static_cast<int64_t>(one.size())}, torch::TensorOptions().dtype(torch::kFloat32));
    noise = noise * (torch::from_blob(const_cast<float*>(one.data()), {static_cast<int64_t>(one.size())}).std());
    const double noise_apart = policy::relative_distance(one.data(), noise.data_ptr<float>(), one.size());
    std::cout << (bf16 ? "bf16" : "fp32") << ": 1 vs 2 threads " << threads_apart << ", repeated " << repeat_apart
              << ", noise " << noise_apart << " (tolerance " << policy::verify_tolerance(bf16) << ")\n";
    CHECK(repeat_apart <= threads_apart + 1e-12);
    CHECK(threads_apart <= policy::verify_tolerance(bf16));
    CHECK(noise_apart > 10 * policy::verify_tolerance(bf16));
  }
  at::set_num_threads(threads);
}

TEST_CASE("a verification forward on the last stage answers as training does and adds nothing", "[worker][verify]") {
  const auto cfg = small_model();
  stage_worker w(cfg, 1, 2, "cpu");
  const auto x = hidden(batch, len, cfg.d_model, 1);
  const auto y = tokens(batch, len, 2);
  auto second = fwd(1, x, y);
  second.set_verify(true);
  const auto hash = w.parameter_hash();
  auto checked = serve_forward(w, second);
  REQUIRE(checked);
  CHECK(w.accumulated_samples() == 0);  // the gradient of its parameters was never added
  CHECK(w.parameter_hash() == hash);
  auto trained = serve_forward(w, fwd(1, x, y));
  REQUIRE(trained);
  CHECK(w.accumulated_samples() == batch);
  CHECK(checked->loss() == Approx(trained->loss()).epsilon(1e-6));
  const auto a = decode_tensor(checked->input_grad(), "a")->contiguous();
  const auto b = decode_tensor(trained->input_grad(), "b")->contiguous();
  REQUIRE(a.sizes() == b.sizes());
  const double apart =
      policy::relative_distance(a.data_ptr<float>(), b.data_ptr<float>(), static_cast<size_t>(a.numel()));
  std::cout << "last stage: verification vs training input_grad " << apart << "\n";
  CHECK(apart <= policy::verify_tolerance(false));
  stage_worker first(cfg, 0, 2, "cpu");  // other stages are verified with the very request
  auto through = fwd(0, tokens(batch, len, 3));
  through.set_verify(true);
  REQUIRE_CODE(first.verify(*decode_tensor(through.inputs(), "x"), *decode_tensor(y, "y")), errc::BAD_REQUEST);
}

TEST_CASE("the wire's encodings stay within codec_error of a stage's outputs", "[worker][verify]") {
  stage_worker w(small_model(), 0, 2, "cpu");
  auto r = serve_forward(w, fwd(0, tokens(batch, len, 11)));
  REQUIRE(r);
  const auto x = decode_tensor(r->outputs(), "outputs")->to(torch::kFloat32).contiguous();
  for (auto [codec, name] : {std::pair{proto::FP16, "fp16"}, std::pair{proto::BLOCKWISE8, "blockwise8"}}) {
    const auto y = decode_tensor(encode_tensor(x, codec), "y")->to(torch::kFloat32).contiguous();
    const double err =
        policy::relative_distance(x.data_ptr<float>(), y.data_ptr<float>(), static_cast<size_t>(x.numel()));
    std::cout << name << ": relative error " << err << " (codec_error " << policy::codec_error(name) << ")\n";
    CHECK(err > 0);
    CHECK(err <= policy::codec_error(name));
  }
  CHECK(policy::verify_tolerance(false, "blockwise8") == Approx(1e-4 + 0.04));
  CHECK(policy::verify_tolerance(true, "none") == policy::verify_tolerance(true));
}

TEST_CASE("the noise fault answers with noise of the output's scale, in its codec, from its seed", "[worker][verify]") {
  stage_worker w(small_model(), 0, 2, "cpu");
  auto r = serve_forward(w, fwd(0, tokens(batch, len, 7)));
  REQUIRE(r);
  const auto honest = *decode_tensor(r->outputs(), "outputs");
  auto lied = r->outputs(), again = r->outputs(), other = r->outputs();
  replace_with_noise(lied, 1);
  replace_with_noise(again, 1);
  replace_with_noise(other, 2);
  CHECK(lied.data() == again.data());  // deterministic under its seed
  CHECK(lied.data() != other.data());
  CHECK(lied.codec() == r->outputs().codec());
  const auto noise = *decode_tensor(lied, "outputs");
  REQUIRE(noise.sizes() == honest.sizes());
  CHECK(noise.std().item<double>() == Approx(honest.std().item<double>()).epsilon(0.05));
  const auto a = honest.contiguous(), b = noise.contiguous();
  const double apart =
      policy::relative_distance(a.data_ptr<float>(), b.data_ptr<float>(), static_cast<size_t>(a.numel()));
  CHECK(apart > 10 * policy::verify_tolerance(true));  // what verification will catch
  proto::tensor empty;
  replace_with_noise(empty, 1);  // nothing to lie about
  CHECK(empty.data().empty());
}

TEST_CASE("the stale fault answers on parameters N steps old; drop-half claims samples it never computed",
          "[worker][verify]") {
  const auto cfg = small_model();
  const auto x = tokens(batch, len, 5);
  auto outputs = [&](stage_worker& w) {
    auto r = serve_forward(w, fwd(0, x));
    REQUIRE(r);
    return decode_tensor(r->outputs(), "outputs")->contiguous();
  };
  auto step = [&](stage_worker& w, uint64_t seed) {
    REQUIRE(serve_backward(w, bwd(0, tokens(batch, len, seed), hidden(batch, len, cfg.d_model, seed + 1))));
    w.apply_step();
  };
  stage_worker honest(cfg, 0, 2, "cpu"), stale(cfg, 0, 2, "cpu");
  stale.set_lies(2, false);
  const auto at0 = outputs(honest);
  step(honest, 1), step(stale, 1);
  const auto at1 = outputs(honest);
  step(honest, 2), step(stale, 2);
  CHECK(torch::equal(outputs(stale), at0));  // two steps old, while it claims step 2
  CHECK(stale.steps() == 2);
  CHECK_FALSE(torch::equal(outputs(honest), at0));
  CHECK_FALSE(torch::equal(at1, at0));

  stage_worker dropper(cfg, 0, 2, "cpu"), computes(cfg, 0, 2, "cpu");
  dropper.set_lies(0, true);
  const auto a = tokens(batch, len, 8), b = tokens(batch, len, 9);
  const auto g = hidden(batch, len, cfg.d_model, 10);
  REQUIRE(serve_backward(dropper, bwd(0, a, g)));
  auto second = serve_backward(dropper, bwd(0, b, g));
  REQUIRE(second);
  CHECK(dropper.accumulated_samples() == 2 * batch);  // both claimed
  REQUIRE(serve_backward(computes, bwd(0, a, g)));
  const auto lied = dropper.take_gradient(), one = computes.take_gradient();
  REQUIRE(lied.values.size() == one.values.size());
  CHECK(lied.samples == 2 * batch);
  size_t off = 0;  // the mean of one real gradient and a zero one: half the real one
  for (size_t i = 0; i < one.values.size(); ++i)
    off += std::abs(lied.values[i] - 0.5f * one.values[i]) > 1e-6f * (1 + std::abs(one.values[i]));
  CHECK(off == 0);
}
