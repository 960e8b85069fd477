#pragma once
// The llama block, as Hugging Face's LlamaDecoderLayer computes it, so weights
// move to and from that implementation unchanged: RMSNorm, rotary position
// embeddings in the rotate-half layout, grouped-query attention, a SwiGLU MLP
// and no biases; with the family's qkv_bias (qwen2, as Qwen2DecoderLayer)
// biases on the q, k and v projections. Sub-module names are Hugging Face's.

#include <torch/torch.h>

#include "models/block.hpp"
#include "models/norm.hpp"

namespace swarm {

/// cos and sin [T, head_dim] of positions [first, first + t) (rotate-half layout).
[[nodiscard]] std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t first, int64_t t, int64_t head_dim,
                                                                    double theta, const torch::Device& device);

/// Rotates q or k [B, H, T, head_dim] by the tables.
[[nodiscard]] torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

/// x + attn(norm(x)); h + mlp(norm(h)).
class llama_block_impl : public decoder_block {
public:
  explicit llama_block_impl(const model_config& cfg);
  torch::Tensor forward(const torch::Tensor& x) override { return run(x, nullptr); }
  torch::Tensor forward_cached(const torch::Tensor& x, kv_slot& slot) override { return run(x, &slot); }
  void init(at::Generator& gen, double std, double residual_std) override;

private:
  torch::Tensor run(const torch::Tensor& x, kv_slot* slot);
  int64_t n_heads_, n_kv_heads_, head_dim_;
  double theta_;
  rms_norm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr};
  torch::nn::Linear q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  torch::nn::Linear gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};

}  // namespace swarm
