#pragma once
// Causal attention and generation's KV cache, shared by every family's block.

#include <utility>

#include <torch/torch.h>

namespace swarm {

/// Keys and values [B, kv_heads, positions, head_dim] of one block application
/// for the positions seen so far: generation's KV cache.
struct kv_slot {
  torch::Tensor k, v;
  [[nodiscard]] int64_t positions() const { return k.defined() ? k.size(2) : 0; }
};

/// Causal attention of queries q [B, H, Tq, hd] over keys and values
/// [B, H, Tk, hd], Tk >= Tq: query i sits at position Tk - Tq + i.
[[nodiscard]] torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

/// Appends k and v [B, H, T, hd] to `slot` (when given) and returns what to attend to.
[[nodiscard]] std::pair<torch::Tensor, torch::Tensor> extend(kv_slot* slot, torch::Tensor k, torch::Tensor v);

}  // namespace swarm
