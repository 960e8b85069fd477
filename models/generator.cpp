#include "models/generator.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <torch/torch.h>

#include "models/stage_module.hpp"

namespace swarm {

int64_t window_start(int64_t n, int64_t previous, int64_t seq_len) {
  if (n - previous <= seq_len)
    return previous;
  return n - std::max<int64_t>(1, seq_len / 2);
}

int64_t pick_token(const at::Tensor& logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  const auto l = logits.detach().to(torch::kCPU, torch::kDouble).reshape({-1});
  if (temperature <= 0)
    return l.argmax().item<int64_t>();
  const int64_t k = top_k > 0 ? std::min<int64_t>(top_k, l.numel()) : l.numel();
  const auto [values, ids] = l.topk(k);  // sorted, likeliest first
  const auto p = torch::softmax(values / temperature, 0);
  const double* probs = p.data_ptr<double>();
  // One uniform draw against the cumulative distribution: the same seed gives the same text.
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng), sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    sum += probs[i];
    if (u < sum)
      return ids[i].item<int64_t>();
  }
  return ids[k - 1].item<int64_t>();
}

struct local_model::impl {
  model_config cfg;
  stage_module model;
  bool kv_cache;
  std::vector<kv_slot> cache;
  int64_t cached_window = -1;   ///< window start the cache holds positions of
  std::vector<int64_t> cached;  ///< the tokens it holds, from there

  void forget() {
    cache.clear();
    cached.clear();
    cached_window = -1;
  }

  impl(const model_config& m, const named_tensors& params, bool kv, bool bf16)
      : cfg(m), model(make_full_model(m)), kv_cache(kv) {
    if (auto err = load_parameters(*model, params))
      throw std::invalid_argument(err.what());
    model->eval();
    model->set_bf16(bf16);
  }
};

local_model::local_model(const model_config& m, const named_tensors& params, bool kv_cache, bool bf16)
    : impl_(std::make_unique<impl>(m, params, kv_cache, bf16)) {}
local_model::~local_model() = default;
local_model::local_model(local_model&&) noexcept = default;

result<at::Tensor> local_model::next_logits(const std::vector<int64_t>& tokens, int64_t window) {
  auto& m = *impl_;
  torch::NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(tokens.size());
  if (window < 0 || n - window < 1 || n - window > m.cfg.seq_len)
    return error(errc::BAD_REQUEST, "window [" + std::to_string(window) + ", " + std::to_string(n) +
                                        ") does not fit the context of " + std::to_string(m.cfg.seq_len));
  auto ids = [&](int64_t from) {
    return torch::tensor(std::vector<int64_t>(tokens.begin() + from, tokens.end()), torch::kLong).unsqueeze(0);
  };
  try {
    if (!m.kv_cache)
      return m.model->forward(ids(window)).select(1, -1).squeeze(0);
    // The cache serves only a continuation of the tokens it holds, in the same window.
    const auto held = static_cast<int64_t>(m.cached.size());
    if (window != m.cached_window || held >= n - window ||
        !std::equal(m.cached.begin(), m.cached.end(), tokens.begin() + window)) {
      m.forget();
      m.cached_window = window;
    }
    const auto out = m.model->forward_cached(ids(window + static_cast<int64_t>(m.cached.size())), m.cache);
    m.cached.assign(tokens.begin() + window, tokens.end());
    return out.select(1, -1).squeeze(0);
  } catch (const std::exception& e) {
    m.forget();  // slots may hold different lengths now
    return error(errc::INTERNAL, std::string{"generation forward: "} + e.what());
  }
}

result<generation_result> generate(const generation_request& r, const next_logits_fn& logits,
                                   const std::function<void(int64_t)>& on_token) {
  if (r.context.empty())
    return error(errc::BAD_REQUEST, "generation needs at least one token of context");
  std::vector<int64_t> tokens = r.context;
  std::mt19937_64 rng(r.seed);
  generation_result out;
  int64_t window = 0;
  const auto started = std::chrono::steady_clock::now();
  while (static_cast<int64_t>(out.tokens.size()) < r.max_new_tokens) {
    if (r.stopped && r.stopped()) {
      out.interrupted = true;
      break;
    }
    window = window_start(static_cast<int64_t>(tokens.size()), window, r.seq_len);
    auto l = logits(tokens, window);
    if (!l)
      return l.error();
    const int64_t next = pick_token(*l, r.temperature, r.top_k, rng);
    tokens.push_back(next);
    out.tokens.push_back(next);
    on_token(next);
    if (next == r.eos) {
      out.ended = true;
      break;
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace swarm
