#include "models/stage_worker.hpp"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include "messages/errors.hpp"
#include "messages/wire.hpp"
#include "models/gpt.hpp"
#include "models/tensor_codec.hpp"

namespace swarm {

namespace {

// --- validation against the model: the wire layer only knows tensors are well-formed

std::string dtype_name(proto::dtype t) {
  std::string s = proto::dtype_Name(t);
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s.empty() ? "dtype " + std::to_string(t) : s;
}

caf::error wrong_shape(const proto::tensor& t, const char* name, const std::string& expected) {
  return make_error(errc::WRONG_SHAPE,
                    std::string{name} + " " + shape_string(t) + " " + dtype_name(t.dtype()) + " expected " + expected);
}

/// Token ids: int64 [B, T], 1 <= B, 1 <= T <= seq_len.
caf::error check_tokens_shape(const proto::tensor& t, const char* name, const model_config& cfg) {
  const bool ok = t.dtype() == proto::INT64 && t.shape_size() == 2 && t.shape(0) >= 1 && t.shape(1) >= 1 &&
                  t.shape(1) <= cfg.seq_len;
  return ok ? caf::none : wrong_shape(t, name, "[B, T<=" + std::to_string(cfg.seq_len) + "] int64");
}

/// Hidden states: float32 [B, T, d_model], 1 <= B, 1 <= T <= seq_len.
caf::error check_hidden_shape(const proto::tensor& t, const char* name, const model_config& cfg) {
  const bool ok = t.dtype() == proto::FLOAT32 && t.shape_size() == 3 && t.shape(0) >= 1 && t.shape(1) >= 1 &&
                  t.shape(1) <= cfg.seq_len && t.shape(2) == cfg.d_model;
  return ok ? caf::none
            : wrong_shape(t, name,
                          "[B, T<=" + std::to_string(cfg.seq_len) + ", " + std::to_string(cfg.d_model) + "] float32");
}

caf::error check_stage_inputs_shape(const proto::tensor& t, const stage_span& span, const model_config& cfg) {
  return span.has_embedding() ? check_tokens_shape(t, "inputs", cfg) : check_hidden_shape(t, "inputs", cfg);
}

/// `t` must be [B, T(, d_model)] of the batch and length of `inputs`.
caf::error check_same_batch(const proto::tensor& t, const char* name, const proto::tensor& inputs,
                            const std::string& expected) {
  if (t.shape(0) != inputs.shape(0) || t.shape(1) != inputs.shape(1))
    return wrong_shape(t, name, expected + " (the inputs are " + shape_string(inputs) + ")");
  return caf::none;
}

// --- checks on decoded values

caf::error check_token_range(const torch::Tensor& t, const char* name, int64_t vocab) {
  if (t.numel() > 0 && (t.min().item<int64_t>() < 0 || t.max().item<int64_t>() >= vocab))
    return make_error(errc::BAD_REQUEST, std::string{name} + " hold token ids outside [0, " + std::to_string(vocab) +
                                             "): min " + std::to_string(t.min().item<int64_t>()) + ", max " +
                                             std::to_string(t.max().item<int64_t>()));
  return caf::none;
}

bool all_finite(const torch::Tensor& t) {
  return !t.defined() || !t.is_floating_point() || torch::isfinite(t).all().item<bool>();
}

caf::error check_finite(const torch::Tensor& t, const char* name) {
  return all_finite(t) ? caf::none : make_error(errc::NON_FINITE, std::string{name} + " hold NaN or Inf");
}

/// Decodes a tensor whose shape and dtype were checked, then checks its values.
caf::expected<torch::Tensor> decode_checked(const proto::tensor& t, const char* name, const model_config& cfg) {
  auto x = decode_tensor(t, name);
  if (!x)
    return x;
  auto err = x->is_floating_point() ? check_finite(*x, name) : check_token_range(*x, name, cfg.vocab);
  if (err)
    return err;
  return x;
}

stage_span checked_span(const model_config& cfg, int stage, int num_stages, const std::string& device) {
  if (device != "cpu")
    throw std::invalid_argument("device '" + device + "' is not available: this build runs on the CPU only; use --device cpu");
  if (cfg.n_heads < 1 || cfg.d_model % cfg.n_heads != 0)
    throw std::invalid_argument("d_model " + std::to_string(cfg.d_model) + " is not divisible by n_heads " +
                                std::to_string(cfg.n_heads) + ": pick n_heads that divides d_model");
  const auto spans = partition_blocks(static_cast<int>(cfg.n_layers), num_stages);
  if (spans.empty())
    throw std::invalid_argument("cannot cut " + std::to_string(cfg.n_layers) + " layers into " +
                                std::to_string(num_stages) + " stages: use --stages between 1 and n_layers");
  if (stage < 0 || stage >= num_stages)
    throw std::invalid_argument("stage " + std::to_string(stage) + " is outside [0, " + std::to_string(num_stages) +
                                "): pass --stage between 0 and stages - 1");
  return spans[static_cast<size_t>(stage)];
}

} // namespace

struct stage_worker::impl {
  model_config cfg;
  stage_module module;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<torch::Tensor> params;
  // Gradients are summed here rather than in .grad so that a microbatch whose
  // gradients come out non-finite can be dropped without touching the good ones.
  std::vector<torch::Tensor> accum;
  int64_t samples = 0;
  int64_t microbatches = 0;
  int64_t steps = 0;

