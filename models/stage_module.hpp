#pragma once
// The model's pipeline stages in libtorch, for every family (--model): the
// family's descriptor (config/family.hpp) says what a stage builds around its
// blocks, models/block.hpp builds the blocks.
//
// Goals: the textbook pre-norm architectures, deterministic initialisation
// per sub-module so that a stage built alone holds exactly the weights of the same
// layers in the whole model, and a stage cut that reproduces the whole model's
// loss and gradients. Non-goals: speed tricks (flash attention, fused kernels),
// weight tying (the LM head is untied so stage 0 and the last stage share nothing).

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "base/error.hpp"
#include "config/config.hpp"
#include "models/block.hpp"
#include "models/norm.hpp"
#include "models/parameters.hpp"
#include "models/shape/partition.hpp"

namespace swarm {

/// One pipeline stage. Stage 0 maps int64 token ids [B, T] to hidden states
/// [B, T, d]; middle stages map hidden to hidden; the last stage maps hidden
/// states to logits [B, T, vocab]. A single stage spanning all blocks is the whole model.
class stage_module_impl : public torch::nn::Module {
public:
  stage_module_impl(const model_config& cfg, const stage_span& span);
  torch::Tensor forward(const torch::Tensor& x);
  /// forward() of the positions after those `cache` holds (one slot per block
  /// application; empty: none yet), appending theirs: generation.
  torch::Tensor forward_cached(const torch::Tensor& x, std::vector<kv_slot>& cache);
  [[nodiscard]] const stage_span& span() const { return span_; }
  /// --precision bf16: forward under autocast (matrix products in bfloat16 on
  /// the parameters' float32 masters), outputs back in float32. Backward runs
  /// outside it and follows the dtypes the forward used.
  void set_bf16(bool on) { bf16_ = on; }
  [[nodiscard]] bool bf16() const { return bf16_; }

private:
  void build_embeddings(const model_config& cfg);
  void build_blocks(const model_config& cfg);
  void build_boundary(const model_config& cfg);
  void build_head(const model_config& cfg);
  torch::Tensor forward_body(const torch::Tensor& x);
  torch::Tensor forward_cached_body(const torch::Tensor& x, std::vector<kv_slot>& cache);
  /// Stage 0: token (and learned position) embeddings of positions [first, first + T).
  torch::Tensor embed(const torch::Tensor& x, int64_t first);
  /// The last stage: final norm and LM head; others: what crosses the cut.
  torch::Tensor finish(const torch::Tensor& h);
  torch::Tensor cut_in(const torch::Tensor& x);
  torch::Tensor cut_out(const torch::Tensor& h);

  bool bf16_ = false;
  stage_span span_;
  torch::nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};  // pos_emb_: families with learned positions
  // --boundary: up after the cut before this stage, norm (and down) before the cut after it.
  int64_t maxout_k_ = 1;  // > 1: maxout of this many features instead of `boundary_down_`
  torch::nn::Linear boundary_up_{nullptr}, boundary_down_{nullptr};
  family_norm boundary_norm_;
  std::vector<std::shared_ptr<decoder_block>> blocks_;
  family_norm final_norm_;  // the family's module name: ln_f (gpt), norm (llama)
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE_IMPL(stage_module, stage_module_impl);

/// The whole model as one module (a single stage spanning every block).
[[nodiscard]] stage_module make_full_model(const model_config& cfg);

/// BAD_CONFIG when `cfg` has --boundary layers, which exist only at stage cuts:
/// what builds or fills the whole model at once (--role local, export, generate
/// from files, Hugging Face weights) cannot hold them. `who` names the caller.
[[nodiscard]] error whole_model_error(const model_config& cfg, const std::string& who);

}  // namespace swarm
