#include "models/losses.hpp"

#include "models/stage_backward.hpp"

namespace swarm {

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

loss_and_grad last_stage_forward_backward(stage_module& stage, const torch::Tensor& inputs,
                                          const torch::Tensor& targets) {
  torch::AutoGradMode grad_mode(true);
  auto leaf = as_grad_leaf(inputs);
  auto loss = lm_loss(stage->forward(leaf), targets);
  loss.backward();
  return {loss.item<float>(), grad_of(leaf)};
}

loss_and_grad last_stage_check(stage_module& stage, const torch::Tensor& inputs, const torch::Tensor& targets) {
  torch::AutoGradMode grad_mode(true);
  auto leaf = as_grad_leaf(inputs);
  auto loss = lm_loss(stage->forward(leaf), targets);
  if (!leaf.requires_grad())  // token ids (a one-stage model): the loss alone
    return {loss.item<float>(), {}};
  auto grads = torch::autograd::grad({loss}, {leaf});  // the leaf's alone: parameters' .grad untouched
  return {loss.item<float>(), grads[0]};
}

float last_stage_loss(stage_module& stage, const torch::Tensor& inputs, const torch::Tensor& targets) {
  torch::NoGradGuard no_grad;
  return lm_loss(stage->forward(inputs), targets).item<float>();
}

}  // namespace swarm
