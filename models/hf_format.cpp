#include "models/hf_format.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace swarm {

std::vector<hf_tensor> hf_layout(const model_config& m) {
  const auto& family = family_of(m);
  const int64_t share = std::max<int64_t>(1, m.share_layers);
  std::vector<hf_tensor> out;
  family.hf_embeddings(m, out);
  for (int64_t layer = 0; layer < m.n_layers; ++layer) {
    // The stage module names a shared block after the first layer of its run.
    const std::string block = "block" + std::to_string(layer - layer % share);
    family.hf_layer(m, layer, block, out);
  }
  family.hf_head(m, out);
  out.push_back({"lm_head.weight", "head.weight", {m.vocab, m.d_model}});
  return out;
}

std::string hf_config_json(const model_config& m) {
  const auto& family = family_of(m);
  nlohmann::json c;  // std::map underneath: keys sorted, the same text every time
  c["vocab_size"] = m.vocab;
  c["tie_word_embeddings"] = false;
  c["torch_dtype"] = "float32";
  c["initializer_range"] = 0.02;
  c["architectures"] = {family.hf_architecture};
  c["model_type"] = family.hf_model_type;
  family.hf_config(m, c);
  // --role tokenizer's ids; bytes have none (null, or transformers would assume its defaults).
  const bool bytes = m.tokenizer == "bytes";
  c["bos_token_id"] = bytes ? nlohmann::json(nullptr) : nlohmann::json(1);
  c["eos_token_id"] = bytes ? nlohmann::json(nullptr) : nlohmann::json(2);
  return c.dump(2) + "\n";
}

}  // namespace swarm
