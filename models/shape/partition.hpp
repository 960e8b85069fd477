#pragma once
// Cuts the model into pipeline stages. Pure: no torch, no CAF.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace swarm {

/// One pipeline stage: transformer blocks [first_block, end_block) plus the
/// embeddings on stage 0 and the final LayerNorm, LM head and loss on the last.
struct stage_span {
  int stage = 0;
  int num_stages = 1;
  int first_block = 0;
  int end_block = 0;
  [[nodiscard]] bool has_embedding() const { return stage == 0; }
  [[nodiscard]] bool has_head() const { return stage == num_stages - 1; }
  [[nodiscard]] int blocks() const { return end_block - first_block; }
};

/// Splits n_blocks contiguous blocks over num_stages stages as evenly as
/// possible; when they do not divide, the extra blocks go to the middle stages
/// because the first and last already carry the embeddings and the head.
/// Requires 1 <= num_stages <= n_blocks; returns an empty vector otherwise.
[[nodiscard]] std::vector<stage_span> partition_blocks(int n_blocks, int num_stages);

/// The model's cut in layers: partition_blocks over its runs of share_layers
/// layers (one distinct block each, never split), each span scaled back to
/// layers. Without sharing, partition_blocks(n_layers, num_stages).
[[nodiscard]] std::vector<stage_span> partition_layers(const model_config& m, int num_stages);

/// Multiply-adds per token of one block's weight matrices, as its family counts
/// them (config/families/): gpt 12 d^2 (qkv, projection, 4x MLP); llama 2 d^2
/// (q, o) + 2 d kv_dim (k, v) + 3 d ffn (SwiGLU).
[[nodiscard]] double block_matrix_madds(const model_config& m);

/// Parameters of one block, as its family counts them: gpt 12 d^2 + 13 d (with
/// biases and two LayerNorms); llama its matrices and two RMSNorm gains; qwen2
/// llama's and the q, k and v biases.
[[nodiscard]] int64_t block_parameters(const model_config& m);

/// Work one sample costs each stage of model `m` cut into num_stages by
/// partition_blocks: multiply-adds of its forward and backward as a server runs
/// them. Per token, a block is block_matrix_madds + 2 T d (scores, weighted
/// values), the head d x vocab; a backward costs twice its forward; a stage
/// before the last runs its forward twice (the request, then again in the
/// stateless backward), the last stage once. Only the ratios matter: the
/// rebalancer turns a server's measured rate on one stage into a predicted rate
/// on another. Empty when the cut is invalid.
[[nodiscard]] std::vector<double> stage_costs(const model_config& m, int num_stages);

}  // namespace swarm
