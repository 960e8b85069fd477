#include "models/stage_worker.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <optional>

#include "base/error.hpp"
#include "base/hash.hpp"
#include "models/device.hpp"
#include "models/losses.hpp"
#include "models/stage_backward.hpp"
#include "models/stage_worker_impl.hpp"

namespace swarm {

namespace {

// --- validation against the model

error wrong_shape(const torch::Tensor& t, const char* name, const std::string& expected) {
  return error(errc::WRONG_SHAPE, std::string{name} + " " + shape_of(t) + " expected " + expected);
}

/// Token ids: int64 [B, T], 1 <= B, 1 <= T <= seq_len, ids in [0, vocab).
error check_tokens(const torch::Tensor& t, const char* name, const model_config& cfg) {
  const bool ok = t.defined() && t.scalar_type() == torch::kLong && t.dim() == 2 && t.size(0) >= 1 && t.size(1) >= 1 &&
                  t.size(1) <= cfg.seq_len;
  if (!ok)
    return t.defined() ? wrong_shape(t, name, "[B, T<=" + std::to_string(cfg.seq_len) + "] Long")
                       : error(errc::BAD_REQUEST, std::string{name} + " missing");
  const auto lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
  if (lo < 0 || hi >= cfg.vocab)
    return error(errc::BAD_REQUEST, std::string{name} + " hold token ids outside [0, " + std::to_string(cfg.vocab) +
                                        "): min " + std::to_string(lo) + ", max " + std::to_string(hi));
  return error{};
}

error check_finite(const torch::Tensor& t, const char* name) {
  return all_finite(t) ? error{} : error(errc::NON_FINITE, std::string{name} + " hold NaN or Inf");
}

/// Hidden states as they cross a stage cut: float32 [B, T, wire_width()]
/// (d_model without --boundary), 1 <= B, 1 <= T <= seq_len, finite.
error check_hidden(const torch::Tensor& t, const char* name, const model_config& cfg) {
  const bool ok = t.defined() && t.scalar_type() == torch::kFloat32 && t.dim() == 3 && t.size(0) >= 1 &&
                  t.size(1) >= 1 && t.size(1) <= cfg.seq_len && t.size(2) == cfg.wire_width();
  if (!ok)
    return t.defined() ? wrong_shape(t, name,
                                     "[B, T<=" + std::to_string(cfg.seq_len) + ", " + std::to_string(cfg.wire_width()) +
                                         "] Float")
                       : error(errc::BAD_REQUEST, std::string{name} + " missing");
  return check_finite(t, name);
}

error check_inputs(const torch::Tensor& t, const stage_span& span, const model_config& cfg) {
  return span.has_embedding() ? check_tokens(t, "inputs", cfg) : check_hidden(t, "inputs", cfg);
}

/// `t` must be [B, T(, d_model)] of the batch and length of `inputs`.
error check_same_batch(const torch::Tensor& t, const char* name, const torch::Tensor& inputs,
                       const std::string& expected) {
  if (t.size(0) != inputs.size(0) || t.size(1) != inputs.size(1))
    return wrong_shape(t, name, expected + " (the inputs are " + shape_of(inputs) + ")");
  return error{};
}

/// The last stage's targets: token ids [B, T] of the inputs' batch and length.
error check_targets(const torch::Tensor& targets, const torch::Tensor& inputs, const model_config& cfg) {
  if (auto err = check_tokens(targets, "targets", cfg))
    return err;
  return check_same_batch(targets, "targets", inputs, "[B, T] Long of the inputs");
}

stage_span checked_span(const model_config& cfg, int stage, int num_stages) {
  if (cfg.n_heads < 1 || cfg.d_model % cfg.n_heads != 0)
    throw std::invalid_argument("d_model " + std::to_string(cfg.d_model) + " is not divisible by n_heads " +
                                std::to_string(cfg.n_heads) + ": pick n_heads that divides d_model");
  const auto spans = partition_layers(cfg, num_stages);
  if (spans.empty())
    throw std::invalid_argument("cannot cut " + std::to_string(cfg.n_layers) + " layers shared in runs of " +
                                std::to_string(cfg.share_layers) + " into " + std::to_string(num_stages) +
                                " stages: use --stages between 1 and n_layers / share_layers");
  if (stage < 0 || stage >= num_stages)
    throw std::invalid_argument("stage " + std::to_string(stage) + " is outside [0, " + std::to_string(num_stages) +
                                "): pass --stage between 0 and stages - 1");
  return spans[static_cast<size_t>(stage)];
}

}  // namespace

stage_worker::stage_worker(const model_config& cfg, int stage, int num_stages, const std::string& device)
    : impl_(std::make_unique<impl>(cfg, checked_span(cfg, stage, num_stages), usable_device(device))) {}

stage_worker::~stage_worker() = default;
stage_worker::stage_worker(stage_worker&&) noexcept = default;
stage_worker& stage_worker::operator=(stage_worker&&) noexcept = default;

result<forward_result> stage_worker::forward(const torch::Tensor& inputs_in, const torch::Tensor* targets_in,
                                             const commit_gate& gate, const std::string& cache_key) {
  auto& m = *impl_;
  try {
    const auto inputs = inputs_in.defined() ? inputs_in.to(m.device) : inputs_in;
    if (auto err = check_inputs(inputs, m.span(), m.cfg))
      return err;
    forward_result result;
    if (!m.span().has_head()) {
      if (targets_in)
        return error(errc::BAD_REQUEST,
                     "targets given to stage " + std::to_string(m.span().stage) + ", which is not the last");
      if (m.stale_steps > 0 && static_cast<int64_t>(m.previous.size()) >= m.stale_steps) {
        // --fault stale: on the parameters stale_steps old, claiming the current ones.
        const auto k = static_cast<size_t>(m.stale_steps - 1);
        m.swap_previous(k);
        struct swap_back {
          impl& m;
          size_t k;
          ~swap_back() { m.swap_previous(k); }
        } restore{m, k};
        torch::NoGradGuard no_grad;
        result.outputs = m.module->forward(inputs);
        if (auto err = check_finite(result.outputs, "outputs"))
          return err;
        return result;
      }
      if (!cache_key.empty() && m.cache.enabled()) {
        auto recorded = stage_forward_recorded(m.module, inputs);
        result.outputs = recorded.outputs.detach();
        if (auto err = check_finite(result.outputs, "outputs"))
          return err;
        m.cache.put(cache_key, m.steps, inputs, std::move(recorded),
                    recorded_forward_bytes(m.cfg, m.span().blocks(), inputs.size(0), inputs.size(1)));
        return result;
      }
      torch::NoGradGuard no_grad;
      result.outputs = m.module->forward(inputs);
      if (auto err = check_finite(result.outputs, "outputs"))
        return err;
      return result;
    }
    if (!targets_in)
      return error(errc::BAD_REQUEST, "the last stage needs targets");
    const auto targets = targets_in->defined() ? targets_in->to(m.device) : *targets_in;
    if (auto err = check_targets(targets, inputs, m.cfg))
      return err;
    auto r = m.accumulate(inputs.size(0), gate, result.duplicate,
                          [&] { return last_stage_forward_backward(m.module, inputs, targets); });
    if (!r)
      return r.error();
    result.loss = r->loss;
    result.input_grad = r->input_grad;
    return result;
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return error(errc::INTERNAL, std::string{"forward of stage "} + std::to_string(m.span().stage) + ": " + e.what());
  }
}

namespace {

/// A last-stage-only call that adds nothing (validation, verification):
/// refused elsewhere, inputs and targets moved and checked, exceptions as
/// INTERNAL errors naming `what`; `fn(inputs, targets)` does the rest.
template <class T, class Fn>
result<T> on_last_stage(stage_worker::impl& m, const torch::Tensor& inputs_in, const torch::Tensor& targets_in,
                        const char* what, const char* elsewhere, Fn&& fn) {
  if (!m.span().has_head())
    return error(errc::BAD_REQUEST, std::string{what} + " asked of stage " + std::to_string(m.span().stage) +
                                        ", which is not the last (" + elsewhere + ")");
  try {
    const auto inputs = inputs_in.defined() ? inputs_in.to(m.device) : inputs_in;
    const auto targets = targets_in.defined() ? targets_in.to(m.device) : targets_in;
    if (auto err = check_inputs(inputs, m.span(), m.cfg))
      return err;
    if (auto err = check_targets(targets, inputs, m.cfg))
      return err;
    return fn(inputs, targets);
  } catch (const std::exception& e) {
    return error(errc::INTERNAL, std::string{what} + " on stage " + std::to_string(m.span().stage) + ": " + e.what());
  }
}

}  // namespace

result<float> stage_worker::evaluate(const torch::Tensor& inputs_in, const torch::Tensor& targets_in) {
  auto& m = *impl_;
  return on_last_stage<float>(m, inputs_in, targets_in, "validation", "its forward is the same as in training",
                              [&](const torch::Tensor& inputs, const torch::Tensor& targets) -> result<float> {
                                const float loss = last_stage_loss(m.module, inputs, targets);
                                if (!std::isfinite(loss))
                                  return error(errc::NON_FINITE, "validation loss is not finite");
                                return loss;
                              });
}

result<forward_result> stage_worker::verify(const torch::Tensor& inputs_in, const torch::Tensor& targets_in) {
  auto& m = *impl_;
  return on_last_stage<forward_result>(
      m, inputs_in, targets_in, "a verification forward", "its forwards are verified as they are",
      [&](const torch::Tensor& inputs, const torch::Tensor& targets) -> result<forward_result> {
        auto r = last_stage_check(m.module, inputs, targets);
        if (!std::isfinite(r.loss) || (r.input_grad.defined() && !all_finite(r.input_grad)))
          return error(errc::NON_FINITE, "verification loss or input gradient is not finite");
        forward_result result;
        result.loss = r.loss;
        result.input_grad = r.input_grad;
        return result;
      });
}

result<at::Tensor> stage_worker::next_logits(const torch::Tensor& inputs_in) {
  auto& m = *impl_;
  if (!m.span().has_head())
    return error(errc::BAD_REQUEST,
                 "logits asked of stage " + std::to_string(m.span().stage) + ", which is not the last");
  try {
    const auto inputs = inputs_in.defined() ? inputs_in.to(m.device) : inputs_in;
    if (auto err = check_inputs(inputs, m.span(), m.cfg))
      return err;
    torch::NoGradGuard no_grad;
    auto logits = m.module->forward(inputs).select(1, -1).contiguous();
    if (!all_finite(logits))
      return error(errc::NON_FINITE, "logits are not finite");
    return logits;
  } catch (const std::exception& e) {
    return error(errc::INTERNAL, std::string{"logits on stage "} + std::to_string(m.span().stage) + ": " + e.what());
  }
}

result<backward_result> stage_worker::backward(const torch::Tensor& inputs_in, const torch::Tensor& grad_in,
                                               const commit_gate& gate, std::optional<int64_t> forward_step,
                                               const std::string& cache_key) {
  auto& m = *impl_;
  if (m.span().has_head())
    return error(errc::BAD_REQUEST, "backward on the last stage (its forward already ran backward)");
  try {
    const auto inputs = inputs_in.defined() ? inputs_in.to(m.device) : inputs_in;
    const auto output_grad = grad_in.defined() ? grad_in.to(m.device) : grad_in;
    if (auto err = check_inputs(inputs, m.span(), m.cfg))
      return err;
    // Outputs of a non-last stage are always [B, T, wire width] for inputs [B, T(, d)].
    if (auto err = check_hidden(output_grad, "output_grad", m.cfg))
      return err;
    const std::string expected = "[B, T, " + std::to_string(m.cfg.wire_width()) + "] Float of the inputs";
    if (auto err = check_same_batch(output_grad, "output_grad", inputs, expected))
      return err;
    backward_result result;
    if (m.stale_steps > 0)  // --fault stale: its backward recomputes where its forward ran
      forward_step = m.steps - m.stale_steps;
    const int64_t behind = forward_step ? m.steps - *forward_step : 0;
    const bool on_previous = behind >= 1 && behind <= static_cast<int64_t>(m.previous.size());
    const auto k = static_cast<size_t>(behind - 1);
    std::optional<recorded_forward> recorded;
    if (!cache_key.empty() && m.cache.enabled() && behind == 0)
      recorded = m.cache.take(cache_key, m.steps, inputs);
    auto r = m.accumulate(
        inputs.size(0), gate, result.duplicate,
        [&] {
          if (recorded)
            return loss_and_grad{0.0f, stage_backward(*recorded, output_grad)};
          if (!on_previous)
            return loss_and_grad{0.0f, stage_backward(m.module, inputs, output_grad)};
          m.swap_previous(k);
          struct swap_back {
            impl& m;
            size_t k;
            ~swap_back() { m.swap_previous(k); }  // also when the backward throws
          } restore{m, k};
          return loss_and_grad{0.0f, stage_backward(m.module, inputs, output_grad)};
        },
        on_previous);
    if (!r)
      return r.error();
    result.input_grad = r->input_grad;
    return result;
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return error(errc::INTERNAL, std::string{"backward of stage "} + std::to_string(m.span().stage) + ": " + e.what());
  }
}

void stage_worker::set_activation_cache(int64_t bytes) { impl_->cache.set_limit(bytes); }

void stage_worker::set_bf16(bool on) { impl_->module->set_bf16(on); }

void stage_worker::set_lies(int64_t stale_steps, bool drop_half) {
  impl_->stale_steps = std::clamp<int64_t>(stale_steps, 0, static_cast<int64_t>(kept_versions));
  impl_->drop_half = drop_half;
}

const activation_cache_stats& stage_worker::activation_cache() const { return impl_->cache.stats(); }

int64_t stage_worker::accumulated_samples() const { return impl_->samples; }

int64_t stage_worker::held_samples() const { return impl_->held_samples; }

int64_t stage_worker::settle_held(bool keep) { return impl_->settle_held(keep); }

int64_t stage_worker::steps() const { return impl_->steps; }

void stage_worker::apply_step() {
  auto& m = *impl_;
  if (m.microbatches == 0)
    return;
  // apply_gradient(take_gradient().values), bit for bit, without the flat copy
  // (at d_model 1024 a fresh 200 MB vector per step). accumulate() admits only
  // finite gradients, so the mean is non-finite only when it overflowed float32;
  // then the step is dropped like a non-finite microbatch.
  bool finite = true;
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < m.params.size(); ++i) {
      m.params[i].mutable_grad() = m.accum[i] / static_cast<double>(m.microbatches);
      finite = finite && all_finite(m.params[i].grad());
    }
  }
  m.clear_accumulator();
  if (finite)
    (void)m.step_on_grads(0);
  m.clear_param_grads();
}

