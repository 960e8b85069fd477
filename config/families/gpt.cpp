// The gpt family: GPT-2's blocks (models/gpt_block.cpp) under transformers' GPT2LMHeadModel names.
#include <nlohmann/json.hpp>

#include "config/families/families.hpp"

namespace swarm::families {

namespace {

using shape = std::vector<int64_t>;

void embeddings(const model_config& m, std::vector<hf_tensor>& out) {
  out.push_back({"transformer.wte.weight", "tok_emb.weight", {m.vocab, m.d_model}});
  out.push_back({"transformer.wpe.weight", "pos_emb.weight", {m.seq_len, m.d_model}});
}

void layer(const model_config& m, int64_t layer, const std::string& block, std::vector<hf_tensor>& out) {
  const int64_t d = m.d_model;
  const std::string p = "transformer.h." + std::to_string(layer) + ".";
  // GPT-2 keeps its matrices as Conv1D ([in, out]): those are transposed.
  auto add = [&](const std::string& name, const std::string& local, shape s, bool transposed = false) {
    out.push_back({p + name, block + "." + local, std::move(s), transposed});
  };
  add("ln_1.weight", "ln1.weight", {d});
  add("ln_1.bias", "ln1.bias", {d});
  add("attn.c_attn.weight", "qkv.weight", {d, 3 * d}, true);
  add("attn.c_attn.bias", "qkv.bias", {3 * d});
  add("attn.c_proj.weight", "proj.weight", {d, d}, true);
  add("attn.c_proj.bias", "proj.bias", {d});
  add("ln_2.weight", "ln2.weight", {d});
  add("ln_2.bias", "ln2.bias", {d});
  add("mlp.c_fc.weight", "fc.weight", {d, 4 * d}, true);
  add("mlp.c_fc.bias", "fc.bias", {4 * d});
  add("mlp.c_proj.weight", "out.weight", {4 * d, d}, true);
  add("mlp.c_proj.bias", "out.bias", {d});
}

void head(const model_config& m, std::vector<hf_tensor>& out) {
  out.push_back({"transformer.ln_f.weight", "ln_f.weight", {m.d_model}});
  out.push_back({"transformer.ln_f.bias", "ln_f.bias", {m.d_model}});
}

void config(const model_config& m, nlohmann::json& c) {
  c["n_embd"] = m.d_model;
  c["n_layer"] = m.n_layers;
  c["n_head"] = m.n_heads;
  c["n_positions"] = m.seq_len;
  c["n_inner"] = 4 * m.d_model;
  c["activation_function"] = "gelu_new";  // the tanh approximation, as the block computes it
  c["layer_norm_epsilon"] = 1e-5;
  c["resid_pdrop"] = 0.0;
  c["embd_pdrop"] = 0.0;
  c["attn_pdrop"] = 0.0;
}

/// GPT-2 files as OpenAI's conversion wrote them: no "transformer." prefix, lm_head tied to wte.
std::vector<std::string> aliases(const std::string& file_name) {
  if (file_name == "lm_head.weight")
    return {"transformer.wte.weight", "wte.weight"};
  const std::string prefix = "transformer.";
  if (file_name.rfind(prefix, 0) == 0)
    return {file_name.substr(prefix.size())};
  return {};
}

model_family make() {
  model_family f;
  f.name = "gpt";
  f.summary = "GPT-2 blocks";
  f.block = "gpt";
  f.norm = norm_kind::layer_norm;
  f.final_norm = "ln_f";
  f.learned_positions = true;
  f.linear_bias = true;
  f.mlp_activations = 2;
  f.ffn_width = [](const model_config& m) { return 4 * m.d_model; };
  f.norm_eps = [](const model_config&) { return 1e-5; };  // GPT-2's, whatever --norm-eps says
  // qkv 3 d^2, projection d^2, MLP 4 d^2 twice; biases 3d + d + 4d + d and two LayerNorms 2d each.
  f.block_madds = [](const model_config& m) { return 12.0 * static_cast<double>(m.d_model * m.d_model); };
  f.block_parameters = [](const model_config& m) { return 12 * m.d_model * m.d_model + 13 * m.d_model; };
  f.validate = [](const model_config&) { return std::string{}; };
  f.hash = nullptr;  // its hash stays what it was before model families: old checkpoints still load
  f.hf_architecture = "GPT2LMHeadModel";
  f.hf_model_type = "gpt2";
  f.hf_embeddings = embeddings;
  f.hf_layer = layer;
  f.hf_head = head;
  f.hf_config = config;
  f.hf_aliases = aliases;
  return f;
}

}  // namespace

const model_family& gpt() { return built_once<make>(); }

}  // namespace swarm::families
