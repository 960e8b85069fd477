#pragma once
// Deterministic initialisation: a seed per sub-module (rather than one stream
// for the whole model) is what makes a stage built alone hold exactly the
// weights of the same layers in the whole model.

#include <cstdint>

#include <torch/torch.h>

#include "config/config.hpp"

namespace swarm {

// GPT-2's initialisation, every family's: N(0, 0.02) weights, zero biases,
// unit norm gains; the projections that write into the residual stream get
// 0.02 / sqrt(2 n_layers) so the residual's variance does not grow with depth.
constexpr double init_std = 0.02;

// Which sub-module a seed is for.
constexpr uint64_t embeddings_tag = 0;
constexpr uint64_t head_tag = uint64_t{1} << 40;
constexpr uint64_t boundary_tag = uint64_t{2} << 40;  // + 2 stage: up into it; + 2 stage + 1: down out of it
inline uint64_t block_tag(int64_t global_index) { return 1 + static_cast<uint64_t>(global_index); }

/// A private generator for the sub-module `tag` names, seeded by cfg.seed, so
/// building a model never disturbs torch's global one.
[[nodiscard]] at::Generator generator_for(const model_config& cfg, uint64_t tag);

/// N(0, std) weights and zero biases, drawn from `gen` (no autograd).
void init_linear(torch::nn::LinearImpl& l, double std, at::Generator& gen);

/// N(0, init_std) embedding rows, drawn from `gen` (no autograd).
void init_embedding(torch::nn::EmbeddingImpl& e, at::Generator& gen);

}  // namespace swarm
