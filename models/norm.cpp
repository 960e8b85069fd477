#include "models/norm.hpp"

#include "config/family.hpp"

namespace swarm {

rms_norm_impl::rms_norm_impl(int64_t d, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({d}));
}

torch::Tensor rms_norm_impl::forward(const torch::Tensor& x) {
  const auto xf = x.to(torch::kFloat);
  return weight * (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps_)).to(x.scalar_type());
}

torch::nn::LayerNorm make_layer_norm(int64_t d, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(eps));
}

family_norm::family_norm(torch::nn::Module& owner, const std::string& name, const model_config& cfg) {
  const auto& family = family_of(cfg);
  const double eps = family.norm_eps(cfg);
  if (family.norm == norm_kind::layer_norm)
    ln_ = owner.register_module(name, make_layer_norm(cfg.d_model, eps));
  else
    rms_ = owner.register_module(name, rms_norm(cfg.d_model, eps));
}

}  // namespace swarm
