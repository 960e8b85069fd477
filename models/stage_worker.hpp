#pragma once
// The compute of one stage server: parameters, optimizer, forward, stateless
// backward, gradient accumulation, optimizer step, on one torch device. It
// takes and returns plain tensors and knows nothing of the wire (the actor
// boundary, actors/stage_calls.hpp, decodes and encodes). Only the tensor type
// shows here; the rest of torch stays behind the pimpl.
//
// Gradient accounting: each forward on the last stage and each backward adds the
// microbatch's parameter gradients of its mean loss and counts its samples;
// apply_step() divides the sum by the number of microbatches accumulated (the
// gradient of the mean loss over the batch), clips, steps AdamW and zeroes.
//
// Stage-wide averaging splits that step in two: take_gradient() hands out this
// server's mean gradient and empties the accumulator; the servers of the stage
// average their vectors weighted by samples; each applies the same vector with
// apply_gradient(). Same parameters + same optimizer state + same vector ->
// bit-identical parameters afterwards (parameter_hash() checks it). A joining
// server copies parameters and optimizer state with export_state()/import_state().
//
// Flat order: every flat vector here runs over the parameters in registration
// order (stage_module::parameters(): tok_emb, pos_emb, block<i>..., ln_f, head),
// each parameter row-major.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include "base/error.hpp"

#include "config/config.hpp"
#include "models/named_tensors.hpp"
#include "models/shape/partition.hpp"

namespace swarm {

/// Asked once a microbatch's gradients are computed and finite, before they are
/// added to the accumulator: the caller's exactly-once rule (see stage_server).
struct commit_decision {
  bool add = true;  ///< false: already added once; reply without adding again
  /// Add later: kept apart until settle_held(), while the caller learns whether its reply was in time
  bool hold = false;
  error reject;  ///< set: discard the gradients and fail the request with it
};
using commit_gate = std::function<commit_decision()>;

/// One server's share of a stage-wide gradient average.
struct local_gradient {
  std::vector<float> values;  ///< mean gradient over `microbatches`, flat (see "Flat order")
  int64_t samples = 0;        ///< samples behind it: the weight in the stage-wide average
  int64_t microbatches = 0;   ///< microbatches behind it
  /// Of `samples`, those whose gradient was computed on parameters older than
  /// the ones this gradient will step (accumulated before the last step): the
  /// staleness a round's overlap with compute costs.
  int64_t stale_samples = 0;
};

/// What the activation cache (stage_worker::set_activation_cache) did.
struct activation_cache_stats {
  int64_t hits = 0;         ///< backwards that ran on their forward's recorded graph
  int64_t misses = 0;       ///< backwards with a key that found none (or another microbatch's): recomputed
  int64_t stepped = 0;      ///< recorded forwards dropped because the parameters stepped before their backward
  int64_t evicted = 0;      ///< recorded forwards dropped for room (or alone over the budget)
  int64_t bytes = 0;        ///< held now (recorded_forward_bytes estimates)
  int64_t peak_bytes = 0;   ///< most held at once
  int64_t limit_bytes = 0;  ///< the budget; 0 = off
};

/// What one forward pass gives: the stage's outputs, or on the last stage the
/// loss and the gradient of the inputs (the backward ran too).
struct forward_result {
  at::Tensor outputs;      ///< non-last stage: [B, T, wire_width()] float32 on the worker's device
  float loss = 0;          ///< last stage: mean cross-entropy in nats per byte
  at::Tensor input_grad;   ///< last stage: d loss / d inputs; undefined on a one-stage model
  bool duplicate = false;  ///< the gate said the microbatch was already added: not added again
};

/// What one stateless backward gives.
struct backward_result {
  at::Tensor input_grad;   ///< d loss / d inputs; undefined on stage 0 (token ids have none)
  bool duplicate = false;  ///< as in forward_result
};

class stage_worker {
public:
  /// Builds stage `stage` of `num_stages` on torch device `device` ("cpu",
  /// "cuda", "cuda:N"); throws std::invalid_argument with a fix-it message when
  /// the config cannot be cut that way or the device is not available.
  stage_worker(const model_config& cfg, int stage, int num_stages, const std::string& device);
  ~stage_worker();
  stage_worker(stage_worker&&) noexcept;
  stage_worker& operator=(stage_worker&&) noexcept;

  /// Validates shapes, dtypes, token range and finiteness against the model
  /// (WRONG_SHAPE, NON_FINITE, BAD_REQUEST); never throws. Inputs may live on
  /// any device. Runs the stage; on the last stage (`targets` given, int64
  /// [B, T]) also the loss and backward, adding the gradients when `gate` agrees.
  /// `cache_key` (a non-last stage with the activation cache on): the
  /// forward is recorded and kept for the backward given the same key.
  [[nodiscard]] result<forward_result> forward(const at::Tensor& inputs, const at::Tensor* targets = nullptr,
                                               const commit_gate& gate = {}, const std::string& cache_key = {});

  /// Validation on the last stage: the mean loss of `inputs` against
  /// `targets`, same checks as forward; no backward, nothing accumulated.
  [[nodiscard]] result<float> evaluate(const at::Tensor& inputs, const at::Tensor& targets);

  /// A second opinion of a training forward on the last stage (issue #47's
  /// verification): loss and input gradient as forward() gives them, same
  /// checks, nothing accumulated.
  [[nodiscard]] result<forward_result> verify(const at::Tensor& inputs, const at::Tensor& targets);

  /// Generation on the last stage: logits [B, vocab] of each sample's last
  /// position; same checks as forward, nothing accumulated.
  [[nodiscard]] result<at::Tensor> next_logits(const at::Tensor& inputs);

  /// Parameter versions a non-last stage keeps for backward (each a copy of its parameters).
  static constexpr size_t kept_versions = 3;

