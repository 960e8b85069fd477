#include "models/stage_worker.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <optional>

#include "base/error.hpp"
#include "base/hash.hpp"
#include "models/gpt.hpp"

namespace swarm {

namespace {

// --- validation against the model

std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d)
    s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "] " + std::string{c10::toString(t.scalar_type())};
}

error wrong_shape(const torch::Tensor& t, const char* name, const std::string& expected) {
  return error(errc::WRONG_SHAPE, std::string{name} + " " + shape_of(t) + " expected " + expected);
}

/// Token ids: int64 [B, T], 1 <= B, 1 <= T <= seq_len, ids in [0, vocab).
error check_tokens(const torch::Tensor& t, const char* name, const model_config& cfg) {
  const bool ok = t.defined() && t.scalar_type() == torch::kLong && t.dim() == 2 && t.size(0) >= 1 &&
                  t.size(1) >= 1 && t.size(1) <= cfg.seq_len;
  if (!ok)
    return t.defined() ? wrong_shape(t, name, "[B, T<=" + std::to_string(cfg.seq_len) + "] Long")
                       : error(errc::BAD_REQUEST, std::string{name} + " missing");
  const auto lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
  if (lo < 0 || hi >= cfg.vocab)
    return error(errc::BAD_REQUEST, std::string{name} + " hold token ids outside [0, " +
                                             std::to_string(cfg.vocab) + "): min " + std::to_string(lo) + ", max " +
                                             std::to_string(hi));
  return error{};
}

bool all_finite(const torch::Tensor& t) {
  return !t.defined() || !t.is_floating_point() || torch::isfinite(t).all().item<bool>();
}

error check_finite(const torch::Tensor& t, const char* name) {
  return all_finite(t) ? error{} : error(errc::NON_FINITE, std::string{name} + " hold NaN or Inf");
}

