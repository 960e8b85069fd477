#include "models/llama_block.hpp"

#include "config/family.hpp"
#include "models/init.hpp"

namespace swarm {

namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias = false) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> rotary_tables(int64_t first, int64_t t, int64_t head_dim, double theta,
                                                      const torch::Device& device) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  // Hugging Face: inv_freq = 1 / theta^(arange(0, d, 2) / d); angles for both halves.
  const auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim));
  const auto freqs = torch::outer(torch::arange(first, first + t, f32), inv_freq);
  const auto angles = torch::cat({freqs, freqs}, -1);
  return {angles.cos(), angles.sin()};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

llama_block_impl::llama_block_impl(const model_config& cfg)
    : n_heads_(cfg.n_heads), n_kv_heads_(cfg.kv_heads()), head_dim_(cfg.d_model / cfg.n_heads), theta_(cfg.rope_theta) {
  const int64_t d = cfg.d_model, ffn = cfg.ffn_width();
  const bool qkv_bias = family_of(cfg).qkv_bias;  // qwen2
  input_layernorm_ = register_module("input_layernorm", rms_norm(d, cfg.norm_eps));
  q_proj_ = register_module("q_proj", linear(d, n_heads_ * head_dim_, qkv_bias));
  k_proj_ = register_module("k_proj", linear(d, n_kv_heads_ * head_dim_, qkv_bias));
  v_proj_ = register_module("v_proj", linear(d, n_kv_heads_ * head_dim_, qkv_bias));
  o_proj_ = register_module("o_proj", linear(n_heads_ * head_dim_, d));
  post_attention_layernorm_ = register_module("post_attention_layernorm", rms_norm(d, cfg.norm_eps));
  gate_proj_ = register_module("gate_proj", linear(d, ffn));
  up_proj_ = register_module("up_proj", linear(d, ffn));
  down_proj_ = register_module("down_proj", linear(ffn, d));
}

void llama_block_impl::init(at::Generator& gen, double std, double residual_std) {
  // Registration order, so the draws are fixed by the config alone.
  for (auto* l :
       {q_proj_.get(), k_proj_.get(), v_proj_.get(), o_proj_.get(), gate_proj_.get(), up_proj_.get(), down_proj_.get()})
    init_linear(*l, l == o_proj_.get() || l == down_proj_.get() ? residual_std : std, gen);
}

torch::Tensor llama_block_impl::run(const torch::Tensor& x, kv_slot* slot) {
  const int64_t b = x.size(0), t = x.size(1), first = slot ? slot->positions() : 0;
  const auto h = input_layernorm_(x);
  auto heads = [&](const torch::Tensor& m, int64_t n) { return m.view({b, t, n, head_dim_}).transpose(1, 2); };
  auto q = heads(q_proj_(h), n_heads_), k = heads(k_proj_(h), n_kv_heads_), v = heads(v_proj_(h), n_kv_heads_);
  const auto [cos, sin] = rotary_tables(first, t, head_dim_, theta_, x.device());
  q = apply_rotary(q, cos.to(q.scalar_type()), sin.to(q.scalar_type()));
  k = apply_rotary(k, cos.to(k.scalar_type()), sin.to(k.scalar_type()));
  std::tie(k, v) = extend(slot, k, v);  // cached before the repeat: kv heads only
  if (n_kv_heads_ != n_heads_) {
    // Query head i reads key/value head i / (n_heads / n_kv_heads), as Hugging Face's repeat_kv.
    k = k.repeat_interleave(n_heads_ / n_kv_heads_, 1);
    v = v.repeat_interleave(n_heads_ / n_kv_heads_, 1);
  }
  const auto y = causal_attention(q, k, v).transpose(1, 2).reshape({b, t, n_heads_ * head_dim_});
  const auto r = x + o_proj_(y);
  const auto m = post_attention_layernorm_(r);
  return r + down_proj_(torch::silu(gate_proj_(m)) * up_proj_(m));
}

}  // namespace swarm
