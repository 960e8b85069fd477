#pragma once
// The gpt family's decoder block: GPT-2's, with its sub-module names (fused
// qkv, GELU MLP of 4 d, biases everywhere).

#include <torch/torch.h>

#include "models/block.hpp"

namespace swarm {

/// One GPT-2 block: x + attn(ln1(x)); x + mlp(ln2(x)).
class gpt_block_impl : public decoder_block {
public:
  explicit gpt_block_impl(const model_config& cfg);
  torch::Tensor forward(const torch::Tensor& x) override { return run(x, nullptr); }
  torch::Tensor forward_cached(const torch::Tensor& x, kv_slot& slot) override { return run(x, &slot); }
  void init(at::Generator& gen, double std, double residual_std) override;

private:
  torch::Tensor run(const torch::Tensor& x, kv_slot* slot);
  int64_t n_heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, out_{nullptr};
};

}  // namespace swarm
