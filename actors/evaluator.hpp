#pragma once
// A trainer's evaluator: measures the validation loss of the model as the
// swarm holds it, on a fixed set of held-out windows, through the same load
// balancers as training. Each window set goes forward through every stage;
// the last stage gets `eval` set and returns the loss alone: no backward, no
// gradient added anywhere (forward_request.eval in messages/swarm.proto).
//
// States: idle -> measuring (microbatches in flight, at most in_flight) -> idle,
// answering (loss, samples, failed, seconds). A microbatch a stage could not
// serve after the balancer's retries counts as failed, not as a loss; all
// failed: loss NaN. One measurement at a time: asked while measuring, it
// answers an error the trainer logs.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "config/config.hpp"
#include "data/corpus.hpp"

namespace swarm {

struct evaluator_settings {
  std::string trainer_id;
  int num_stages = 2;
  trainer_config train;
  std::vector<microbatch_tokens> windows;  ///< the validation set, cut into microbatches
};

struct evaluator_state {
  static inline const char* name = "evaluator";
  evaluator_settings cfg;
  std::vector<caf::actor> balancers;
  bool measuring = false;
  caf::response_promise answer;
  size_t next = 0;  ///< next microbatch of cfg.windows to send
  int live = 0;
  double loss_sum = 0;  ///< sum of microbatch mean losses, weighted by samples
  int64_t samples = 0, failed = 0;
  uint64_t next_id = uint64_t{1} << 62;  ///< apart from the trainer's microbatch ids
  std::chrono::steady_clock::time_point started;
};

/// eval_atom -> (loss: mean nats per token, samples measured, samples failed, seconds).
[[nodiscard]] caf::behavior evaluator(caf::stateful_actor<evaluator_state>* self, evaluator_settings cfg,
                                      std::vector<caf::actor> balancers);

}  // namespace swarm
