#pragma once
// torch::Tensor <-> proto::tensor. The only place that knows both.

#include <caf/expected.hpp>
#include <torch/torch.h>

#include "swarm.pb.h"

namespace swarm {

/// Encodes any CPU tensor (made contiguous first) with the RAW codec.
[[nodiscard]] proto::tensor encode_tensor(const torch::Tensor& t);

/// Decodes after check_tensor(); the result owns its memory. BAD_REQUEST naming
/// `name` when the payload is inconsistent.
[[nodiscard]] caf::expected<torch::Tensor> decode_tensor(const proto::tensor& t, const char* name);

} // namespace swarm
