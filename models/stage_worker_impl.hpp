#pragma once
// The stage worker's insides, shared by its two files: models/stage_worker.cpp
// (compute and steps) and models/stage_worker_state.cpp (state transfer).
// Not for other users: they see models/stage_worker.hpp.

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/activation_cache.hpp"
#include "models/losses.hpp"
#include "models/stage_module.hpp"
#include "models/optimizer.hpp"
#include "models/stage_worker.hpp"

namespace swarm {

struct stage_worker::impl {
  model_config cfg;
  stage_module module;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<torch::Tensor> params;  // registration order: the flat order of the header
  std::vector<std::string> names;     // params' names ("block2.qkv.weight")
  // Gradients are summed here rather than in .grad so that a microbatch whose
  // gradients come out non-finite can be dropped without touching the good ones.
  std::vector<torch::Tensor> accum;
  int64_t samples = 0;
  int64_t microbatches = 0;
  int64_t stale_samples = 0;  ///< of `samples` (and `held`), accumulated before the last step
  /// One microbatch's gradients kept out of `accum` (commit_decision::hold).
  std::vector<torch::Tensor> held;
  int64_t held_samples = 0;
  int64_t steps = 0;
  double last_grad_norm = 0;
  /// The parameters before the last steps, newest first (previous[k]: those of
  /// step steps - 1 - k), for a backward whose forward ran on them
  /// (stage_worker::backward); empty on the last stage, whose forward runs its
  /// backward, and after an import.
  std::deque<std::vector<torch::Tensor>> previous;
  bool held_stale = false;  ///< the held microbatch was computed on `previous`
  // Issue #47's lying faults (stage_worker::set_lies): test hooks only.
  int64_t stale_steps = 0;  ///< forwards and backwards on the parameters this many steps old, when kept
  bool drop_half = false;   ///< every second gradient never added, its samples counted all the same
  int64_t gradients_seen = 0;
  swarm::activation_cache cache;  ///< recorded forwards awaiting their backward

  torch::Device device;

  impl(const model_config& c, const stage_span& span, const torch::Device& d) : cfg(c), module(c, span), device(d) {
    module->to(device);  // before the optimizer: it keys its state by the parameters it is given
    optimizer = make_optimizer(*module, cfg);
    for (const auto& item : module->named_parameters()) {
      names.push_back(item.key());
      params.push_back(item.value());
      accum.push_back(torch::zeros_like(item.value()));
    }
  }

  [[nodiscard]] const stage_span& span() const { return module->span(); }

  void clear_param_grads() {
    for (auto& p : params)
      p.mutable_grad() = torch::Tensor{};
  }

  void clear_accumulator() {
    torch::NoGradGuard no_grad;
    for (auto& a : accum)
      a.zero_();
    samples = 0;
    microbatches = 0;
    stale_samples = 0;
  }

  void add_to_accumulator(const std::vector<torch::Tensor>& grads, int64_t batch) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined())
        accum[i].add_(grads[i]);
    samples += batch;
    ++microbatches;
  }

  int64_t settle_held(bool keep) {
    const int64_t n = held_samples;
    if (keep && n > 0) {
      add_to_accumulator(held, n);
      stale_samples += held_stale ? n : 0;
    }
    held.clear();
    held_samples = 0;
    held_stale = false;
    return n;
  }

  /// The parameters were replaced from outside (a peer's state, a
  /// checkpoint, a file): nothing computed on the old ones is kept, neither
  /// gradients nor held microbatches nor earlier versions nor cached forwards.
  void parameters_replaced() {
    clear_param_grads();
    clear_accumulator();
    settle_held(false);
    previous.clear();  // not the parameters before this state's last step
    cache.parameters_changed();
  }

  /// Swaps the current parameters with previous[k] (twice: back as they were).
  void swap_previous(size_t k) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      auto now = params[i].data();
      params[i].set_data(previous[k][i]);
      previous[k][i] = now;
    }
  }

  /// Keeps the parameters about to be stepped (not on the last stage: see
  /// `previous`), at most stage_worker::kept_versions of them.
  void keep_previous() {
    if (span().has_head())
      return;
    torch::NoGradGuard no_grad;
    if (previous.size() < stage_worker::kept_versions) {
      std::vector<torch::Tensor> copy;
      for (const auto& p : params)
        copy.push_back(p.detach().clone());
      previous.push_front(std::move(copy));
      return;
    }
    auto oldest = std::move(previous.back());  // its buffers, reused
    previous.pop_back();
    for (size_t i = 0; i < params.size(); ++i)
      oldest[i].copy_(params[i].detach());
    previous.push_front(std::move(oldest));
  }

  /// Clips the gradients in the parameters' .grad (to cfg.grad_clip over the
  /// model's norm, `other_norm_sq` the other stages' part), steps the optimizer
  /// and clears them (stage_worker::apply_gradient and apply_step).
  [[nodiscard]] error step_on_grads(double other_norm_sq);

  /// Runs `fn` (which backpropagates one microbatch into .grad) and adds its
  /// gradients to the sums only when the loss and every gradient are finite.
  template <class Fn>
  result<loss_and_grad> accumulate(int64_t batch, const commit_gate& gate, bool& duplicate, Fn&& fn,
                                   bool stale = false) {
    clear_param_grads();
    loss_and_grad r = fn();
    if (drop_half && ++gradients_seen % 2 == 0) {
      // The lie: what a server that computed nothing could answer (a
      // uniform guess's loss, no input gradient), its samples claimed.
      clear_param_grads();
      r.loss = std::log(static_cast<float>(cfg.vocab));
      if (r.input_grad.defined())
        r.input_grad = torch::zeros_like(r.input_grad);
      std::vector<torch::Tensor> zeros;
      for (auto& p : params)
        zeros.push_back(torch::zeros_like(p));
      add_to_accumulator(zeros, batch);
      return r;
    }
    bool finite = std::isfinite(r.loss) && all_finite(r.input_grad);
    for (size_t i = 0; finite && i < params.size(); ++i)
      finite = all_finite(params[i].grad());
    if (!finite) {
      clear_param_grads();
      return error(errc::NON_FINITE, "stage " + std::to_string(span().stage) +
                                         ": loss or gradients are NaN or Inf for these inputs; dropped");
    }
    const auto decision = gate ? gate() : commit_decision{};
    duplicate = !decision.add;
    if (decision.reject || duplicate) {
      clear_param_grads();
      if (decision.reject)
        return decision.reject;
      return r;
    }
    std::vector<torch::Tensor> grads;
    grads.reserve(params.size());
    for (auto& p : params)
      grads.push_back(p.grad());
    clear_param_grads();
    if (decision.hold) {
      settle_held(true);
      held = std::move(grads);  // the tensors autograd made: no copy
      held_samples = batch;
      held_stale = stale;
    } else {
      add_to_accumulator(grads, batch);
      stale_samples += stale ? batch : 0;
    }
    return r;
  }
};

}  // namespace swarm
