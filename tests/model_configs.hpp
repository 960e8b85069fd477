#pragma once
// The model configs tests share: small enough to build and train in
// milliseconds, one per family where a test covers them all.

#include "config/config.hpp"

namespace swarm::testing {

/// 2 heads and these sizes.
inline model_config sized(int64_t d_model, int64_t n_layers, int64_t seq_len, int64_t microbatch) {
  model_config m;
  m.d_model = d_model;
  m.n_heads = 2;
  m.n_layers = n_layers;
  m.seq_len = seq_len;
  m.microbatch = microbatch;
  return m;
}

/// d 16, 2 heads, 2 layers, 8 tokens, microbatches of 2.
inline model_config tiny_model() { return sized(16, 2, 8, 2); }

/// d 32, 2 heads, 4 layers, 16 tokens, microbatches of 3, seed 1234.
inline model_config small_model() {
  auto m = sized(32, 4, 16, 3);
  m.seed = 1234;
  return m;
}

/// small_model in each family: 0 gpt, 1 llama, 2 llama with grouped-query
/// attention, 3 that with layers shared in pairs, 4 qwen2 (llama's blocks
/// with q, k and v biases) with grouped-query attention.
inline model_config family_model(int which) {
  auto m = small_model();
  if (which > 0) {
    m.arch = which == 4 ? "qwen2" : "llama";
    m.n_heads = 4;
    m.ffn_dim = 48;
  }
  if (which > 1)
    m.n_kv_heads = 2;
  if (which == 3)
    m.share_layers = 2;
  return m;
}

}  // namespace swarm::testing
