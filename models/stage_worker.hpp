#pragma once
// The compute of one stage server: parameters, optimizer, forward, stateless
// backward, gradient accumulation, optimizer step. Torch stays behind this
// header (pimpl) so the actors that use it compile without torch.
//
// Gradient accounting: each forward on the last stage and each backward adds the
// microbatch's parameter gradients of its mean loss and counts its samples;
// apply_step() divides the sum by the number of microbatches accumulated (the
// gradient of the mean loss over the batch), clips, steps AdamW and zeroes.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "config/config.hpp"
#include "models/partition.hpp"
#include "swarm.pb.h"

namespace swarm {

/// Asked once a microbatch's gradients are computed and finite, before they are
/// added to the accumulator: the caller's exactly-once rule (see stage_server).
struct commit_decision {
  bool add = true;     ///< false: already added once; reply without adding again
  caf::error reject;   ///< set: discard the gradients and fail the request with it
};
using commit_gate = std::function<commit_decision()>;

class stage_worker {
public:
  /// Builds stage `stage` of `num_stages`; throws std::invalid_argument with a
  /// fix-it message when the config cannot be cut that way or `device` is not available.
  stage_worker(const model_config& cfg, int stage, int num_stages, const std::string& device);
  ~stage_worker();
  stage_worker(stage_worker&&) noexcept;
  stage_worker& operator=(stage_worker&&) noexcept;

  /// Validates shapes, dtypes, token range and finiteness against the model
  /// (WRONG_SHAPE, NON_FINITE, UNKNOWN_STAGE, BAD_REQUEST); never throws. Runs the
  /// stage; on the last stage also the loss and backward (reply has loss, input_grad).
  [[nodiscard]] caf::expected<proto::forward_reply> forward(const proto::forward_request& req,
                                                           const commit_gate& gate = {});

  /// Stateless backward (not for the last stage); same validation as forward.
  [[nodiscard]] caf::expected<proto::backward_reply> backward(const proto::backward_request& req,
                                                             const commit_gate& gate = {});

  /// Samples whose gradients are accumulated since the last step.
  [[nodiscard]] int64_t accumulated_samples() const;
  /// Optimizer steps applied so far.
  [[nodiscard]] int64_t steps() const;
  /// One optimizer step on the accumulated gradients; no-op when nothing is accumulated.
  void apply_step();

  [[nodiscard]] const stage_span& span() const;
  /// Number of parameters (elements) of this stage.
  [[nodiscard]] int64_t parameter_count() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace swarm
