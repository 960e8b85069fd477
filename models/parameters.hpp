#pragma once
// A module's parameters filled from named tensors, and the checks and words
// that go with it.

#include <string>

#include <torch/torch.h>

#include "base/error.hpp"
#include "models/named_tensors.hpp"

namespace swarm {

/// "[8, 64, 32] Float": a tensor's shape and type, for error messages.
inline std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d)
    s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "] " + std::string{c10::toString(t.scalar_type())};
}

/// No NaN or Inf in `t` (true for undefined and integer tensors).
inline bool all_finite(const torch::Tensor& t) {
  return !t.defined() || !t.is_floating_point() || torch::isfinite(t).all().item<bool>();
}

/// Copies `values`' tensors into `module`'s parameters of the same names
/// (others are ignored); WRONG_SHAPE naming a parameter that is missing or of
/// another shape, NON_FINITE one that holds NaN or Inf; nothing is changed then.
[[nodiscard]] error load_parameters(torch::nn::Module& module, const named_tensors& values);

}  // namespace swarm
