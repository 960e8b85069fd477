#pragma once
// The whole model under Hugging Face's names, so that weights go to and come
// from transformers' class of its family (LlamaForCausalLM, GPT2LMHeadModel,
// Qwen2ForCausalLM: the family's descriptor names its tensors). Pure: no torch.
//
// Each file tensor says which parameter of a stage (its name in the stage
// module, the same in every cut: "block3.q_proj.weight") it holds. With layer
// sharing a block's parameters appear once per layer that applies it, so a
// reader needs no notion of sharing; a file read back must hold equal copies.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/family.hpp"

namespace swarm {

/// Every tensor of the model's file, in file order: embeddings, layers 0..n-1, final norm, LM head.
[[nodiscard]] std::vector<hf_tensor> hf_layout(const model_config& m);

/// config.json for transformers (the family's config class), keys sorted.
[[nodiscard]] std::string hf_config_json(const model_config& m);

}  // namespace swarm
