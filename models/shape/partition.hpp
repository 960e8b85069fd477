#pragma once
// Cuts the model into pipeline stages. Pure: no torch, no CAF.

#include <cstdint>
#include <string>
#include <vector>

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

/// Work one sample costs each stage of a GPT of width d_model, seq_len tokens
/// and vocab outputs, cut by partition_blocks: multiply-adds of its forward and
/// backward as a server runs them. Per token, a block is 12 d^2 (qkv, projection,
/// 4x MLP) + 2 T d (scores, weighted values), the head d x vocab; a backward
/// costs twice its forward; a stage before the last runs its forward twice (the
/// request, then again in the stateless backward), the last stage once. Only
/// the ratios matter: the rebalancer turns a server's measured rate on one stage
/// into a predicted rate on another. Empty when the cut is invalid.
[[nodiscard]] std::vector<double> stage_costs(int64_t d_model, int64_t seq_len, int64_t vocab, int n_blocks,
                                              int num_stages);

} // namespace swarm