  /// Stateless backward (not for the last stage): recomputes the forward from
  /// `inputs`, backpropagates `output_grad`; same validation as forward.
  /// `forward_step`: the step count its forward ran at. Up to kept_versions
  /// steps behind, it recomputes on the parameters of that step (kept for
  /// this), since `output_grad` belongs to the outputs those gave: on the
  /// stepped ones the gradient would be of a function the next stage never
  /// saw, and a stage trained on such gradients diverges (measured: stage 0's
  /// gradient norm 100-1000x within 15 steps on config/tiny, even at in-flight
  /// 1). Its samples count as stale. Older or unknown: the current parameters.
  /// `cache_key`: the key of its forward. Its recorded graph is used when it
  /// is still there, of these exact inputs, and the parameters have not
  /// stepped since (same gradients bit for bit); else it recomputes as above.
  [[nodiscard]] result<backward_result> backward(const at::Tensor& inputs, const at::Tensor& output_grad,
                                                 const commit_gate& gate = {},
                                                 std::optional<int64_t> forward_step = std::nullopt,
                                                 const std::string& cache_key = {});

  /// Keeps recorded forwards for their backward, up to `bytes` of them
  /// (estimated: recorded_forward_bytes in models/stage_backward.hpp), oldest dropped
  /// first; 0 (the default) = off, every backward recomputes its forward.
  void set_activation_cache(int64_t bytes);
  /// --precision: false (fp32, the default) or true (bf16: forwards under
  /// autocast, parameters, gradients, optimizer state and all-reduce in float32).
  void set_bf16(bool on);
  [[nodiscard]] const activation_cache_stats& activation_cache() const;
  /// Test hooks of issue #47's lying faults (--fault stale, drop-half; with
  /// --allow-faults). `stale_steps` > 0: a non-last stage's forwards and
  /// backwards run on the parameters that many steps old (at most
  /// kept_versions, once kept), while replies claim the current step.
  /// `drop_half`: every second gradient is never added (zeros; the reply a
  /// uniform guess's loss and a zero input gradient), its samples counted.
  void set_lies(int64_t stale_steps, bool drop_half);

  /// Samples whose gradients are accumulated since the last step.
  [[nodiscard]] int64_t accumulated_samples() const;
  /// Samples of the microbatch held apart (commit_decision::hold); 0 when none.
  /// At most one is held: holding another first adds the one held.
  [[nodiscard]] int64_t held_samples() const;
  /// Adds the held microbatch to the accumulator (`keep`) or discards it; its samples.
  int64_t settle_held(bool keep);
  /// Optimizer steps applied so far.
  [[nodiscard]] int64_t steps() const;
  /// One optimizer step on the accumulated gradients; no-op when nothing is accumulated.
  /// Same as apply_gradient(take_gradient().values); gradients whose mean overflowed are dropped.
  void apply_step();

  /// The mean of the accumulated gradients (all zeros, samples 0, when none) and
  /// their counts; empties the accumulator so later microbatches count towards the next step.
  [[nodiscard]] local_gradient take_gradient();
  /// Adds back a gradient take_gradient() gave out that no step used (a round
  /// that failed before using it, a reload's carried accumulator): sums,
  /// samples and microbatches as if never taken. `stale`: it was computed on
  /// parameters the worker has stepped past since, so all its samples count as
  /// stale. WRONG_SHAPE for another length.
  [[nodiscard]] error restore_gradient(const local_gradient& g, bool stale);
  /// One optimizer step with `mean_grad` (flat, parameter_count() long): clip to
  /// cfg.grad_clip, AdamW, ++steps. WRONG_SHAPE / NON_FINITE leave the parameters untouched.
  /// Leaves the accumulator alone. Deterministic: equal state + equal vector -> equal result.
  /// `other_norm_sq`: the other stages' squared gradient norms; the clip then
  /// bounds sqrt(this stage's squared norm + them), as one process bounds the
  /// whole model's norm (0: this stage's alone).
  [[nodiscard]] error apply_gradient(const std::vector<float>& mean_grad, double other_norm_sq = 0);
  /// The norm of the gradient the last apply_gradient stepped with, before
  /// clipping; 0 with the clip off (nobody needs it then).
  [[nodiscard]] double last_grad_norm() const;

  /// 64-bit FNV-1a over the float32 bytes of every parameter in flat order.
  [[nodiscard]] uint64_t parameter_hash() const;
  /// Parameters, AdamW state and step count of this stage as one byte string.
  [[nodiscard]] std::string export_state() const;
  /// Replaces parameters, AdamW state and step count with an export_state() of the
  /// same stage and model, and empties the accumulator (and the held microbatch). BAD_REQUEST (unreadable) or
  /// WRONG_SHAPE (another stage or model) leave the worker unchanged.
  [[nodiscard]] error import_state(const std::string& bytes);

  /// This stage's parameters (float32 copies on the CPU).
  [[nodiscard]] named_tensors named_parameters() const;
  /// Replaces the parameters with `values`' tensors of the same names (others
  /// are ignored): --init-from. Optimizer state and step count start afresh, as
  /// in a new worker. WRONG_SHAPE naming the parameter (missing, another shape)
  /// or NON_FINITE leave the worker unchanged.
  [[nodiscard]] error load_parameters(const named_tensors& values);

  [[nodiscard]] const stage_span& span() const;
  /// The device parameters, optimizer state and results live on.
  [[nodiscard]] at::Device device() const;
  /// Number of parameters (elements) of this stage.
  [[nodiscard]] int64_t parameter_count() const;

  struct impl;  ///< opaque here (models/stage_worker_impl.hpp); named for the .cpp's helpers

private:
  std::unique_ptr<impl> impl_;
};

}  // namespace swarm
