#pragma once
// The language-model loss and the last stage's steps that end in it.

#include <torch/torch.h>

#include "models/stage_module.hpp"

namespace swarm {

/// Mean next-token cross-entropy in nats: logits [B, T, V], targets int64 [B, T].
[[nodiscard]] torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

/// Last stage: forward, loss against `targets`, backward; accumulates parameter
/// gradients and returns (loss, d loss / d inputs).
struct loss_and_grad {
  float loss = 0;
  torch::Tensor input_grad;
};
[[nodiscard]] loss_and_grad last_stage_forward_backward(stage_module& stage, const torch::Tensor& inputs,
                                                        const torch::Tensor& targets);

/// Last stage, a second opinion (issue #47's verification): the same loss and
/// d loss / d inputs as last_stage_forward_backward, no parameter gradient
/// accumulated.
[[nodiscard]] loss_and_grad last_stage_check(stage_module& stage, const torch::Tensor& inputs,
                                             const torch::Tensor& targets);

/// Last stage, validation: the mean loss against `targets`, no gradient.
[[nodiscard]] float last_stage_loss(stage_module& stage, const torch::Tensor& inputs, const torch::Tensor& targets);

}  // namespace swarm
