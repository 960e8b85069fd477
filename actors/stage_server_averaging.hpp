#pragma once
// The stage server's side of stage-wide averaging (see actors/averager.hpp for
// the other side): progress reports, the butterfly round, reloads.
//
//   round: begun (gradient taken, parts sent) --(all shards reduced)--> applied
//                                              --(excluded / timeout / step mismatch)--> given up
// At half the timeout a member not done tells the averager whom it waits for
// (policy::round_clock).
// Either way the server reports round_done, and keeps the round's exchange
// until the next one begins so members still finishing can repair from it.
// A server given up (or told its parameters differ) waits for the averager's
// reload order and then copies an up-to-date peer's state.

#include <functional>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "actors/stage_server.hpp"

namespace swarm::averaging {

using server_ptr = stage_actor::stateful_pointer<stage_server_state>;

/// Sends a progress report when the accumulated samples changed (or `force`).
void report_progress(server_ptr self, bool force);
void on_round_begin(server_ptr self, const std::string& bytes, const std::vector<caf::actor>& members);
void on_piece(server_ptr self, const std::string& bytes);
void on_exclude(server_ptr self, const std::string& bytes);
/// phase 1 (round_clock::report x timeout_s): tell the averager what it waits for; 2 (timeout_s): give up.
void on_deadline(server_ptr self, uint64_t round, int32_t phase);
/// A reload order (actors/stage_server_reload.cpp): copy an up-to-date peer's
/// state, or with no peer named, load the stage's newest checkpoint if it is ahead.
void on_reload(server_ptr self, const std::string& bytes, const caf::actor& peer);
/// The server registers again (its coordinator link dropped): the averager
/// counted it out of the round it was in, and the other members finished
/// without it, so that round is given up (else it would wait for pieces that
/// never come and turn reloads down meanwhile).
void abandon_round(server_ptr self);
/// Writes `params` (stage, step, parameter hash) after a step or a reload.
void emit_params(server_ptr self);
/// Dials `endpoint` ("host:port") unless CAF already holds a direct link to it
/// (the middleman answers from its cache then), and calls `k` either way once
/// answered; a failed dial is tried `tries` times in all.
void dial_then(server_ptr self, const std::string& endpoint, std::function<void()> k, int tries = 3);
/// A monitored actor went down (it is no round peer any more); true when it was a member of the current round.
bool on_member_down(server_ptr self, const caf::actor_addr& who);

} // namespace swarm::averaging
