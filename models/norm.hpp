#pragma once
// The norms blocks and stage modules build: LayerNorm (gpt) and RMSNorm
// (llama, qwen2), and the one a family puts before a stage cut and the LM head.

#include <string>

#include <torch/torch.h>

#include "config/config.hpp"

namespace swarm {

/// x / sqrt(mean(x^2) + eps) * weight, computed in float32.
class rms_norm_impl : public torch::nn::Module {
public:
  rms_norm_impl(int64_t d, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

private:
  double eps_;
};
TORCH_MODULE_IMPL(rms_norm, rms_norm_impl);

/// LayerNorm over d features: unit gains, zero biases (its defaults).
[[nodiscard]] torch::nn::LayerNorm make_layer_norm(int64_t d, double eps);

/// The norm of cfg's family (its descriptor's `norm` and `norm_eps`) as a
/// sub-module of `owner` called `name`, or none (default-constructed).
class family_norm {
public:
  family_norm() = default;
  family_norm(torch::nn::Module& owner, const std::string& name, const model_config& cfg);
  [[nodiscard]] explicit operator bool() const { return !ln_.is_empty() || !rms_.is_empty(); }
  torch::Tensor operator()(const torch::Tensor& x) { return ln_ ? ln_(x) : rms_(x); }

private:
  torch::nn::LayerNorm ln_{nullptr};
  rms_norm rms_{nullptr};
};

}  // namespace swarm
