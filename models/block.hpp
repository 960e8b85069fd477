#pragma once
// A decoder block of any model family: hidden states [B, T, d] in and out.
// The stage module (models/gpt.hpp) holds a stage's blocks through this base,
// so a stage is the same code whatever the family.

#include <torch/torch.h>

#include "config/config.hpp"

namespace swarm {

/// Keys and values [B, kv_heads, positions, head_dim] of one block application
/// for the positions seen so far: generation's KV cache.
struct kv_slot {
  torch::Tensor k, v;
  [[nodiscard]] int64_t positions() const { return k.defined() ? k.size(2) : 0; }
};

class decoder_block : public torch::nn::Module {
public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  /// forward() of the positions after those `slot` holds, attending to them
  /// too; appends these positions' keys and values to `slot`.
  virtual torch::Tensor forward_cached(const torch::Tensor& x, kv_slot& slot) = 0;
  /// Draws the block's weights from `gen` (its family's initialisation); the
  /// projections that write into the residual stream get `residual_std`.
  virtual void init(at::Generator& gen, double std, double residual_std) = 0;
};

/// N(0, std) weights and zero biases, drawn from `gen` (no autograd).
void init_linear(torch::nn::LinearImpl& l, double std, at::Generator& gen);

/// Causal attention of queries q [B, H, Tq, hd] over keys and values
/// [B, H, Tk, hd], Tk >= Tq: query i sits at position Tk - Tq + i.
[[nodiscard]] torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

/// Appends k and v [B, H, T, hd] to `slot` (when given) and returns what to attend to.
[[nodiscard]] std::pair<torch::Tensor, torch::Tensor> extend(kv_slot* slot, torch::Tensor k, torch::Tensor v);

/// The block of cfg's family.
[[nodiscard]] std::shared_ptr<decoder_block> make_block(const model_config& cfg);

} // namespace swarm
