#pragma once
// The stage server's side of stage-wide averaging (see actors/averager.hpp for
// the coordinator's side, actors/round_peer.hpp for the exchange): progress
// reports, handing the gradient over at a round's start, the optimizer step at
// its end, reloads.
//
//   round: begun (gradient handed to the round peer) --(outcome: complete)--> applied
//                                                    --(outcome: given up / not at the round's step)--> given up
// Either way the server reports round_done. A server given up (or told its
// parameters differ) waits for the averager's reload order and then copies an
// up-to-date peer's state.

#include <string>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "actors/stage_server.hpp"

namespace swarm::averaging {

using server_ptr = stage_actor::stateful_pointer<stage_server_state>;

/// Sends a progress report when the accumulated samples changed (or `force`).
void report_progress(server_ptr self, bool force);
/// A round begins: hands the accumulated gradient to the round peer (or gives up at once when not at its step).
void on_round_begin(server_ptr self, const encoded<proto::round_begin>& bytes, const std::vector<caf::actor>& members);
/// The round peer's outcome of a round (round_outcome) and, when complete, the mean gradient: the step.
void on_outcome(server_ptr self, const encoded<proto::round_outcome>& bytes, const std::vector<float>& mean);
/// Its own timer, a little after `round`'s end: a round its peer never answered
/// (it cannot happen unless the peer is stuck) is given up.
void on_round_overdue(server_ptr self, uint64_t round);
/// Its own timer at --stale-wait into `round`: the requests deferred for its step run now.
void on_stale_wait_over(server_ptr self, uint64_t round);
/// A reload order (actors/stage_server_reload.cpp): copy an up-to-date peer's
/// state, or with no peer named, load the stage's newest checkpoint if it is ahead.
void on_reload(server_ptr self, const encoded<proto::reload_order>& bytes, const caf::actor& peer);
/// The server registers again (its coordinator link dropped): the averager
/// counted it out of the round it was in, and the other members finished
/// without it, so that round is given up (else it would wait for pieces that
/// never come and turn reloads down meanwhile).
void abandon_round(server_ptr self);
/// A gradient no step used (taken before a reload, or handed back by a failed
/// round), computed at step `computed_at`: back into the accumulator for the
/// stage's next round while the worker is at most one step past it (a step
/// stale then), else dropped and counted in dropped_samples: two steps on, the
/// parameters it points from are gone, and Adam's moments have moved past it.
/// Either way a `gradient_carry` event says so, with `why` (what left it unused).
void carry_over(server_ptr self, local_gradient g, int64_t computed_at, const char* why);
/// Writes `params` (stage, step, parameter hash) after a step or a reload.
void emit_params(server_ptr self);

}  // namespace swarm::averaging
