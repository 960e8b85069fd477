#pragma once
// What the stage worker tests share: microbatch shapes, request builders, the error
// code of a result, a probe of stage 0's parameters and a microbatch fed through backward.
// torch before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "models/stage_worker.hpp"
#include "messages/tensor_codec.hpp"
#include "actors/stage_calls.hpp"

#include <catch2/catch.hpp>

#include "model_configs.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace swarm::testing::stage_worker_helpers {

inline constexpr int64_t batch = 3;
inline constexpr int64_t len = 16;

using testing::small_model;  // microbatches of `batch` x `len`

inline proto::tensor tokens(int64_t b, int64_t t, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return encode_tensor(torch::randint(0, 256, {b, t}, gen, torch::kLong));
}

inline proto::tensor hidden(int64_t b, int64_t t, int64_t d, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return encode_tensor(torch::randn({b, t, d}, gen));
}

inline proto::forward_request fwd(uint32_t stage, proto::tensor inputs) {
  proto::forward_request req;
  req.set_stage(stage);
  *req.mutable_inputs() = std::move(inputs);
  return req;
}

inline proto::forward_request fwd(uint32_t stage, proto::tensor inputs, proto::tensor targets) {
  auto req = fwd(stage, std::move(inputs));
  *req.mutable_targets() = std::move(targets);
  return req;
}

inline proto::backward_request bwd(uint32_t stage, proto::tensor inputs, proto::tensor output_grad) {
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

/// Stage 0's outputs for a fixed input: equal before and after iff the parameters are.
inline torch::Tensor probe(stage_worker& w) {
  auto r = serve_forward(w, fwd(0, tokens(batch, len, 42)));
  REQUIRE(r);
  return *decode_tensor(r->outputs(), "outputs");
}

/// One stage-0 microbatch of `b` samples through the stateless backward; `seed` picks the data.
inline void feed(stage_worker& w, uint64_t seed, int64_t b = batch) {
  REQUIRE(serve_backward(w, bwd(0, tokens(b, len, seed), hidden(b, len, small_model().d_model, seed + 1000))));
}

inline errc code(const caf::error& err) { return err ? code_of(err) : errc::OK; }
inline errc code(const error& err) { return err.code(); }

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace swarm::testing::stage_worker_helpers
