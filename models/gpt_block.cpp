#include "models/gpt_block.hpp"

#include "models/init.hpp"
#include "models/norm.hpp"

namespace swarm {

namespace {

constexpr double layer_norm_eps = 1e-5;  // GPT-2's

}  // namespace

gpt_block_impl::gpt_block_impl(const model_config& cfg) : n_heads_(cfg.n_heads) {
  const int64_t d = cfg.d_model;
  ln1_ = register_module("ln1", make_layer_norm(d, layer_norm_eps));
  qkv_ = register_module("qkv", torch::nn::Linear(d, 3 * d));
  proj_ = register_module("proj", torch::nn::Linear(d, d));
  ln2_ = register_module("ln2", make_layer_norm(d, layer_norm_eps));
  fc_ = register_module("fc", torch::nn::Linear(d, 4 * d));
  out_ = register_module("out", torch::nn::Linear(4 * d, d));
}

void gpt_block_impl::init(at::Generator& gen, double std, double residual_std) {
  for (auto* l : {qkv_.get(), proj_.get(), fc_.get(), out_.get()})
    init_linear(*l, l == proj_.get() || l == out_.get() ? residual_std : std, gen);
}

torch::Tensor gpt_block_impl::run(const torch::Tensor& x, kv_slot* slot) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const int64_t hd = d / n_heads_;
  auto qkv = qkv_(ln1_(x)).chunk(3, -1);
  auto split_heads = [&](const torch::Tensor& m) { return m.view({b, t, n_heads_, hd}).transpose(1, 2); };
  const auto [k, v] = extend(slot, split_heads(qkv[1]), split_heads(qkv[2]));
  auto y = causal_attention(split_heads(qkv[0]), k, v).transpose(1, 2).contiguous().view({b, t, d});
  auto h = x + proj_(y);
  return h + out_(torch::gelu(fc_(ln2_(h)), "tanh"));
}

}  // namespace swarm