/// Hidden states: float32 [B, T, d_model], 1 <= B, 1 <= T <= seq_len, finite.
error check_hidden(const torch::Tensor& t, const char* name, const model_config& cfg) {
  const bool ok = t.defined() && t.scalar_type() == torch::kFloat32 && t.dim() == 3 && t.size(0) >= 1 &&
                  t.size(1) >= 1 && t.size(1) <= cfg.seq_len && t.size(2) == cfg.d_model;
  if (!ok)
    return t.defined() ? wrong_shape(t, name,
                                     "[B, T<=" + std::to_string(cfg.seq_len) + ", " + std::to_string(cfg.d_model) +
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

stage_span checked_span(const model_config& cfg, int stage, int num_stages) {
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
  std::vector<torch::Tensor> params;  // registration order: the flat order of the header
  std::vector<std::string> names;     // params' names ("block2.qkv.weight")
  // Gradients are summed here rather than in .grad so that a microbatch whose
  // gradients come out non-finite can be dropped without touching the good ones.
  std::vector<torch::Tensor> accum;
  int64_t samples = 0;
  int64_t microbatches = 0;
  int64_t steps = 0;

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
  }

  /// Runs `fn` (which backpropagates one microbatch into .grad) and adds its
  /// gradients to the sums only when the loss and every gradient are finite.
  template <class Fn>
  result<loss_and_grad> accumulate(int64_t batch, const commit_gate& gate, bool& duplicate, Fn&& fn) {
    clear_param_grads();
    loss_and_grad r = fn();
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
    : impl_(std::make_unique<impl>(cfg, checked_span(cfg, stage, num_stages), usable_device(device))) {}

stage_worker::~stage_worker() = default;
stage_worker::stage_worker(stage_worker&&) noexcept = default;
stage_worker& stage_worker::operator=(stage_worker&&) noexcept = default;

result<forward_result> stage_worker::forward(const torch::Tensor& inputs_in, const torch::Tensor* targets_in,
                                                   const commit_gate& gate) {
  auto& m = *impl_;
  try {
    const auto inputs = inputs_in.defined() ? inputs_in.to(m.device) : inputs_in;
    if (auto err = check_inputs(inputs, m.span(), m.cfg))
      return err;
    forward_result result;
    if (!m.span().has_head()) {
      if (targets_in)
        return error(errc::BAD_REQUEST, "targets given to stage " + std::to_string(m.span().stage) +
                                                 ", which is not the last");
      torch::NoGradGuard no_grad;
      result.outputs = m.module->forward(inputs);
      if (auto err = check_finite(result.outputs, "outputs"))
        return err;
      return result;
    }
    if (!targets_in)
      return error(errc::BAD_REQUEST, "the last stage needs targets");
    const auto targets = targets_in->defined() ? targets_in->to(m.device) : *targets_in;
    if (auto err = check_tokens(targets, "targets", m.cfg))
      return err;
    if (auto err = check_same_batch(targets, "targets", inputs, "[B, T] Long of the inputs"))
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

result<backward_result> stage_worker::backward(const torch::Tensor& inputs_in, const torch::Tensor& grad_in,
                                                     const commit_gate& gate) {
  auto& m = *impl_;
  if (m.span().has_head())
    return error(errc::BAD_REQUEST, "backward on the last stage (its forward already ran backward)");
  try {
    const auto inputs = inputs_in.defined() ? inputs_in.to(m.device) : inputs_in;
    const auto output_grad = grad_in.defined() ? grad_in.to(m.device) : grad_in;
    if (auto err = check_inputs(inputs, m.span(), m.cfg))
      return err;
    // Outputs of a non-last stage are always [B, T, d_model] for inputs [B, T(, d)].
    if (auto err = check_hidden(output_grad, "output_grad", m.cfg))
      return err;
    const std::string expected = "[B, T, " + std::to_string(m.cfg.d_model) + "] Float of the inputs";
    if (auto err = check_same_batch(output_grad, "output_grad", inputs, expected))
      return err;
    backward_result result;
    auto r = m.accumulate(inputs.size(0), gate, result.duplicate, [&] {
      return loss_and_grad{0.0f, stage_backward(m.module, inputs, output_grad)};
    });
    if (!r)
      return r.error();
    result.input_grad = r->input_grad;
    return result;
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return error(errc::INTERNAL, std::string{"backward of stage "} + std::to_string(m.span().stage) + ": " + e.what());
  }
}

int64_t stage_worker::accumulated_samples() const { return impl_->samples; }

int64_t stage_worker::steps() const { return impl_->steps; }

void stage_worker::apply_step() {
  if (impl_->microbatches == 0)
    return;
  // accumulate() admits only finite gradients, so this fails only when their mean
  // overflowed float32; then the step is dropped like a non-finite microbatch.
  (void)apply_gradient(take_gradient().values);
}

local_gradient stage_worker::take_gradient() {
  auto& m = *impl_;
  local_gradient g;
  g.values.assign(static_cast<size_t>(parameter_count()), 0.0f);
  g.samples = m.samples;
  g.microbatches = m.microbatches;
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

error stage_worker::apply_gradient(const std::vector<float>& mean_grad) {
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
    if (m.cfg.grad_clip > 0)
      torch::nn::utils::clip_grad_norm_(m.params, m.cfg.grad_clip);
    m.optimizer->step();
  } catch (const std::exception& e) {
    m.clear_param_grads();
    return error(errc::INTERNAL, "optimizer step of stage " + std::to_string(m.span().stage) + ": " + e.what());
  }
  m.clear_param_grads();
  ++m.steps;
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

// --- state transfer
//
// One torch archive (zip, as torch::save writes) with flat keys:
//   format            string  state_format
//   span              int64 [stage, num_stages, first_block, end_block]
//   steps             int64 [] the worker's optimizer steps
//   names             string  parameter names in flat order, '\n'-separated
//   param_<i>         float32 parameter i
//   exp_avg_<i>, exp_avg_sq_<i>, step_<i> (int64 []), max_exp_avg_sq_<i> (amsgrad only)
//                     AdamW state of parameter i; zeros and step 0 where it has none yet
// Keys are indices, not names, because archive keys are attribute names.
// Tensors are saved from host memory, so peers on other devices can load them.

namespace {

constexpr const char* state_format = "swarm.stage_state.v1";

std::string optimizer_key(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

std::string span_string(int64_t stage, int64_t num_stages, int64_t first, int64_t end) {
  return "stage " + std::to_string(stage) + "/" + std::to_string(num_stages) + " (blocks [" + std::to_string(first) +
         ", " + std::to_string(end) + "))";
}

std::string span_string(const stage_span& s) { return span_string(s.stage, s.num_stages, s.first_block, s.end_block); }

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v)
    out += (out.empty() ? "" : "\n") + x;
  return out;
}

/// c10::Error's what() carries a backtrace: keep its first line.
std::string first_line(const char* what) {
  std::string s{what};
  return s.substr(0, s.find('\n'));
}

/// A state read from an archive and checked, not yet installed.
struct parsed_state {
  std::vector<int64_t> span;
  int64_t steps = 0;
  std::string names;
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq, max_exp_avg_sq;
  std::vector<int64_t> param_steps;
};

torch::Tensor read_tensor(torch::serialize::InputArchive& in, const std::string& key) {
  torch::Tensor t;
  in.read(key, t);
  return t.detach().contiguous();
}

} // namespace

std::string stage_worker::export_state() const {
  const auto& m = *impl_;
  torch::NoGradGuard no_grad;
  torch::serialize::OutputArchive out;
  const auto& s = m.span();
  out.write("format", c10::IValue(std::string{state_format}));
  out.write("span", torch::tensor(std::vector<int64_t>{s.stage, s.num_stages, s.first_block, s.end_block}));
  out.write("steps", torch::tensor(m.steps));
  out.write("names", c10::IValue(join(m.names)));
  const auto& state = m.optimizer->state();
  for (size_t i = 0; i < m.params.size(); ++i) {
    const auto& p = m.params[i];
    const auto idx = std::to_string(i);
    out.write("param_" + idx, p.detach().to(torch::kCPU));
    auto it = state.find(optimizer_key(p));
    if (it == state.end()) {
      out.write("exp_avg_" + idx, torch::zeros(p.sizes()));
      out.write("exp_avg_sq_" + idx, torch::zeros(p.sizes()));
      out.write("step_" + idx, torch::tensor(int64_t{0}));
      continue;
    }
    const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    out.write("exp_avg_" + idx, st.exp_avg().to(torch::kCPU));
    out.write("exp_avg_sq_" + idx, st.exp_avg_sq().to(torch::kCPU));
    out.write("step_" + idx, torch::tensor(st.step()));
    if (st.max_exp_avg_sq().defined())
      out.write("max_exp_avg_sq_" + idx, st.max_exp_avg_sq().to(torch::kCPU));
  }
  std::ostringstream os;
  out.save_to(os);
  return os.str();
}

error stage_worker::import_state(const std::string& bytes) {
  auto& m = *impl_;
  const std::string here = span_string(m.span());
  parsed_state st;
  // 1. Parse everything, touching nothing.
  try {
    torch::serialize::InputArchive in;
    std::istringstream is(bytes);
    in.load_from(is);
    c10::IValue format, names;
    if (!in.try_read("format", format) || !format.isString() || format.toStringRef() != state_format)
      return error(errc::BAD_REQUEST, "state for " + here + " is not a " + state_format + " archive");
    const auto span = read_tensor(in, "span").to(torch::kLong);
    st.span.assign(span.data_ptr<int64_t>(), span.data_ptr<int64_t>() + span.numel());
    st.steps = read_tensor(in, "steps").item<int64_t>();
    in.read("names", names);
    st.names = names.toStringRef();
    if (st.span.size() != 4 || st.steps < 0)
      return error(errc::BAD_REQUEST, "state for " + here + " has a malformed span or step count");
    const std::string there = span_string(st.span[0], st.span[1], st.span[2], st.span[3]);
    if (st.names != join(m.names))
      return error(errc::WRONG_SHAPE, "state of " + there + " does not fit " + here +
                                               ": its parameters are named differently (another stage or model)");
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto idx = std::to_string(i);
      st.params.push_back(read_tensor(in, "param_" + idx));
      st.exp_avg.push_back(read_tensor(in, "exp_avg_" + idx));
      st.exp_avg_sq.push_back(read_tensor(in, "exp_avg_sq_" + idx));
      st.param_steps.push_back(read_tensor(in, "step_" + idx).item<int64_t>());
      torch::Tensor max_sq;
      if (in.try_read("max_exp_avg_sq_" + idx, max_sq))
        max_sq = max_sq.detach().contiguous();
      st.max_exp_avg_sq.push_back(max_sq);
      const auto& p = m.params[i];
      for (const auto* t : {&st.params[i], &st.exp_avg[i], &st.exp_avg_sq[i], &st.max_exp_avg_sq[i]}) {
        if (t == &st.max_exp_avg_sq[i] && !t->defined())
          continue;
        if (!t->defined() || t->scalar_type() != torch::kFloat32 || t->sizes() != p.sizes())
          return error(errc::WRONG_SHAPE, "state of " + there + " does not fit " + here + ": " + m.names[i] +
                                                   " is " + (t->defined() ? shape_of(*t) : "missing") + " expected " +
                                                   shape_of(p));
        if (!all_finite(*t))
          return error(errc::NON_FINITE, "state of " + there + ": " + m.names[i] + " holds NaN or Inf");
      }
      if (st.param_steps[i] < 0)
        return error(errc::BAD_REQUEST, "state of " + there + ": negative AdamW step for " + m.names[i]);
    }
  } catch (const std::exception& e) {
    return error(errc::BAD_REQUEST, "unreadable state for " + here + ": " + first_line(e.what()));
  }
  // 2. Install: copy_ keeps the parameters' TensorImpls, which key the optimizer state.
  torch::NoGradGuard no_grad;
  auto& state = m.optimizer->state();
  for (size_t i = 0; i < m.params.size(); ++i) {
    m.params[i].copy_(st.params[i]);
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(st.param_steps[i]);
    s->exp_avg(st.exp_avg[i].to(m.device));
    s->exp_avg_sq(st.exp_avg_sq[i].to(m.device));
    if (st.max_exp_avg_sq[i].defined())
      s->max_exp_avg_sq(st.max_exp_avg_sq[i].to(m.device));
    state[optimizer_key(m.params[i])] = std::move(s);
  }
  m.steps = st.steps;
  m.clear_param_grads();
  m.clear_accumulator();
  return error{};
}

const stage_span& stage_worker::span() const { return impl_->span(); }

torch::Device stage_worker::device() const { return impl_->device; }

int64_t stage_worker::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : impl_->params)
    n += p.numel();
  return n;
}

} // namespace swarm