local_gradient stage_worker::take_gradient() {
  auto& m = *impl_;
  local_gradient g;
  g.values.assign(static_cast<size_t>(parameter_count()), 0.0f);
  g.samples = m.samples;
  g.microbatches = m.microbatches;
  g.stale_samples = std::min(m.stale_samples, m.samples);
  if (m.microbatches > 0) {
    torch::NoGradGuard no_grad;
    size_t offset = 0;
    for (const auto& a : m.accum) {
      // Each microbatch contributed the gradient of its own mean loss; their mean is
      // the gradient of the batch's mean loss (equal microbatch sizes).
      const auto mean = (a / static_cast<double>(m.microbatches)).to(torch::kCPU).contiguous();
      std::memcpy(g.values.data() + offset, mean.data_ptr<float>(), static_cast<size_t>(mean.numel()) * sizeof(float));
      offset += static_cast<size_t>(mean.numel());
    }
  }
  m.clear_accumulator();
  return g;
}

error stage_worker::restore_gradient(const local_gradient& g, bool stale) {
  auto& m = *impl_;
  if (g.microbatches == 0)
    return error{};
  if (g.values.size() != static_cast<size_t>(parameter_count()))
    return error(errc::WRONG_SHAPE, "restored gradient of " + std::to_string(g.values.size()) + " values for stage " +
                                        std::to_string(m.span().stage));
  torch::NoGradGuard no_grad;
  size_t offset = 0;
  for (auto& a : m.accum) {
    auto* data = const_cast<float*>(g.values.data() + offset);  // from_blob only reads
    const auto mean = torch::from_blob(data, a.sizes(), torch::kFloat32).to(m.device);
    a.add_(mean, static_cast<double>(g.microbatches));  // take_gradient divided the sums by this
    offset += static_cast<size_t>(a.numel());
  }
  m.samples += g.samples;
  m.microbatches += g.microbatches;
  m.stale_samples += stale ? g.samples : g.stale_samples;
  return error{};
}

