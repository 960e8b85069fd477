#pragma once
// Parameters by their name in the stage module ("block3.q_proj.weight"): a
// name is the same in every cut, so the stages' maps merge into the whole model's.

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace swarm {

using named_tensors = std::map<std::string, at::Tensor>;

}  // namespace swarm
