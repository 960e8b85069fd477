#pragma once
// Weights in and out in Hugging Face's layout (models/hf_format.hpp):
// --role export writes them, --init-from and --role generate read them.

#include <string>

#include "base/error.hpp"
#include "config/config.hpp"
#include "models/named_tensors.hpp"

namespace swarm {

/// model.safetensors's bytes (float32) of the whole model's parameters `params`
/// (every stage's merged); the same parameters give the same bytes.
/// BAD_REQUEST naming a parameter `params` lacks.
[[nodiscard]] result<std::string> write_hf_weights(const model_config& m, const named_tensors& params);

/// The whole model's parameters from a safetensors file of Hugging Face's
/// names: every tensor of the layout present with its shape, F32, F16, BF16 or
/// F64, finite, and the copies of a shared block equal; no tensor the model
/// lacks (except rotary and mask buffers). GPT-2 files without
/// "transformer." or without lm_head.weight (tied to wte) are read too.
/// BAD_CONFIG naming the file and the tensor otherwise.
[[nodiscard]] result<named_tensors> read_hf_weights(const model_config& m, const std::string& path);

/// The whole model's parameters from a --checkpoint-dir: the newest checkpoint
/// of each stage-K folder (the folders say how many stages), merged.
struct checkpoint_parameters {
  named_tensors params;
  int stages = 0;
  int64_t min_step = 0, max_step = 0;  ///< optimizer steps of the stages' checkpoints
};
/// BAD_CONFIG when the folder holds no stage checkpoints, one is missing, or
/// they were written by another model config (the message says which).
[[nodiscard]] result<checkpoint_parameters> read_checkpoint_parameters(const model_config& m, const std::string& dir);

}  // namespace swarm
