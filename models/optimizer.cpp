#include "models/optimizer.hpp"

#include <algorithm>
#include <cmath>

namespace swarm {

double learning_rate(const model_config& cfg, int64_t step) {
  step = std::max<int64_t>(step, 0);
  if (step < cfg.warmup_steps)
    return cfg.lr * static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  if (cfg.lr_schedule != "cosine")
    return cfg.lr;
  const auto span = static_cast<double>(std::max<int64_t>(cfg.decay_steps - cfg.warmup_steps, 1));
  const double progress = std::min(1.0, static_cast<double>(step - cfg.warmup_steps) / span);
  constexpr double pi = 3.14159265358979323846;
  return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + std::cos(pi * progress));
}

torch::Tensor lamb::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined())
        continue;
      const auto& grad = p.grad();
      auto& slot = state()[c10::guts::to_string(p.unsafeGetTensorImpl())];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      st.step(st.step() + 1);
      st.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
      st.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const double correction1 = 1 - std::pow(beta1, static_cast<double>(st.step()));
      const double correction2 = 1 - std::pow(beta2, static_cast<double>(st.step()));
      auto update = (st.exp_avg() / correction1) / ((st.exp_avg_sq() / correction2).sqrt() + o.eps());
      if (o.weight_decay() != 0)
        update.add_(p, o.weight_decay());
      const double w_norm = p.norm().item<double>(), u_norm = update.norm().item<double>();
      const double trust = w_norm > 0 && u_norm > 0 ? w_norm / u_norm : 1.0;
      p.add_(update, -o.lr() * trust);
    }
  }
  return loss;
}

std::unique_ptr<torch::optim::AdamW> make_optimizer(torch::nn::Module& module, const model_config& cfg) {
  auto options =
      torch::optim::AdamWOptions(learning_rate(cfg, 0)).betas({cfg.beta1, cfg.beta2}).weight_decay(cfg.weight_decay);
  // Decay shrinks matrices towards zero; on gains and biases it only hurts (GPT-2, nanoGPT).
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : module.parameters())
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(options));
  auto no_decay_options = options;
  no_decay_options.weight_decay(0.0);
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(no_decay_options));
  if (cfg.optimizer == "lamb")
    return std::make_unique<lamb>(std::move(groups), options);
  return std::make_unique<torch::optim::AdamW>(std::move(groups), options);
}

void set_learning_rate(torch::optim::AdamW& optimizer, const model_config& cfg, int64_t step) {
  const double lr = learning_rate(cfg, step);
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

}  // namespace swarm
