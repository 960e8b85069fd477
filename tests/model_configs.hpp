#pragma once
// The model configs tests share: small enough to build and train in
// milliseconds, one per family where a test covers them all.

#include "config/config.hpp"

namespace swarm::testing {

/// d 16, 2 heads, 2 layers, 8 tokens, microbatches of 2.
inline model_config tiny_model() {
  model_config m;
  m.d_model = 16;
  m.n_heads = 2;
  m.n_layers = 2;
  m.seq_len = 8;
  m.microbatch = 2;
  return m;
}

/// d 32, 2 heads, 4 layers, 16 tokens, microbatches of 3, seed 1234.
inline model_config small_model() {
  model_config m = tiny_model();
  m.d_model = 32;
  m.n_layers = 4;
  m.seq_len = 16;
  m.microbatch = 3;
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
