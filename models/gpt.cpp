#include "models/gpt.hpp"

#include <optional>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include "base/hash.hpp"

#include <cmath>
#include <limits>
#include <string>

namespace swarm {

namespace {

// Which sub-module a seed is for. A seed per sub-module (rather than one stream
// for the whole model) is what makes a stage built alone hold the same weights
// as the same layers of the full model.
constexpr uint64_t embeddings_tag = 0;
constexpr uint64_t head_tag = uint64_t{1} << 40;
constexpr uint64_t boundary_tag = uint64_t{2} << 40;  // + 2 stage: up into it; + 2 stage + 1: down out of it
uint64_t block_tag(int64_t global_index) { return 1 + static_cast<uint64_t>(global_index); }

/// One SplitMix64 step: neighbouring tags give unrelated seeds.
uint64_t mix(uint64_t x) { return splitmix64_finish(x + 0x9e3779b97f4a7c15ULL); }

/// A private generator, so building a model never disturbs torch's global one.
at::Generator generator_for(const model_config& cfg, uint64_t tag) {
  return at::detail::createCPUGenerator(mix(cfg.seed ^ mix(tag)));
}

// GPT-2's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm gains;
// the projections that write into the residual stream get 0.02 / sqrt(2 n_layers)
// so the residual's variance does not grow with depth.
constexpr double init_std = 0.02;

void init_embedding(torch::nn::Embedding& e, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  e->weight.normal_(0.0, init_std, gen);
}

torch::nn::LayerNorm make_layer_norm(int64_t d) {
  // LayerNorm's defaults are already ones and zeros; eps as in GPT-2.
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(1e-5));
}

} // namespace

void init_linear(torch::nn::LinearImpl& l, double std, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  l.weight.normal_(0.0, std, gen);
  if (l.bias.defined())
    l.bias.zero_();
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t tq = q.size(2), tk = k.size(2);
  // torch 1.13's C++ API has only the private _scaled_dot_product_attention,
  // so it is spelled out; at these context lengths this costs little.
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  // True where a query may not look: keys after its own position.
  const auto mask = torch::ones({tq, tk}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(tk - tq + 1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v);
}

std::pair<torch::Tensor, torch::Tensor> extend(kv_slot* slot, torch::Tensor k, torch::Tensor v) {
  if (!slot)
    return {std::move(k), std::move(v)};
  slot->k = slot->k.defined() ? torch::cat({slot->k, k}, 2) : k;
  slot->v = slot->v.defined() ? torch::cat({slot->v, v}, 2) : v;
  return {slot->k, slot->v};
}

std::shared_ptr<decoder_block> make_block(const model_config& cfg) {
  if (cfg.is_llama())
    return std::make_shared<llama_block_impl>(cfg);
  return std::make_shared<gpt_block_impl>(cfg);
}

gpt_block_impl::gpt_block_impl(const model_config& cfg) : n_heads_(cfg.n_heads) {
  const int64_t d = cfg.d_model;
  ln1_ = register_module("ln1", make_layer_norm(d));
  qkv_ = register_module("qkv", torch::nn::Linear(d, 3 * d));
  proj_ = register_module("proj", torch::nn::Linear(d, d));
  ln2_ = register_module("ln2", make_layer_norm(d));
  fc_ = register_module("fc", torch::nn::Linear(d, 4 * d));
  out_ = register_module("out", torch::nn::Linear(4 * d, d));
}

void gpt_block_impl::init(at::Generator& gen, double std, double residual_std) {
  for (auto* l : {qkv_.get(), proj_.get(), fc_.get(), out_.get()})
    init_linear(*l, l == proj_.get() || l == out_.get() ? residual_std : std, gen);
}

torch::Tensor gpt_block_impl::run(const torch::Tensor& x, kv_slot* slot) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
  const int64_t hd = d / n_heads_;
  auto qkv = qkv_(ln1_(x)).chunk(3, -1);
  auto split_heads = [&](const torch::Tensor& m) { return m.view({b, t, n_heads_, hd}).transpose(1, 2); };
  const auto [k, v] = extend(slot, split_heads(qkv[1]), split_heads(qkv[2]));
  auto y = causal_attention(split_heads(qkv[0]), k, v).transpose(1, 2).contiguous().view({b, t, d});
  auto h = x + proj_(y);
  return h + out_(torch::gelu(fc_(ln2_(h)), "tanh"));
}

