#pragma once
// The optimizer step's two choices beyond AdamW's defaults: the learning-rate
// schedule and LAMB.
//
// Schedule: a pure function of the stage's optimizer step (the worker's step
// count, which joins, reloads and checkpoints carry), so every peer of a stage
// steps with the same rate and a resumed run continues where it stopped.
//
// LAMB (You et al. 2019, the SWARM paper's optimizer for its 1B model): AdamW's
// moments, then each parameter tensor's update is scaled by its trust ratio
// ||w|| / ||update||. The norms are per tensor, so no norm crosses stages and a
// stage steps exactly as the same tensors would in one process.

#include <cstdint>

#include <torch/torch.h>

#include "config/config.hpp"

namespace swarm {

/// The learning rate of optimizer step `step` (0-based: the steps applied before it):
/// linear warm-up lr x (step + 1) / warmup_steps over the first warmup_steps, then
/// constant lr, or cosine from lr down to min_lr at decay_steps (min_lr after it).
[[nodiscard]] double learning_rate(const model_config& cfg, int64_t step);

/// LAMB on AdamW's parameter groups and state (so state transfer and checkpoints
/// need nothing new). Per tensor: m, v as AdamW (bias-corrected), r = m / (sqrt(v) + eps)
/// + weight_decay w, w -= lr x (||w|| / ||r||) r, the ratio 1 where either norm is 0.
class lamb : public torch::optim::AdamW {
public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

/// AdamW (or LAMB, cfg.optimizer) over `module`'s parameters with cfg's betas and lr; weight decay only
/// on parameters with two or more dimensions (not on biases and LayerNorm gains).
[[nodiscard]] std::unique_ptr<torch::optim::AdamW> make_optimizer(torch::nn::Module& module, const model_config& cfg);

/// Sets every parameter group's rate to learning_rate(cfg, step).
void set_learning_rate(torch::optim::AdamW& optimizer, const model_config& cfg, int64_t step);

}  // namespace swarm
