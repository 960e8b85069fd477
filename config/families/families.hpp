#pragma once
// Each registered family's descriptor (config/family.cpp's table lists them),
// and the pieces the rotary families (llama, qwen2) share.

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/family.hpp"

namespace swarm::families {

/// GPT-2 blocks: LayerNorm, learned positions, GELU MLP, biases everywhere.
[[nodiscard]] const model_family& gpt();
/// Llama blocks: RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases.
[[nodiscard]] const model_family& llama();
/// Qwen2 blocks: Llama's with biases on the q, k and v projections.
[[nodiscard]] const model_family& qwen2();

/// The descriptor `make` builds, built on first use: each family's accessor.
template <model_family (*make)()>
const model_family& built_once() {
  static const model_family f = make();
  return f;
}

// --- Shared by the families built on the llama block (config/families/llama.cpp).

/// --ffn-dim, or Llama's rounding of 8/3 d up to a multiple of 256.
[[nodiscard]] int64_t swiglu_width(const model_config& m);
/// Whole key/value heads and an even head width for the rotation.
[[nodiscard]] std::string rotary_rules(const model_config& m);
/// Multiply-adds per token of one llama block's matrices.
[[nodiscard]] double rotary_madds(const model_config& m);
/// " NAME kv ffn eps theta": the fields that change what the llama block builds.
void rotary_hash(const model_config& m, std::ostream& s);
/// config.json fields every llama-block config class has (LlamaConfig, Qwen2Config).
void rotary_config(const model_config& m, nlohmann::json& c);

}  // namespace swarm::families