stage_module_impl::stage_module_impl(const model_config& cfg, const stage_span& span) : span_(span) {
  const double residual_std = init_std / std::sqrt(2.0 * static_cast<double>(cfg.n_layers));
  if (span.has_embedding()) {
    auto gen = generator_for(cfg, embeddings_tag);
    tok_emb_ = register_module("tok_emb", torch::nn::Embedding(cfg.vocab, cfg.d_model));
    init_embedding(tok_emb_, gen);
    if (!cfg.is_llama()) {  // llama's positions are rotary, inside attention
      pos_emb_ = register_module("pos_emb", torch::nn::Embedding(cfg.seq_len, cfg.d_model));
      init_embedding(pos_emb_, gen);
    }
  }
  // With sharing, one block per run of share_layers layers, named and seeded
  // by the run's first layer and applied once per layer of the run.
  const int share = static_cast<int>(std::max<int64_t>(1, cfg.share_layers));
  for (int i = span.first_block; i < span.end_block; i += share) {
    auto gen = generator_for(cfg, block_tag(i));
    // Global index in the name, so a stage's parameter names match the full model's.
    auto blk = register_module("block" + std::to_string(i), make_block(cfg));
    blk->init(gen, init_std, residual_std);
    for (int r = 0; r < share; ++r)
      blocks_.push_back(blk);
  }
  const auto [cut, k] = cfg.boundary_kind();
  if (cut != "none") {
    // Down keeps the normalised state's scale (1 / sqrt(fan-in)); up writes
    // into the residual stream at the model's own scale.
    const int64_t d = cfg.d_model, w = cfg.wire_width();
    const auto linear = [&](int64_t in, int64_t out) {
      return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(!cfg.is_llama()));
    };
    if (!span.has_embedding()) {
      auto gen = generator_for(cfg, boundary_tag + 2 * static_cast<uint64_t>(span.stage));
      boundary_up_ = register_module("boundary_up", linear(w, d));
      init_linear(*boundary_up_, init_std, gen);
    }
    if (!span.has_head()) {
      auto gen = generator_for(cfg, boundary_tag + 2 * static_cast<uint64_t>(span.stage) + 1);
      if (cfg.is_llama())
        boundary_rms_ = register_module("boundary_norm", rms_norm(d, cfg.norm_eps));
      else
        boundary_ln_ = register_module("boundary_norm", make_layer_norm(d));
      if (cut == "maxout") {
        maxout_k_ = k;
      } else {
        boundary_down_ = register_module("boundary_down", linear(d, w));
        init_linear(*boundary_down_, 1.0 / std::sqrt(static_cast<double>(d)), gen);
      }
    }
  }
  if (span.has_head()) {
    auto gen = generator_for(cfg, head_tag);
    if (cfg.is_llama())
      norm_ = register_module("norm", rms_norm(cfg.d_model, cfg.norm_eps));
    else
      ln_f_ = register_module("ln_f", make_layer_norm(cfg.d_model));
    head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.vocab).bias(false)));
    init_linear(*head_, init_std, gen);
  }
}

torch::Tensor stage_module_impl::cut_in(const torch::Tensor& x) {
  return boundary_up_ ? boundary_up_(x) : x;
}

torch::Tensor stage_module_impl::cut_out(const torch::Tensor& h) {
  if (!boundary_ln_ && !boundary_rms_)
    return h;
  auto n = boundary_ln_ ? boundary_ln_(h) : boundary_rms_(h);
  if (boundary_down_)
    return boundary_down_(n);
  // Maxout: the largest of each run of K neighbouring features.
  return std::get<0>(n.unflatten(-1, {n.size(-1) / maxout_k_, maxout_k_}).max(-1));
}

namespace {

/// Autocast to bfloat16 on the device of the tensors within its scope. Its
/// cache of casted parameters is cleared when the scope ends: the optimizer
/// changes the parameters in place, and a cast kept past a step would be stale.
class bf16_scope {
public:
  explicit bf16_scope(const at::Device& device) : cuda_(device.is_cuda()) {
    was_on_ = cuda_ ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
    was_dtype_ = cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
    if (cuda_) {
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    } else {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    }
    at::autocast::increment_nesting();
  }
  ~bf16_scope() {
    if (at::autocast::decrement_nesting() == 0)
      at::autocast::clear_cache();
    if (cuda_) {
      at::autocast::set_enabled(was_on_);
      at::autocast::set_autocast_gpu_dtype(was_dtype_);
    } else {
      at::autocast::set_cpu_enabled(was_on_);
      at::autocast::set_autocast_cpu_dtype(was_dtype_);
    }
  }
  bf16_scope(const bf16_scope&) = delete;
  bf16_scope& operator=(const bf16_scope&) = delete;

private:
  bool cuda_;
  bool was_on_;
  at::ScalarType was_dtype_;
};

} // namespace

torch::Tensor stage_module_impl::forward(const torch::Tensor& x) {
  if (!bf16_)
    return forward_body(x);
  bf16_scope scope(x.device());
  return forward_body(x).to(torch::kFloat32);
}

torch::Tensor stage_module_impl::forward_cached(const torch::Tensor& x, std::vector<kv_slot>& cache) {
  if (!bf16_)
    return forward_cached_body(x, cache);
  bf16_scope scope(x.device());
  return forward_cached_body(x, cache).to(torch::kFloat32);
}

