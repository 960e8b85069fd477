// The stage worker's state transfer (models/stage_worker.hpp: export_state,
// import_state): what a joining server, a reload and a checkpoint copy.
#include <sstream>

#include "models/stage_worker_impl.hpp"

namespace swarm {

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

}  // namespace

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
          return error(errc::WRONG_SHAPE, "state of " + there + " does not fit " + here + ": " + m.names[i] + " is " +
                                              (t->defined() ? shape_of(*t) : "missing") + " expected " + shape_of(p));
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
  m.parameters_replaced();
  return error{};
}

named_tensors stage_worker::named_parameters() const {
  torch::NoGradGuard no_grad;
  named_tensors out;
  for (size_t i = 0; i < impl_->params.size(); ++i)
    out.emplace(impl_->names[i], impl_->params[i].detach().to(torch::kCPU).clone());
  return out;
}

error stage_worker::load_parameters(const named_tensors& values) {
  auto& m = *impl_;
  if (auto err = swarm::load_parameters(*m.module, values))
    return err;
  m.optimizer->state().clear();
  m.steps = 0;
  m.parameters_replaced();
  return error{};
}

const stage_span& stage_worker::span() const { return impl_->span(); }

torch::Device stage_worker::device() const { return impl_->device; }

}  // namespace swarm
