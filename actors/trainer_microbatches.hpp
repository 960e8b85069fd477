#pragma once
// The trainer's two halves and what one asks of the other: its microbatches
// on their way through the stages (actors/trainer_microbatches.cpp) and its
// steps, evaluation and reports (actors/trainer.cpp).

#include <cstdint>

#include <caf/stateful_actor.hpp>

#include "actors/trainer.hpp"

namespace swarm::training {

using self_ptr = caf::stateful_actor<trainer_state>*;

// Microbatches:
/// Starts new microbatches until in_flight are live (unless draining).
void launch(self_ptr self);

// Steps and reports:
/// The last stage's index.
[[nodiscard]] int last_stage(self_ptr self);
/// How long the trainer waits for a load balancer: every attempt, plus waiting
/// for a server, plus slack, so the balancer always answers first.
[[nodiscard]] caf::timespan request_deadline(self_ptr self, double attempt_timeout_s);
/// A step's worth of samples completed: the step event and progress line.
void emit_step(self_ptr self);
/// Draining and nothing left in flight: trainer_exit, the balancers stopped, the actor quits.
void maybe_finish(self_ptr self);

}  // namespace swarm::training
