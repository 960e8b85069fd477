#include "models/stage_module.hpp"

#include <cmath>

#include "config/family.hpp"
#include "models/bf16_scope.hpp"
#include "models/init.hpp"

namespace swarm {

stage_module_impl::stage_module_impl(const model_config& cfg, const stage_span& span) : span_(span) {
  // Registration order fixes the parameters' order (optimizer state, checkpoints): kept as it always was.
  if (span.has_embedding())
    build_embeddings(cfg);
  build_blocks(cfg);
  if (cfg.boundary_kind().first != "none")
    build_boundary(cfg);
  if (span.has_head())
    build_head(cfg);
}

void stage_module_impl::build_embeddings(const model_config& cfg) {
  auto gen = generator_for(cfg, embeddings_tag);
  tok_emb_ = register_module("tok_emb", torch::nn::Embedding(cfg.vocab, cfg.d_model));
  init_embedding(*tok_emb_, gen);
  if (family_of(cfg).learned_positions) {  // else positions are rotary, inside attention
    pos_emb_ = register_module("pos_emb", torch::nn::Embedding(cfg.seq_len, cfg.d_model));
    init_embedding(*pos_emb_, gen);
  }
}

void stage_module_impl::build_blocks(const model_config& cfg) {
  const double residual_std = init_std / std::sqrt(2.0 * static_cast<double>(cfg.n_layers));
  // With sharing, one block per run of share_layers layers, named and seeded
  // by the run's first layer and applied once per layer of the run.
  const int share = static_cast<int>(std::max<int64_t>(1, cfg.share_layers));
  for (int i = span_.first_block; i < span_.end_block; i += share) {
    auto gen = generator_for(cfg, block_tag(i));
    // Global index in the name, so a stage's parameter names match the full model's.
    auto blk = register_module("block" + std::to_string(i), make_block(cfg));
    blk->init(gen, init_std, residual_std);
    for (int r = 0; r < share; ++r)
      blocks_.push_back(blk);
  }
}

void stage_module_impl::build_boundary(const model_config& cfg) {
  // Down keeps the normalised state's scale (1 / sqrt(fan-in)); up writes
  // into the residual stream at the model's own scale.
  const auto [cut, k] = cfg.boundary_kind();
  const int64_t d = cfg.d_model, w = cfg.wire_width();
  const bool bias = family_of(cfg).linear_bias;
  const auto linear = [&](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  if (!span_.has_embedding()) {
    auto gen = generator_for(cfg, boundary_tag + 2 * static_cast<uint64_t>(span_.stage));
    boundary_up_ = register_module("boundary_up", linear(w, d));
    init_linear(*boundary_up_, init_std, gen);
  }
  if (!span_.has_head()) {
    auto gen = generator_for(cfg, boundary_tag + 2 * static_cast<uint64_t>(span_.stage) + 1);
    boundary_norm_ = family_norm(*this, "boundary_norm", cfg);
    if (cut == "maxout") {
      maxout_k_ = k;
    } else {
      boundary_down_ = register_module("boundary_down", linear(d, w));
      init_linear(*boundary_down_, 1.0 / std::sqrt(static_cast<double>(d)), gen);
    }
  }
}

void stage_module_impl::build_head(const model_config& cfg) {
  auto gen = generator_for(cfg, head_tag);
  final_norm_ = family_norm(*this, family_of(cfg).final_norm, cfg);
  head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.vocab).bias(false)));
  init_linear(*head_, init_std, gen);
}

torch::Tensor stage_module_impl::cut_in(const torch::Tensor& x) { return boundary_up_ ? boundary_up_(x) : x; }

torch::Tensor stage_module_impl::cut_out(const torch::Tensor& h) {
  if (!boundary_norm_)
    return h;
  auto n = boundary_norm_(h);
  if (boundary_down_)
    return boundary_down_(n);
  // Maxout: the largest of each run of K neighbouring features.
  return std::get<0>(n.unflatten(-1, {n.size(-1) / maxout_k_, maxout_k_}).max(-1));
}

torch::Tensor stage_module_impl::embed(const torch::Tensor& x, int64_t first) {
  auto h = tok_emb_(x);
  if (pos_emb_)
    h = h + pos_emb_(
                torch::arange(first, first + x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device())));
  return h;
}

torch::Tensor stage_module_impl::finish(const torch::Tensor& h) {
  return span_.has_head() ? head_(final_norm_(h)) : cut_out(h);
}

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
  torch::Tensor h = span_.has_embedding() ? embed(x, 0) : cut_in(x);
  for (auto& blk : blocks_)
    h = blk->forward(h);
  return finish(h);
}

torch::Tensor stage_module_impl::forward_cached_body(const torch::Tensor& x, std::vector<kv_slot>& cache) {
  cache.resize(blocks_.size());
  const int64_t first = cache.empty() ? 0 : cache.front().positions();
  torch::Tensor h = span_.has_embedding() ? embed(x, first) : cut_in(x);
  for (size_t i = 0; i < blocks_.size(); ++i)
    h = blocks_[i]->forward_cached(h, cache[i]);
  return finish(h);
}

stage_module make_full_model(const model_config& cfg) { return stage_module(cfg, partition_layers(cfg, 1).at(0)); }

error whole_model_error(const model_config& cfg, const std::string& who) {
  if (cfg.boundary == "none")
    return error{};
  return error(errc::BAD_CONFIG,
               who + ": --boundary " + cfg.boundary +
                   " adds layers at stage cuts only, and the whole model (--role local, export, "
                   "generate from files, Hugging Face weights) has no cut: use --boundary none there");
}

}  // namespace swarm
