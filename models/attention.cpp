#include "models/attention.hpp"

#include <cmath>
#include <limits>

namespace swarm {

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t tq = q.size(2), tk = k.size(2);
  // torch 1.13's C++ API has only the private _scaled_dot_product_attention,
  // so it is spelled out; at these context lengths this costs little.
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  // True where a query may not look: keys after its own position.
  const auto mask =
      torch::ones({tq, tk}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(tk - tq + 1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

std::pair<torch::Tensor, torch::Tensor> extend(kv_slot* slot, torch::Tensor k, torch::Tensor v) {
  if (!slot)
    return {std::move(k), std::move(v)};
  slot->k = slot->k.defined() ? torch::cat({slot->k, k}, 2) : k;
  slot->v = slot->v.defined() ? torch::cat({slot->v, v}, 2) : v;
  return {slot->k, slot->v};
}

}  // namespace swarm