double stage_worker::last_grad_norm() const { return impl_->last_grad_norm; }

error stage_worker::apply_gradient(const std::vector<float>& mean_grad, double other_norm_sq) {
  auto& m = *impl_;
  const auto expected = static_cast<size_t>(parameter_count());
  if (mean_grad.size() != expected)
    return error(errc::WRONG_SHAPE, "gradient of " + std::to_string(mean_grad.size()) + " values for stage " +
                                        std::to_string(m.span().stage) + " expected " + std::to_string(expected));
  for (size_t i = 0; i < mean_grad.size(); ++i)
    if (!std::isfinite(mean_grad[i]))
      return error(errc::NON_FINITE, "gradient for stage " + std::to_string(m.span().stage) + " holds " +
                                         std::to_string(mean_grad[i]) + " at index " + std::to_string(i));
  try {
    size_t offset = 0;
    for (auto& p : m.params) {
      auto* data = const_cast<float*>(mean_grad.data() + offset);  // from_blob only reads: cloned at once
      p.mutable_grad() = torch::from_blob(data, p.sizes(), torch::kFloat32).clone().to(m.device);
      offset += static_cast<size_t>(p.numel());
    }
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return error(errc::INTERNAL, "gradient of stage " + std::to_string(m.span().stage) + ": " + e.what());
  }
  return m.step_on_grads(other_norm_sq);
}

