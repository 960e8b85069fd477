#pragma once
// The whole model under Hugging Face's names, so that weights go to and come
// from transformers' LlamaForCausalLM and GPT2LMHeadModel unchanged. Pure: no torch.
//
// Each file tensor says which parameter of a stage (its name in the stage
// module, the same in every cut: "block3.q_proj.weight") it holds. With layer
// sharing a block's parameters appear once per layer that applies it, so a
// reader needs no notion of sharing; a file read back must hold equal copies.
// GPT-2 keeps its matrices as Conv1D ([in, out]): those are transposed.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace swarm {

struct hf_tensor {
  std::string file_name;       ///< "model.layers.3.self_attn.q_proj.weight"
  std::string param;           ///< the stage module's parameter: "block0.q_proj.weight" (block of the run)
  std::vector<int64_t> shape;  ///< in the file
  bool transposed = false;     ///< the file holds param's transpose (GPT-2's Conv1D)
};

/// Every tensor of the model's file, in file order: embeddings, layers 0..n-1, final norm, LM head.
[[nodiscard]] std::vector<hf_tensor> hf_layout(const model_config& m);

/// config.json for transformers (LlamaConfig or GPT2Config), keys sorted.
[[nodiscard]] std::string hf_config_json(const model_config& m);

} // namespace swarm
