#include "models/hf_format.hpp"

#include <nlohmann/json.hpp>

namespace swarm {

namespace {

using shape = std::vector<int64_t>;

void llama_layer(const model_config& m, int64_t layer, const std::string& block, std::vector<hf_tensor>& out) {
  const int64_t d = m.d_model, hd = m.d_model / m.n_heads, q = m.n_heads * hd, kv = m.kv_heads() * hd;
  const int64_t ffn = m.ffn_width();
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  auto add = [&](const std::string& name, const std::string& local, shape s) {
    out.push_back({p + name, block + "." + local, std::move(s), false});
  };
  add("input_layernorm.weight", "input_layernorm.weight", {d});
  add("self_attn.q_proj.weight", "q_proj.weight", {q, d});
  add("self_attn.k_proj.weight", "k_proj.weight", {kv, d});
  add("self_attn.v_proj.weight", "v_proj.weight", {kv, d});
  add("self_attn.o_proj.weight", "o_proj.weight", {d, q});
  add("post_attention_layernorm.weight", "post_attention_layernorm.weight", {d});
  add("mlp.gate_proj.weight", "gate_proj.weight", {ffn, d});
  add("mlp.up_proj.weight", "up_proj.weight", {ffn, d});
  add("mlp.down_proj.weight", "down_proj.weight", {d, ffn});
}

void gpt_layer(const model_config& m, int64_t layer, const std::string& block, std::vector<hf_tensor>& out) {
  const int64_t d = m.d_model;
  const std::string p = "transformer.h." + std::to_string(layer) + ".";
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

} // namespace

std::vector<hf_tensor> hf_layout(const model_config& m) {
  const int64_t d = m.d_model, share = std::max<int64_t>(1, m.share_layers);
  std::vector<hf_tensor> out;
  if (m.is_llama()) {
    out.push_back({"model.embed_tokens.weight", "tok_emb.weight", {m.vocab, d}});
  } else {
    out.push_back({"transformer.wte.weight", "tok_emb.weight", {m.vocab, d}});
    out.push_back({"transformer.wpe.weight", "pos_emb.weight", {m.seq_len, d}});
  }
  for (int64_t layer = 0; layer < m.n_layers; ++layer) {
    // The stage module names a shared block after the first layer of its run.
    const std::string block = "block" + std::to_string(layer - layer % share);
    (m.is_llama() ? llama_layer : gpt_layer)(m, layer, block, out);
  }
  if (m.is_llama()) {
    out.push_back({"model.norm.weight", "norm.weight", {d}});
  } else {
    out.push_back({"transformer.ln_f.weight", "ln_f.weight", {d}});
    out.push_back({"transformer.ln_f.bias", "ln_f.bias", {d}});
  }
  out.push_back({"lm_head.weight", "head.weight", {m.vocab, d}});
  return out;
}

std::string hf_config_json(const model_config& m) {
  nlohmann::json c;  // std::map underneath: keys sorted, the same text every time
  c["vocab_size"] = m.vocab;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = "float32";
  c["initializer_range"] = 0.02;
  if (m.is_llama()) {
    c["architectures"] = {"LlamaForCausalLM"};
    c["model_type"] = "llama";
    c["hidden_size"] = m.d_model;
    c["intermediate_size"] = m.ffn_width();
    c["num_hidden_layers"] = m.n_layers;
    c["num_attention_heads"] = m.n_heads;
    c["num_key_value_heads"] = m.kv_heads();
    c["max_position_embeddings"] = m.seq_len;
    c["rms_norm_eps"] = m.norm_eps;
    c["rope_theta"] = m.rope_theta;
    c["hidden_act"] = "silu";
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
    c["rope_scaling"] = nullptr;
    c["use_cache"] = true;
  } else {
    c["architectures"] = {"GPT2LMHeadModel"};
    c["model_type"] = "gpt2";
    c["n_embd"] = m.d_model;
    c["n_layer"] = m.n_layers;
    c["n_head"] = m.n_heads;
    c["n_positions"] = m.seq_len;
    c["n_inner"] = 4 * m.d_model;
    c["activation_function"] = "gelu_new";  // the tanh approximation, as the stage module computes it
    c["layer_norm_epsilon"] = 1e-5;
    c["resid_pdrop"] = 0.0;
    c["embd_pdrop"] = 0.0;
    c["attn_pdrop"] = 0.0;
  }
  // --role tokenizer's ids; bytes have none (null, or transformers would assume its defaults).
  const bool bytes = m.tokenizer == "bytes";
  c["bos_token_id"] = bytes ? nlohmann::json(nullptr) : nlohmann::json(1);
  c["eos_token_id"] = bytes ? nlohmann::json(nullptr) : nlohmann::json(2);
  return c.dump(2) + "\n";
}

} // namespace swarm
