#pragma once
// A stage's backward: stateless (the forward recomputed from the inputs) or on
// a forward recorded with its graph (the activation cache), and what such a
// recording costs in memory.

#include <cstdint>

#include <torch/torch.h>

#include "config/config.hpp"
#include "models/stage_module.hpp"

namespace swarm {

/// Stateless backward of a stage: recompute forward from `inputs`, backpropagate
/// `output_grad`, accumulate parameter gradients, return d/d inputs (undefined
/// tensor for stage 0, whose inputs are token ids).
[[nodiscard]] torch::Tensor stage_backward(stage_module& stage, const torch::Tensor& inputs,
                                           const torch::Tensor& output_grad);

/// A stage's forward run with autograd recording (the activation cache keeps
/// it): `outputs` still holds its graph, `leaf` is what d/d inputs lands in
/// (the token ids themselves on stage 0).
struct recorded_forward {
  torch::Tensor leaf;
  torch::Tensor outputs;
};
[[nodiscard]] recorded_forward stage_forward_recorded(stage_module& stage, const torch::Tensor& inputs);

/// stage_backward on a recorded forward instead of a recomputed one: the same
/// operations on the same tensors, so the same gradients bit for bit, valid
/// while the parameters are those the forward ran on. Frees the graph.
[[nodiscard]] torch::Tensor stage_backward(const recorded_forward& forward, const torch::Tensor& output_grad);

/// Bytes a recorded forward of `batch` x `tokens` keeps on a stage of `blocks`
/// blocks, estimated from the shapes a block saves for its backward (its
/// inputs, normalised inputs, q, k, v, attention weights before and after
/// the softmax, the MLP's activations its family keeps) and the outputs. An
/// estimate: the activation cache's budget is in these bytes.
[[nodiscard]] int64_t recorded_forward_bytes(const model_config& cfg, int blocks, int64_t batch, int64_t tokens);

/// A leaf copy of a stage's inputs that collects their gradient; token ids stay as they are.
[[nodiscard]] torch::Tensor as_grad_leaf(const torch::Tensor& inputs);

/// The gradient `as_grad_leaf`'s result collected; undefined for token ids.
[[nodiscard]] torch::Tensor grad_of(const torch::Tensor& leaf);

}  // namespace swarm
