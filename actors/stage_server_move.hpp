#pragma once
// The stage server's membership: registering with the coordinator, copying a
// stage's state from a live peer (on joining and on moving), and moving to
// another stage when the rebalancer says so (actors/rebalancer.hpp), stopping
// on purpose: the phases of actors/stage_server_phase.hpp, each transition
// made through enter().

#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/stage_server.hpp"

namespace swarm::moving {

using server_ptr = stage_actor::stateful_pointer<stage_server_state>;

/// (Re)registers with `coordinator` (the node's message: at start and after a
/// coordinator restart) as a server of the stage it serves now, whatever stage
/// the node's registration names; "" or the coordinator's refusal. The
/// coordinator's term becomes the newest, even when older: its node registers
/// it only with the leader etcd names now, and etcd's word is what a term means.
[[nodiscard]] caf::result<std::string> on_register(server_ptr self, const encoded<proto::register_server>& bytes,
                                                   const caf::actor& coordinator);
/// A move order (the rebalancer's): refused unless it comes from the
/// coordinator's process, then resume_move().
void on_move(server_ptr self, const encoded<proto::move_order>& bytes);
/// Carries out a move order that fits (this stage, a target in range, the
/// move under way if any) and whose term is not older than the newest seen;
/// also the server's own resend of an order it put off (move_again).
void resume_move(server_ptr self, const encoded<proto::move_order>& bytes);
/// The phase `event` leads to (actors/stage_server_phase.hpp); false, and the
/// phase kept, when that event cannot happen in the phase it is in.
bool enter(server_ptr self, phase_event event);
/// Whether the message handled now comes from the process of the coordinator
/// the server registered with (its averager and rebalancer live there: their
/// orders from anywhere else are refused, logged as a refused `what`).
bool from_coordinator(server_ptr self, const char* what);
/// Fencing: whether an order (`what`: round, reload, move) of coordinator term
/// `term` may be carried out. A term older than the newest this server saw
/// (on an order, or registering) comes from a deposed leader: refused, logged
/// and counted (`stale_order`). A newer one becomes the newest. Registering
/// through its node resets the newest (on_register).
bool accept_term(server_ptr self, int64_t term, const char* what);
/// A round or a reload ended: a move that waited for it goes on, a stop that
/// waited for it ends.
void resume(server_ptr self);
/// Stopped on purpose (its node's exit message): true when it stays to hand
/// its gradient to a round first. It refuses requests and reports itself
/// leaving, so the averager starts a round with what the stage holds.
[[nodiscard]] bool hand_in_before_stop(server_ptr self);
/// While stopping: ends the actor once its gradient went into a round, the
/// coordinator is gone, or stop_hand_in_wait passed; from_timer: the leave
/// timer's call, which arms the next one.
void stop_when_handed_in(server_ptr self, bool from_timer);
/// Ends the actor: a checkpoint when stopped on purpose, gradient still held
/// counted in dropped_samples, server_exit.
void stop(server_ptr self, const caf::error& reason);
/// Writes server_exit with the totals of the stage served now; moved_to: the
/// stage it leaves for, or -1 when the server exits. Nothing before it registered.
void report_exit(server_ptr self, int moved_to);

/// Where a joining or moving server's state came from.
enum class state_source { peer, checkpoint, initial };
[[nodiscard]] const char* to_string(state_source s);

/// Copies parameters, optimizer state and step of `stage` from the first live
/// peer of it (the coordinator lists them) that delivers them; when none does,
/// loads the stage's newest checkpoint (if `checkpoints` has a store); else the
/// worker keeps its initial parameters. Blocks. Used by a joining server's node
/// and by a moving server.
[[nodiscard]] state_source download_state(caf::actor_system& sys, const coordinator_actor& coord, int stage,
                                          uint64_t config_hash, const std::string& server_id, stage_worker& worker,
                                          metrics_sink& metrics, const checkpoint_settings& checkpoints,
                                          int num_stages);

}  // namespace swarm::moving
