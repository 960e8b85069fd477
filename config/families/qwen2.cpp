// The qwen2 family: the llama block with biases on the q, k and v projections,
// under transformers' Qwen2ForCausalLM names (Llama's, plus those biases).
#include <nlohmann/json.hpp>

#include "config/families/families.hpp"

namespace swarm::families {

namespace {

void config(const model_config& m, nlohmann::json& c) {
  rotary_config(m, c);
  c["use_sliding_window"] = false;  // full attention in every layer, as the block computes it
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = m.n_layers;
  c["attention_dropout"] = 0.0;
}

model_family make() {
  model_family f = llama();  // its tensors, counts, rules and hash, with the biases below
  f.name = "qwen2";
  f.summary = "Llama's blocks with biases on the q, k and v projections";
  f.qkv_bias = true;
  f.block_parameters = [](const model_config& m) {  // llama's, and the q, k and v biases
    return llama().block_parameters(m) + m.d_model + 2 * m.kv_heads() * (m.d_model / m.n_heads);
  };
  f.hf_architecture = "Qwen2ForCausalLM";
  f.hf_model_type = "qwen2";
  f.hf_config = config;
  return f;
}

}  // namespace

const model_family& qwen2() { return built_once<make>(); }

}  // namespace swarm::families