torch::Tensor stage_module_impl::forward_body(const torch::Tensor& x) {
  torch::Tensor h = cut_in(x);
  if (span_.has_embedding()) {
    h = tok_emb_(x);
    if (pos_emb_)
      h = h + pos_emb_(torch::arange(x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device())));
  }
  for (auto& blk : blocks_)
    h = blk->forward(h);
  if (span_.has_head())
    return head_(norm_ ? norm_(h) : ln_f_(h));
  return cut_out(h);
}

torch::Tensor stage_module_impl::forward_cached_body(const torch::Tensor& x, std::vector<kv_slot>& cache) {
  cache.resize(blocks_.size());
  const int64_t first = cache.empty() ? 0 : cache.front().positions();
  torch::Tensor h = cut_in(x);
  if (span_.has_embedding()) {
    h = tok_emb_(x);
    if (pos_emb_)
      h = h + pos_emb_(torch::arange(first, first + x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device())));
  }
  for (size_t i = 0; i < blocks_.size(); ++i)
    h = blocks_[i]->forward_cached(h, cache[i]);
  if (span_.has_head())
    return head_(norm_ ? norm_(h) : ln_f_(h));
  return cut_out(h);
}

stage_module make_full_model(const model_config& cfg) {
  return stage_module(cfg, partition_layers(cfg, 1).at(0));
}

error whole_model_error(const model_config& cfg, const std::string& who) {
  if (cfg.boundary == "none")
    return error{};
  return error(errc::BAD_CONFIG, who + ": --boundary " + cfg.boundary +
                                     " adds layers at stage cuts only, and the whole model (--role local, export, "
                                     "generate from files, Hugging Face weights) has no cut: use --boundary none there");
}

error load_parameters(torch::nn::Module& module, const named_tensors& values) {
  auto params = module.named_parameters();
  for (const auto& p : params) {
    const auto it = values.find(p.key());
    if (it == values.end() || !it->second.defined())
      return error(errc::WRONG_SHAPE, "parameter " + p.key() + " is missing");
    if (it->second.sizes() != p.value().sizes())
      return error(errc::WRONG_SHAPE, "parameter " + p.key() + " is " + shape_of(it->second) + ", expected " +
                                          shape_of(p.value()));
    if (!all_finite(it->second))
      return error(errc::NON_FINITE, "parameter " + p.key() + " holds NaN or Inf");
  }
  torch::NoGradGuard no_grad;
  for (auto& p : params)
    p.value().copy_(values.at(p.key()));
  return error{};
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

namespace {

/// A leaf copy of a stage's inputs that collects their gradient; token ids stay as they are.
torch::Tensor as_grad_leaf(const torch::Tensor& inputs) {
  if (!inputs.is_floating_point())
    return inputs;
  return inputs.detach().clone().requires_grad_(true);
}

torch::Tensor grad_of(const torch::Tensor& leaf) {
  return leaf.requires_grad() ? leaf.grad() : torch::Tensor{};
}

} // namespace

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
  // the MLP's hidden layer before and after its activation (2 ffn; SwiGLU 3),
  // and per head the attention weights before and after the softmax (2 T).
  const int64_t mlp = (cfg.is_llama() ? 3 : 2) * cfg.ffn_width();
  const int64_t per_token = 6 * d + 2 * kv + mlp + 2 * cfg.n_heads * tokens;
  return static_cast<int64_t>(sizeof(float)) * batch * tokens * (blocks * per_token + d);
}

loss_and_grad last_stage_forward_backward(stage_module& stage, const torch::Tensor& inputs,
                                          const torch::Tensor& targets) {
  torch::AutoGradMode grad_mode(true);
  auto leaf = as_grad_leaf(inputs);
  auto loss = lm_loss(stage->forward(leaf), targets);
  loss.backward();
  return {loss.item<float>(), grad_of(leaf)};
}

float last_stage_loss(stage_module& stage, const torch::Tensor& inputs, const torch::Tensor& targets) {
  torch::NoGradGuard no_grad;
  return lm_loss(stage->forward(inputs), targets).item<float>();
}

torch::Device usable_device(const std::string& name) {
  std::optional<torch::Device> d;
  try {
    d.emplace(name);
  } catch (const std::exception&) {
    throw std::invalid_argument("device '" + name + "' is not a torch device: use cpu, cuda or cuda:N");
  }
  if (d->is_cpu())
    return *d;
  if (!d->is_cuda())
    throw std::invalid_argument("device '" + name + "' is not supported: use cpu, cuda or cuda:N");
  if (!torch::cuda::is_available())
    throw std::invalid_argument("device '" + name +
                                "' is not available: this libtorch has no CUDA or no GPU is visible (Debian's "
                                "libtorch is CPU-only; see docs/deploy.md, \"Running on a GPU\"); use --device cpu");
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (d->has_index() && d->index() >= count)
    throw std::invalid_argument("device '" + name + "' is not available: " + std::to_string(count) +
                                " CUDA device(s) visible");
  return *d;
}

} // namespace swarm