error stage_worker::impl::step_on_grads(double other_norm_sq) {
  auto& m = *this;
  try {
    m.last_grad_norm = 0;
    if (m.cfg.grad_clip > 0) {  // the norm is needed for the clip only (and the other stages' clips)
      double own_sq = 0;
      for (const auto& p : m.params)
        own_sq += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
      m.last_grad_norm = std::sqrt(own_sq);
      // As torch's clip_grad_norm_ (scale max / (norm + 1e-6) when below 1), over the model's norm.
      const double scale = m.cfg.grad_clip / (std::sqrt(own_sq + std::max(other_norm_sq, 0.0)) + 1e-6);
      if (scale < 1)
        for (auto& p : m.params)
          p.mutable_grad().mul_(scale);
    }
    set_learning_rate(*m.optimizer, m.cfg, m.steps);
    m.keep_previous();
    m.optimizer->step();
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return error(errc::INTERNAL, "optimizer step of stage " + std::to_string(m.span().stage) + ": " + e.what());
  }
  m.clear_param_grads();
  m.cache.parameters_changed();
  ++m.steps;
  m.stale_samples = m.samples + m.held_samples;  // computed on the parameters just stepped
  return error{};
}

uint64_t stage_worker::parameter_hash() const {
  uint64_t h = fnv1a64_basis;
  for (const auto& p : impl_->params) {
    const auto c = p.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    h = fnv1a64(c.data_ptr(), static_cast<size_t>(c.numel()) * sizeof(float), h);
  }
  return h;
}

int64_t stage_worker::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : impl_->params)
    n += p.numel();
  return n;
}

}  // namespace swarm
