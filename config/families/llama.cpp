// The llama family: the llama block (models/llama_block.cpp) under transformers'
// LlamaForCausalLM names, and the pieces qwen2 shares with it.
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "config/families/families.hpp"

namespace swarm::families {

int64_t swiglu_width(const model_config& m) {
  if (m.ffn_dim > 0)
    return m.ffn_dim;
  const int64_t hidden = 2 * (4 * m.d_model) / 3;  // Llama's: int(2 * 4d / 3), then up to a multiple of 256
  return (hidden + 255) / 256 * 256;
}

std::string rotary_rules(const model_config& m) {
  std::ostringstream s;
  if (m.n_heads % m.kv_heads() != 0)
    s << "--n-kv-heads " << m.n_kv_heads << ": must be 0 (= n-heads) or divide n-heads";
  else if ((m.d_model / m.n_heads) % 2 != 0)
    s << "--n-heads " << m.n_heads << ": must leave an even head width (d-model / n-heads) for rotary embeddings";
  return s.str();
}

void rotary_hash(const model_config& m, std::ostream& s) {
  s << ' ' << m.arch << ' ' << m.kv_heads() << ' ' << m.ffn_width() << ' ' << m.norm_eps << ' ' << m.rope_theta;
}

double rotary_madds(const model_config& m) {
  const auto d = static_cast<double>(m.d_model);
  const double kv_dim = static_cast<double>(m.kv_heads() * (m.d_model / m.n_heads));
  return 2 * d * d + 2 * d * kv_dim + 3 * d * static_cast<double>(m.ffn_width());  // q, o; k, v; SwiGLU
}

void rotary_config(const model_config& m, nlohmann::json& c) {
  c["hidden_size"] = m.d_model;
  c["intermediate_size"] = m.ffn_width();
  c["num_hidden_layers"] = m.n_layers;
  c["num_attention_heads"] = m.n_heads;
  c["num_key_value_heads"] = m.kv_heads();
  c["max_position_embeddings"] = m.seq_len;
  c["rms_norm_eps"] = m.norm_eps;
  c["rope_theta"] = m.rope_theta;
  c["hidden_act"] = "silu";
  c["rope_scaling"] = nullptr;
  c["use_cache"] = true;
}

namespace {

using shape = std::vector<int64_t>;

void embeddings(const model_config& m, std::vector<hf_tensor>& out) {
  out.push_back({"model.embed_tokens.weight", "tok_emb.weight", {m.vocab, m.d_model}});
}

/// Llama's layer; with the family's qkv_bias (Qwen2) also the q, k and v biases.
void layer(const model_config& m, int64_t layer, const std::string& block, std::vector<hf_tensor>& out) {
  const int64_t d = m.d_model, hd = m.d_model / m.n_heads, q = m.n_heads * hd, kv = m.kv_heads() * hd;
  const int64_t ffn = m.ffn_width();
  const bool bias = family_of(m).qkv_bias;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  auto add = [&](const std::string& name, const std::string& local, shape s) {
    out.push_back({p + name, block + "." + local, std::move(s), false});
  };
  add("input_layernorm.weight", "input_layernorm.weight", {d});
  add("self_attn.q_proj.weight", "q_proj.weight", {q, d});
  if (bias)
    add("self_attn.q_proj.bias", "q_proj.bias", {q});
  add("self_attn.k_proj.weight", "k_proj.weight", {kv, d});
  if (bias)
    add("self_attn.k_proj.bias", "k_proj.bias", {kv});
  add("self_attn.v_proj.weight", "v_proj.weight", {kv, d});
  if (bias)
    add("self_attn.v_proj.bias", "v_proj.bias", {kv});
  add("self_attn.o_proj.weight", "o_proj.weight", {d, q});
  add("post_attention_layernorm.weight", "post_attention_layernorm.weight", {d});
  add("mlp.gate_proj.weight", "gate_proj.weight", {ffn, d});
  add("mlp.up_proj.weight", "up_proj.weight", {ffn, d});
  add("mlp.down_proj.weight", "down_proj.weight", {d, ffn});
}

void head(const model_config& m, std::vector<hf_tensor>& out) {
  out.push_back({"model.norm.weight", "norm.weight", {m.d_model}});
}

void config(const model_config& m, nlohmann::json& c) {
  rotary_config(m, c);
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["pretraining_tp"] = 1;
}

model_family make() {
  model_family f;
  f.name = "llama";
  f.summary = "RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases";
  f.block = "llama";
  f.keys = {"n-kv-heads", "ffn-dim", "norm-eps", "rope-theta"};
  f.norm = norm_kind::rms_norm;
  f.final_norm = "norm";
  f.learned_positions = false;  // rotary, inside attention
  f.linear_bias = false;
  f.qkv_bias = false;
  f.grouped_query = true;
  f.mlp_activations = 3;
  f.ffn_width = swiglu_width;
  f.norm_eps = [](const model_config& m) { return m.norm_eps; };
  f.block_madds = rotary_madds;
  f.block_parameters = [](const model_config& m) {  // the matrices and two RMSNorm gains
    return static_cast<int64_t>(rotary_madds(m)) + 2 * m.d_model;
  };
  f.validate = rotary_rules;
  f.hash = rotary_hash;
  f.hf_architecture = "LlamaForCausalLM";
  f.hf_model_type = "llama";
  f.hf_embeddings = embeddings;
  f.hf_layer = layer;
  f.hf_head = head;
  f.hf_config = config;
  return f;
}

}  // namespace

const model_family& llama() { return built_once<make>(); }

}  // namespace swarm::families
