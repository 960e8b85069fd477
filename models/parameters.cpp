#include "models/parameters.hpp"

namespace swarm {

error load_parameters(torch::nn::Module& module, const named_tensors& values) {
  auto params = module.named_parameters();
  for (const auto& p : params) {
    const auto it = values.find(p.key());
    if (it == values.end() || !it->second.defined())
      return error(errc::WRONG_SHAPE, "parameter " + p.key() + " is missing");
    if (it->second.sizes() != p.value().sizes())
      return error(errc::WRONG_SHAPE,
                   "parameter " + p.key() + " is " + shape_of(it->second) + ", expected " + shape_of(p.value()));
    if (!all_finite(it->second))
      return error(errc::NON_FINITE, "parameter " + p.key() + " holds NaN or Inf");
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params)
    p.value().copy_(values.at(p.key()));
  return error{};
}

}  // namespace swarm
