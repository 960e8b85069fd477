#include "models/stage_backward.hpp"

#include "config/family.hpp"

namespace swarm {

torch::Tensor as_grad_leaf(const torch::Tensor& inputs) {
  if (!inputs.is_floating_point())
    return inputs;
  return inputs.detach().clone().requires_grad_(true);
}

torch::Tensor grad_of(const torch::Tensor& leaf) { return leaf.requires_grad() ? leaf.grad() : torch::Tensor{}; }

torch::Tensor stage_backward(stage_module& stage, const torch::Tensor& inputs, const torch::Tensor& output_grad) {
  torch::AutoGradMode grad_mode(true);
  auto leaf = as_grad_leaf(inputs);
  auto out = stage->forward(leaf);
  out.backward(output_grad);
  return grad_of(leaf);
}

recorded_forward stage_forward_recorded(stage_module& stage, const torch::Tensor& inputs) {
  torch::AutoGradMode grad_mode(true);
  recorded_forward r;
  r.leaf = as_grad_leaf(inputs);
  r.outputs = stage->forward(r.leaf);
  return r;
}

torch::Tensor stage_backward(const recorded_forward& forward, const torch::Tensor& output_grad) {
  torch::AutoGradMode grad_mode(true);
  forward.outputs.backward(output_grad);
  return grad_of(forward.leaf);
}

int64_t recorded_forward_bytes(const model_config& cfg, int blocks, int64_t batch, int64_t tokens) {
  const int64_t d = cfg.d_model, kv = cfg.d_model / cfg.n_heads * cfg.kv_heads();
  // Per token of one block: x and its two norms (3 d), q and the output
  // projection's input (2 d), k and v (2 kv), the residual's second input (d),
  // the MLP's hidden activations (GELU: before and after, 2 ffn; SwiGLU: gate,
  // up and their product, 3 ffn), and per head the attention weights before
  // and after the softmax (2 T).
  const int64_t mlp = family_of(cfg).mlp_activations * cfg.ffn_width();
  const int64_t per_token = 6 * d + 2 * kv + mlp + 2 * cfg.n_heads * tokens;
  return static_cast<int64_t>(sizeof(float)) * batch * tokens * (blocks * per_token + d);
}

}  // namespace swarm
