#pragma once
// trainer: drives training through the pipeline of load balancers.
//
//   running --(max_steps reached, or SIGTERM)--> draining --(nothing in flight, or stop_drain over)--> done
//
// running: keeps in_flight microbatches in the pipeline. Each goes forward
// through stages 0..S-1 (the last stage also returns loss and the gradient of its
// inputs) and backward through S-2..0, the trainer holding every stage's inputs
// until that stage's backward is done (stateless backward: any server of the stage
// can take it). The load balancers retry failed attempts on other servers; an
// error that reaches the trainer drops the microbatch, counted (`dropped`).
// Every batch_size completed samples make one `step` event.
// draining: no new microbatches; in-flight ones finish or drop.
//
// Accounting: issued = completed + dropped + in flight at all times, and
// acked[k] counts the samples whose gradients stage k confirmed adding (its
// last-stage forward or backward reply). Each server adds a microbatch at most
// once (see stage_server), so the servers' committed samples of stage k sum to
// acked[k], less what servers that died took with them.

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "policy/stage_lag.hpp"
#include "policy/verification.hpp"
#include "base/metrics.hpp"
#include "config/config.hpp"
#include "models/checkpoint.hpp"
#include "data/corpus.hpp"
#include "swarm.pb.h"

namespace swarm {

/// How long a trainer told to stop waits for its microbatches in flight: under
/// the node's stop_grace (apps/node.cpp), after which the process is ended.
constexpr auto stop_drain = std::chrono::seconds(3);

struct trainer_settings {
  std::string trainer_id;  ///< name in logs and metrics
  int num_stages = 2;
  model_config model;
  trainer_config train;
  /// Checkpoints of this trainer's position (slot `slot` of the store); null store: none.
  checkpoint_settings checkpoints;
  int slot = 0;
  uint64_t sampler_seed = 0;               ///< data/corpus.hpp sampler_seed: from the model seed and the slot (or pid)
  std::optional<trainer_position> resume;  ///< continue from here (step count and data position)
  /// Validation microbatches (--eval-every with --data); empty: no validation.
  std::vector<microbatch_tokens> eval_set;
  /// Busy answers its load balancers got (load_balancer_config::busy_answers); null: none counted.
  std::shared_ptr<const std::atomic<int64_t>> busy_answers;
  /// What its load balancers' verification did (load_balancer_config::verified); null: none counted.
  std::shared_ptr<const policy::verify_counters> verified;
};

struct trainer_state {
  static inline const char* name = "trainer";
  using clock = std::chrono::steady_clock;

  struct microbatch {
    std::vector<proto::tensor> inputs;  ///< inputs[k]: what stage k's forward took
    proto::tensor targets;
    std::vector<std::string> servers;     ///< servers[k]: who ran stage k's forward
    std::vector<uint64_t> forward_steps;  ///< forward_steps[k]: the step stage k's forward ran at
    int64_t samples = 0;
    float loss = 0;  ///< mean loss, known after the last stage's forward
  };

  trainer_settings cfg;
  std::shared_ptr<const token_source> text;
  std::shared_ptr<metrics_sink> metrics;
  std::vector<caf::actor> balancers;  ///< one per stage
  std::mt19937_64 rng;
  std::map<uint64_t, microbatch> live;
  uint64_t next_id = 0;
  bool draining = false;
  bool stop_asked = false;  ///< SIGTERM: draining for at most stop_drain
  // Accounting: issued = completed + dropped + live.size() at all times.
  int64_t issued = 0, completed = 0, dropped = 0, retries = 0;
  int64_t step_retries_base = 0;  ///< retries at the last step event
  std::vector<int64_t> acked;     ///< per stage: samples whose gradients the stage confirmed
  int64_t samples = 0;            ///< samples completed in total
  int64_t wire_bytes = 0;  ///< request and reply payload bytes, all stages (load-balancer retries not counted again)
  int64_t step = 0;
  int64_t step_samples = 0;  ///< samples completed since the last step event
  double step_loss_sum = 0;  ///< sum over microbatches of their mean loss, this step
  int64_t step_microbatches = 0;
  clock::time_point step_started, started;
  int64_t first_step = 0;             ///< the step this run started at (for the ETA)
  clock::time_point progress_logged;  ///< when the progress line was last printed
  bool progress_logged_once = false;
  bool reported = false;      ///< trainer_exit written
  caf::actor evaluator;       ///< actors/evaluator.hpp; none without an eval set
  bool eval_pending = false;  ///< a validation measurement is under way
  stage_watch stages{0};      ///< each stage's optimizer step as its replies report it
  int64_t lag_warned = 0;     ///< the stall last warned about (policy/stage_lag.hpp); 0 once it moves
};

[[nodiscard]] caf::behavior trainer(caf::stateful_actor<trainer_state>* self, trainer_settings cfg,
                                    std::shared_ptr<const token_source> text, std::vector<caf::actor> balancers,
                                    std::shared_ptr<metrics_sink> metrics);

}  // namespace swarm
