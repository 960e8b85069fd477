#pragma once
// The model's pipeline stages in libtorch, for either family (--model): a
// GPT-2-style decoder (its block is here) or a Llama-style one (models/llama).
//
// Goals: the textbook pre-norm architectures, deterministic initialisation
// per sub-module so that a stage built alone holds exactly the weights of the same
// layers in the whole model, and a stage cut that reproduces the whole model's
// loss and gradients. Non-goals: speed tricks (flash attention, fused kernels),
// weight tying (the LM head is untied so stage 0 and the last stage share nothing).

#include <torch/torch.h>

#include "base/error.hpp"
#include "config/config.hpp"
#include "models/block.hpp"
#include "models/llama.hpp"
#include "models/named_tensors.hpp"
#include "models/shape/partition.hpp"

namespace swarm {

/// One GPT-2 block: x + attn(ln1(x)); x + mlp(ln2(x)).
class gpt_block_impl : public decoder_block {
public:
  explicit gpt_block_impl(const model_config& cfg);
  torch::Tensor forward(const torch::Tensor& x) override { return run(x, nullptr); }
  torch::Tensor forward_cached(const torch::Tensor& x, kv_slot& slot) override { return run(x, &slot); }
  void init(at::Generator& gen, double std, double residual_std) override;

private:
  torch::Tensor run(const torch::Tensor& x, kv_slot* slot);
  int64_t n_heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, out_{nullptr};
};

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
  torch::Tensor forward_body(const torch::Tensor& x);
  torch::Tensor forward_cached_body(const torch::Tensor& x, std::vector<kv_slot>& cache);

  bool bf16_ = false;
  torch::Tensor cut_in(const torch::Tensor& x);
  torch::Tensor cut_out(const torch::Tensor& h);

  stage_span span_;
  torch::nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};  // pos_emb_: gpt only
  // --boundary: up after the cut before this stage, norm (and down) before the cut after it.
  int64_t maxout_k_ = 1;  // > 1: maxout of this many features instead of `boundary_down_`
  torch::nn::Linear boundary_up_{nullptr}, boundary_down_{nullptr};
  torch::nn::LayerNorm boundary_ln_{nullptr};  // gpt
  rms_norm boundary_rms_{nullptr};             // llama
  std::vector<std::shared_ptr<decoder_block>> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};  // gpt
  rms_norm norm_{nullptr};              // llama
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE_IMPL(stage_module, stage_module_impl);

/// The whole model as one module (a single stage spanning every block).
[[nodiscard]] stage_module make_full_model(const model_config& cfg);

/// BAD_CONFIG when `cfg` has --boundary layers, which exist only at stage cuts:
/// what builds or fills the whole model at once (--role local, export, generate
/// from files, Hugging Face weights) cannot hold them. `who` names the caller.
[[nodiscard]] error whole_model_error(const model_config& cfg, const std::string& who);

/// "[8, 64, 32] Float": a tensor's shape and type, for error messages.
inline std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d)
    s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "] " + std::string{c10::toString(t.scalar_type())};
}

/// No NaN or Inf in `t` (true for undefined and integer tensors).
inline bool all_finite(const torch::Tensor& t) {
  return !t.defined() || !t.is_floating_point() || torch::isfinite(t).all().item<bool>();
}

/// Copies `values`' tensors into `module`'s parameters of the same names
/// (others are ignored); WRONG_SHAPE naming a parameter that is missing or of
/// another shape, NON_FINITE one that holds NaN or Inf; nothing is changed then.
[[nodiscard]] error load_parameters(torch::nn::Module& module, const named_tensors& values);

/// Mean next-byte cross-entropy in nats: logits [B, T, V], targets int64 [B, T].
[[nodiscard]] torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);


/// Stateless backward of a stage: recompute forward from `inputs`, backpropagate
/// `output_grad`, accumulate parameter gradients, return d/d inputs (undefined
/// tensor for stage 0, whose inputs are token ids).
[[nodiscard]] torch::Tensor stage_backward(stage_module& stage, const torch::Tensor& inputs,
                                           const torch::Tensor& output_grad);

/// A stage's forward run with autograd recording (the activation cache keeps
/// it): `outputs` still holds its graph, `leaf` is what d/d inputs lands in
/// (the token ids themselves on stage 0).
struct recorded_forward {
  torch::Tensor leaf;
  torch::Tensor outputs;
};
[[nodiscard]] recorded_forward stage_forward_recorded(stage_module& stage, const torch::Tensor& inputs);

/// stage_backward on a recorded forward instead of a recomputed one: the same
/// operations on the same tensors, so the same gradients bit for bit, valid
/// while the parameters are those the forward ran on. Frees the graph.
[[nodiscard]] torch::Tensor stage_backward(const recorded_forward& forward, const torch::Tensor& output_grad);

/// Bytes a recorded forward of `batch` x `tokens` keeps on a stage of `blocks`
/// blocks, estimated from the shapes a block saves for its backward (its
/// inputs, normalised inputs, q, k, v, attention weights before and after
/// the softmax, the MLP's hidden layer before and after its activation) and
/// the outputs. An estimate: the activation cache's budget is in these bytes.
[[nodiscard]] int64_t recorded_forward_bytes(const model_config& cfg, int blocks, int64_t batch, int64_t tokens);

/// Last stage: forward, loss against `targets`, backward; accumulates parameter
/// gradients and returns (loss, d loss / d inputs).
struct loss_and_grad {
  float loss = 0;
  torch::Tensor input_grad;
};
[[nodiscard]] loss_and_grad last_stage_forward_backward(stage_module& stage, const torch::Tensor& inputs,
                                                        const torch::Tensor& targets);

/// Last stage, validation: the mean loss against `targets`, no gradient.
[[nodiscard]] float last_stage_loss(stage_module& stage, const torch::Tensor& inputs, const torch::Tensor& targets);

/// "cpu", "cuda" or "cuda:N" as a device this process can use; throws
/// std::invalid_argument with a fix-it message when it cannot (no CUDA in this
/// libtorch, no GPU visible, index out of range).
[[nodiscard]] torch::Device usable_device(const std::string& name);

} // namespace swarm