  impl(const model_config& c, const stage_span& span) : cfg(c), module(c, span) {
    optimizer = make_optimizer(*module, cfg);
    params = module->parameters();
    for (auto& p : params)
      accum.push_back(torch::zeros_like(p));
  }

  [[nodiscard]] const stage_span& span() const { return module->span(); }

  void clear_param_grads() {
    for (auto& p : params)
      p.mutable_grad() = torch::Tensor{};
  }

  /// Runs `fn` (which backpropagates one microbatch into .grad) and adds its
  /// gradients to the sums only when the loss and every gradient are finite.
  template <class Fn>
  caf::expected<loss_and_grad> accumulate(int64_t batch, const commit_gate& gate, bool& duplicate, Fn&& fn) {
    clear_param_grads();
    loss_and_grad r = fn();
    bool finite = std::isfinite(r.loss) && all_finite(r.input_grad);
    for (size_t i = 0; finite && i < params.size(); ++i)
      finite = all_finite(params[i].grad());
    if (!finite) {
      clear_param_grads();
      return make_error(errc::NON_FINITE, "stage " + std::to_string(span().stage) +
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
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined())
        accum[i].add_(params[i].grad());
    clear_param_grads();
    samples += batch;
    ++microbatches;
    return r;
  }
};

stage_worker::stage_worker(const model_config& cfg, int stage, int num_stages, const std::string& device)
    : impl_(std::make_unique<impl>(cfg, checked_span(cfg, stage, num_stages, device))) {}

stage_worker::~stage_worker() = default;
stage_worker::stage_worker(stage_worker&&) noexcept = default;
stage_worker& stage_worker::operator=(stage_worker&&) noexcept = default;

namespace {

caf::error check_served_stage(uint32_t stage, const stage_span& span) {
  if (static_cast<int64_t>(stage) != span.stage)
    return make_error(errc::UNKNOWN_STAGE, "request for stage " + std::to_string(stage) + " reached the server of stage " +
                                               std::to_string(span.stage));
  return caf::none;
}

caf::error check_forward(const proto::forward_request& req, const stage_span& span, const model_config& cfg) {
  if (auto err = check_served_stage(req.stage(), span))
    return err;
  if (auto err = check_request(req, span.num_stages))
    return err;
  if (auto err = check_stage_inputs_shape(req.inputs(), span, cfg))
    return err;
  if (!span.has_head())
    return caf::none;
  const std::string expected = "[B, T] int64 of the inputs";
  if (auto err = check_tokens_shape(req.targets(), "targets", cfg))
    return err;
  return check_same_batch(req.targets(), "targets", req.inputs(), expected);
}

caf::error check_backward(const proto::backward_request& req, const stage_span& span, const model_config& cfg) {
  if (auto err = check_served_stage(req.stage(), span))
    return err;
  if (auto err = check_request(req, span.num_stages))
    return err;
  if (auto err = check_stage_inputs_shape(req.inputs(), span, cfg))
    return err;
  // Outputs of a non-last stage are always [B, T, d_model] for inputs [B, T(, d)].
  const std::string expected = "[B, T, " + std::to_string(cfg.d_model) + "] float32 of the inputs";
  if (auto err = check_hidden_shape(req.output_grad(), "output_grad", cfg))
    return err;
  return check_same_batch(req.output_grad(), "output_grad", req.inputs(), expected);
}

} // namespace

caf::expected<proto::forward_reply> stage_worker::forward(const proto::forward_request& req, const commit_gate& gate) {
  auto& m = *impl_;
  if (auto err = check_forward(req, m.span(), m.cfg))
    return err;
  try {
    auto inputs = decode_checked(req.inputs(), "inputs", m.cfg);
    if (!inputs)
      return inputs.error();
    proto::forward_reply reply;
    if (!m.span().has_head()) {
      torch::NoGradGuard no_grad;
      auto out = m.module->forward(*inputs);
      if (auto err = check_finite(out, "outputs"))
        return err;
      *reply.mutable_outputs() = encode_tensor(out);
    } else {
      auto targets = decode_checked(req.targets(), "targets", m.cfg);
      if (!targets)
        return targets.error();
      bool duplicate = false;
      auto r = m.accumulate(inputs->size(0), gate, duplicate,
                            [&] { return last_stage_forward_backward(m.module, *inputs, *targets); });
      if (!r)
        return r.error();
      reply.set_duplicate(duplicate);
      reply.set_loss(r->loss);
      if (r->input_grad.defined())
        *reply.mutable_input_grad() = encode_tensor(r->input_grad);
    }
    reply.set_server_step(static_cast<uint64_t>(m.steps));
    return reply;
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return make_error(errc::INTERNAL, std::string{"forward of stage "} + std::to_string(m.span().stage) + ": " + e.what());
  }
}

caf::expected<proto::backward_reply> stage_worker::backward(const proto::backward_request& req,
                                                          const commit_gate& gate) {
  auto& m = *impl_;
  if (auto err = check_backward(req, m.span(), m.cfg))
    return err;
  try {
    auto inputs = decode_checked(req.inputs(), "inputs", m.cfg);
    if (!inputs)
      return inputs.error();
    auto output_grad = decode_checked(req.output_grad(), "output_grad", m.cfg);
    if (!output_grad)
      return output_grad.error();
    bool duplicate = false;
    auto r = m.accumulate(inputs->size(0), gate, duplicate, [&] {
      return loss_and_grad{0.0f, stage_backward(m.module, *inputs, *output_grad)};
    });
    if (!r)
      return r.error();
    proto::backward_reply reply;
    reply.set_duplicate(duplicate);
    if (r->input_grad.defined())
      *reply.mutable_input_grad() = encode_tensor(r->input_grad);
    reply.set_server_step(static_cast<uint64_t>(m.steps));
    return reply;
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return make_error(errc::INTERNAL, std::string{"backward of stage "} + std::to_string(m.span().stage) + ": " + e.what());
  }
}

int64_t stage_worker::accumulated_samples() const { return impl_->samples; }

int64_t stage_worker::steps() const { return impl_->steps; }

void stage_worker::apply_step() {
  auto& m = *impl_;
  if (m.microbatches == 0)
    return;
  // Each microbatch contributed the gradient of its own mean loss; their mean is
  // the gradient of the batch's mean loss (equal microbatch sizes).
  for (size_t i = 0; i < m.params.size(); ++i)
    m.params[i].mutable_grad() = m.accum[i] / static_cast<double>(m.microbatches);
  if (m.cfg.grad_clip > 0)
    torch::nn::utils::clip_grad_norm_(m.params, m.cfg.grad_clip);
  m.optimizer->step();
  m.clear_param_grads();
  for (auto& a : m.accum)
    a.zero_();
  m.samples = 0;
  m.microbatches = 0;
  ++m.steps;
}

const stage_span& stage_worker::span() const { return impl_->span(); }

int64_t stage_worker::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : impl_->params)
    n += p.numel();
  return n;
}

} // namespace swarm
