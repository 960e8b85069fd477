#pragma once
// A decoder block of any model family: hidden states [B, T, d] in and out.
// The stage module (models/stage_module.hpp) holds a stage's blocks through
// this base, so a stage is the same code whatever the family.

#include <memory>

#include <torch/torch.h>

#include "config/config.hpp"
#include "models/attention.hpp"

namespace swarm {

class decoder_block : public torch::nn::Module {
public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  /// forward() of the positions after those `slot` holds, attending to them
  /// too; appends these positions' keys and values to `slot`.
  virtual torch::Tensor forward_cached(const torch::Tensor& x, kv_slot& slot) = 0;
  /// Draws the block's weights from `gen` (its family's initialisation); the
  /// projections that write into the residual stream get `residual_std`.
  virtual void init(at::Generator& gen, double std, double residual_std) = 0;
};

/// The block of cfg's family: the implementation its descriptor's `block`
/// names, from models/block.cpp's table.
[[nodiscard]] std::shared_ptr<decoder_block> make_block(const model_config& cfg);

}  // namespace swarm
