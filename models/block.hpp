#pragma once
// A decoder block of any model family: hidden states [B, T, d] in and out.
// The stage module (models/gpt.hpp) holds a stage's blocks through this base,
// so a stage is the same code whatever the family.

#include <torch/torch.h>

#include "config/config.hpp"

namespace swarm {

class decoder_block : public torch::nn::Module {
public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  /// Draws the block's weights from `gen` (its family's initialisation); the
  /// projections that write into the residual stream get `residual_std`.
  virtual void init(at::Generator& gen, double std, double residual_std) = 0;
};

/// N(0, std) weights and zero biases, drawn from `gen` (no autograd).
void init_linear(torch::nn::LinearImpl& l, double std, at::Generator& gen);

/// The block of cfg's family.
[[nodiscard]] std::shared_ptr<decoder_block> make_block(const model_config& cfg);

} // namespace swarm
