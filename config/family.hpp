#pragma once
// Model families (--model): each one descriptor in the one table of
// config/family.cpp, so that no code branches on a family's name. This is the
// torch-free half of a family, reachable from every layer that needs it: the
// config's checks and hash (here), the parameter and cost counts
// (models/shape), the Hugging Face names (models/hf_format). The torch half is
// the decoder block `block` names (models/block.cpp).
//
// Adding a family: docs/design.md, "Model families".

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/config.hpp"

namespace swarm {

/// One tensor of the Hugging Face file and the stage module's parameter it holds.
struct hf_tensor {
  std::string file_name;       ///< "model.layers.3.self_attn.q_proj.weight"
  std::string param;           ///< the stage module's parameter: "block0.q_proj.weight" (block of the run)
  std::vector<int64_t> shape;  ///< in the file
  bool transposed = false;     ///< the file holds param's transpose (GPT-2's Conv1D)
};

/// The norm the stage module puts before a stage cut and before the LM head.
enum class norm_kind { layer_norm, rms_norm };

struct model_family {
  std::string name;     ///< the --model word
  std::string summary;  ///< --model's help: what its blocks are
  /// The decoder block implementation that builds its blocks (models/block.cpp's table): "gpt" or "llama".
  std::string block;
  /// The keys of model_config it reads beyond the common ones ("n-kv-heads"): --help says so.
  std::vector<std::string> keys;

  // --- What the stage module builds around the blocks.
  norm_kind norm = norm_kind::layer_norm;
  std::string final_norm;          ///< the final norm's module name: "ln_f", "norm" (checkpoints hold it)
  bool learned_positions = false;  ///< a position embedding after the token one; else positions are inside attention
  bool linear_bias = false;        ///< the --boundary projections have biases
  bool qkv_bias = false;           ///< the llama block: biases on the q, k and v projections (Qwen2)
  bool grouped_query = false;      ///< --n-kv-heads counts: fewer key/value heads than query heads
  /// MLP-wide activations a block keeps for its backward (GELU: before and
  /// after; SwiGLU: gate, up and their product): models/stage_backward's estimate.
  int mlp_activations = 2;
  int64_t (*ffn_width)(const model_config&) = nullptr;  ///< the MLP's hidden width as built
  double (*norm_eps)(const model_config&) = nullptr;    ///< epsilon of every norm it builds
  /// Multiply-adds per token of one block's matrices (models/shape: stage costs).
  double (*block_madds)(const model_config&) = nullptr;
  /// Parameters of one block (models/shape: what a stage holds and sends).
  int64_t (*block_parameters)(const model_config&) = nullptr;
  /// The first cross-key rule `m` breaks, as "--flag value: rule"; empty when none.
  std::string (*validate)(const model_config&) = nullptr;
  /// Writes the family's fields into the model hash; null: nothing (gpt, as before families).
  void (*hash)(const model_config&, std::ostream&) = nullptr;

  // --- Hugging Face (models/hf_format, models/hf_weights).
  std::string hf_architecture;  ///< config.json's "architectures": "LlamaForCausalLM"
  std::string hf_model_type;    ///< config.json's "model_type" (its config class): "llama"
  /// The file's tensors before layer 0 (embeddings), of one layer (`block`: the
  /// stage module's block that layer applies, "block2"), and after the last (final norm, LM head).
  void (*hf_embeddings)(const model_config&, std::vector<hf_tensor>&) = nullptr;
  void (*hf_layer)(const model_config&, int64_t layer, const std::string& block, std::vector<hf_tensor>&) = nullptr;
  void (*hf_head)(const model_config&, std::vector<hf_tensor>&) = nullptr;
  /// config.json's fields of its config class, beside the common ones (vocabulary, token ids).
  void (*hf_config)(const model_config&, nlohmann::json&) = nullptr;
  /// Other names a file may give `file_name`, tried in order after it (GPT-2
  /// files as OpenAI's conversion wrote them); null: none.
  std::vector<std::string> (*hf_aliases)(const std::string& file_name) = nullptr;
};

/// Every registered family, in --help order.
[[nodiscard]] const std::vector<const model_family*>& model_families();

/// The registered family called `name`; null when there is none.
[[nodiscard]] const model_family* find_family(const std::string& name);

/// m.arch's family. Throws std::invalid_argument for an unregistered name
/// (validate() refuses those first).
[[nodiscard]] const model_family& family_of(const model_config& m);

/// The --model words: the registered families' names.
[[nodiscard]] std::vector<std::string> family_names();

/// "llama, qwen2": the families that read `key`, for that key's help.
[[nodiscard]] std::string families_reading(const std::string& key);

}  // namespace swarm
