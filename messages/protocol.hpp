#pragma once
// The cross-process protocols: atoms and typed actor interfaces. Every payload
// is a serialized message of messages/swarm.proto, as encoded<P>: the signature
// names the message, CAF only carries its bytes (an actor behaves the same
// whether its peer is in this process or another), and the receiving handler
// parses it once, with decode(m) of messages/wire.hpp, before anything else.
// A malformed one is answered with BAD_REQUEST, never crashes the receiver.
//
// Large payloads: CAF 0.17 slows down disproportionately for messages above
// ~16 MiB, so a payload larger than net_config::chunk_bytes travels as leading
// (chunk, transfer_id, bytes) messages followed by the request (or reply) that
// carries the same transfer_id and the last piece. transfer_id 0 = all inline.
// CAF keeps messages between two actors in order, which the reassembly relies on.
// Payloads of at least net_config::bulk_min_bytes skip CAF instead: their bytes
// go over the bulk connection (net/bulk.hpp) and the request, reply or
// piece names their key (a transfer_id with bulk_flag set, or bulk_key).
//
// An actor's own timers and the bulk plane's deliveries are in no interface
// here: they are local messages (messages/local.hpp), which no peer can send.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>

#include "messages/local.hpp"

namespace swarm {

namespace proto {
class allreduce_piece;
class backward_reply;
class backward_request;
class forward_reply;
class forward_request;
class leave_notice;
class membership_update;
class move_order;
class placement;
class placement_request;
class progress_report;
class register_reply;
class register_server;
class reload_order;
class round_begin;
class round_done;
class round_exclude;
class round_outcome;
class round_waiting;
class server_list;
class state_reply;
class state_request;
class subscribe;
class trainer_report;
class verification_evidence;
}  // namespace proto

/// The bytes of one serialized P (messages/swarm.proto). With a transfer id
/// (forward, backward, state) they are the last piece of P's bytes, the others
/// sent ahead as chunks, or P's head when the id names a bulk frame.
template <class P>
struct encoded {
  std::string bytes;
};

template <class Inspector, class P>
typename Inspector::result_type inspect(Inspector& f, encoded<P>& x) {
  return f(x.bytes);
}

/// The longest delay seconds() gives: about 31 years. CAF adds a delay to its
/// clock's now, so a timespan near its maximum would overflow.
constexpr double longest_delay_s = 1e9;

/// Seconds (from config or a peer's message) as the timespan CAF deadlines
/// take: NaN and negatives are 0 (now), and more than longest_delay_s is
/// longest_delay_s (a double cast to a duration out of range is undefined).
[[nodiscard]] inline caf::timespan seconds(double s) {
  if (!(s > 0))
    return caf::timespan{0};
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(std::min(s, longest_delay_s)));
}

using forward_atom = caf::atom_constant<caf::atom("forward")>;
using backward_atom = caf::atom_constant<caf::atom("backward")>;
using chunk_atom = caf::atom_constant<caf::atom("chunk")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
using membership_atom = caf::atom_constant<caf::atom("member")>;
using state_atom = caf::atom_constant<caf::atom("state")>;
using peers_atom = caf::atom_constant<caf::atom("peers")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using round_atom = caf::atom_constant<caf::atom("round")>;
using piece_atom = caf::atom_constant<caf::atom("piece")>;
using exclude_atom = caf::atom_constant<caf::atom("exclude")>;
using done_atom = caf::atom_constant<caf::atom("rounddone")>;
using reload_atom = caf::atom_constant<caf::atom("reload")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using averager_atom = caf::atom_constant<caf::atom("averager")>;
using waiting_atom = caf::atom_constant<caf::atom("waiting")>;
using move_atom = caf::atom_constant<caf::atom("move")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using place_atom = caf::atom_constant<caf::atom("place")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
/// The averager tells its coordinator that a server is evicted (its round results disagreed with the majority).
using evict_atom = caf::atom_constant<caf::atom("evict")>;
/// A stage server tells its round peer that it gave up a round (its coordinator link dropped).
using abandon_atom = caf::atom_constant<caf::atom("abandon")>;
/// A load balancer asks a stage server's door for room for one request
/// (reserve -> ticket, 0: busy), after asking the server for its door (door);
/// the server tells its door that a ticket's request is over (release).
using reserve_atom = caf::atom_constant<caf::atom("reserve")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using door_atom = caf::atom_constant<caf::atom("door")>;
/// A trainer asks its evaluator (actors/evaluator.hpp) for one validation measurement.
using eval_atom = caf::atom_constant<caf::atom("eval")>;

/// The rebalancer (actors/rebalancer.hpp), in the coordinator process. join:
/// register_server plus the server's handle (from the coordinator); progress:
/// a progress_report the averager accepted (its load figures); place:
/// placement_request -> placement (a new server asks where to go, through the
/// coordinator).
using rebalancer_actor =
    caf::typed_actor<caf::reacts_to<join_atom, encoded<proto::register_server>, caf::actor>,
                     caf::reacts_to<progress_atom, encoded<proto::progress_report>>,
                     caf::replies_to<place_atom, encoded<proto::placement_request>>::with<encoded<proto::placement>>>;

/// The averaging coordinator (actors/averager.hpp). progress: progress_report;
/// done: round_done; waiting: round_waiting (all three from servers); join: register_server plus the server's
/// handle and its round peer's (actors/round_peer.hpp); leave: the server left its stage (both from the coordinator,
/// which spawned it). waiting comes from a server's round peer. Server handles travel as plain caf::actor because
/// stage_actor (below) refers to this type.
using averager_actor =
    caf::typed_actor<caf::reacts_to<progress_atom, encoded<proto::progress_report>>,
                     caf::reacts_to<done_atom, encoded<proto::round_done>>,
                     caf::reacts_to<waiting_atom, encoded<proto::round_waiting>>,
                     caf::reacts_to<join_atom, encoded<proto::register_server>, caf::actor, caf::actor>,
                     caf::reacts_to<leave_atom, caf::actor>>;

/// A stage server's door (actors/door.hpp), in its process: answers
/// reservations while the server computes. reserve -> a ticket, 0 when it has
/// no room (policy::admission); release: the ticket's request is over (from
/// its server).
using door_actor =
    caf::typed_actor<caf::replies_to<reserve_atom>::with<uint64_t>, caf::reacts_to<release_atom, uint64_t>>;

/// A stage server. Requests carry (transfer_id, encoded request), see encoded:
/// forward: forward_request -> forward_reply; backward: backward_request -> backward_reply;
/// state: state_request -> state_reply (a joining peer downloads the stage's state).
/// Averaging (the averager's handle comes with registering):
/// round: round_begin + the members' round peers in rank order (the server hands its
/// gradient to its own round peer, which runs the exchange); done: round_outcome +
/// the averaged gradient from its own round peer; reload: reload_order + the peer's handle;
/// register: (register_server, coordinator) -> empty string: (re)register with
/// that coordinator, as the stage it serves now (from its node). move:
/// move_order (from the rebalancer).
/// door -> its door (a door_actor, as caf::actor), asked once by each load balancer.
using stage_actor = caf::typed_actor<
    caf::replies_to<forward_atom, uint64_t, encoded<proto::forward_request>>::with<uint64_t,
                                                                                   encoded<proto::forward_reply>>,
    caf::replies_to<backward_atom, uint64_t, encoded<proto::backward_request>>::with<uint64_t,
                                                                                     encoded<proto::backward_reply>>,
    caf::replies_to<state_atom, uint64_t, encoded<proto::state_request>>::with<uint64_t, encoded<proto::state_reply>>,
    caf::reacts_to<chunk_atom, uint64_t, std::string>,
    caf::reacts_to<round_atom, encoded<proto::round_begin>, std::vector<caf::actor>>,
    caf::reacts_to<done_atom, encoded<proto::round_outcome>, std::vector<float>>,
    caf::reacts_to<reload_atom, encoded<proto::reload_order>, caf::actor>,
    caf::replies_to<register_atom, encoded<proto::register_server>, caf::actor>::with<std::string>,
    caf::reacts_to<move_atom, encoded<proto::move_order>>, caf::replies_to<door_atom>::with<caf::actor>>;

/// A stage server's round peer (actors/round_peer.hpp), in the server's process:
/// the server's part of the all-reduce, beside the thread that computes. round:
/// (round_begin, members' round peers in rank order, the gradient handed over,
/// its samples, the averager, and a reply check: empty, or [sent_at, window_end]
/// in steady-clock nanoseconds and the slack in microseconds, see
/// actors/stage_server.hpp reply_check) from its own server; piece: allreduce_piece from
/// another member's peer; exclude: round_exclude from the averager; abandon: its server gave up that round.
using round_peer_actor =
    caf::typed_actor<caf::reacts_to<round_atom, encoded<proto::round_begin>, std::vector<caf::actor>,
                                    std::vector<float>, int64_t, averager_actor, std::vector<int64_t>>,
                     caf::reacts_to<piece_atom, encoded<proto::allreduce_piece>>,
                     caf::reacts_to<exclude_atom, encoded<proto::round_exclude>>,
                     caf::reacts_to<abandon_atom, uint64_t>>;

/// The membership registry. register: (register_server, the server's handle, its round peer's)
/// -> register_reply, and the server is monitored from then on; peers:
/// subscribe (only the stage is read) -> server_list of that stage now; subscribe: subscribe -> empty string, then
/// (membership_atom, membership_update) messages to the sender for every server
/// of that stage, present and future; averager -> the averaging coordinator;
/// leave: leave_notice from a server moving to another stage; place:
/// placement_request -> placement (answered by the rebalancer); report:
/// trainer_report (for the status page); status: "json" | "text" |
/// "prometheus" -> the status board rendered so (swarm --role status); evict: a
/// server the averager evicted (from its own process only): out of membership, never admitted again;
/// or verification_evidence from a trainer (issue #47): out of membership, refused for --ban-cooldown.
using coordinator_actor =
    caf::typed_actor<caf::replies_to<register_atom, encoded<proto::register_server>, stage_actor,
                                     caf::actor>::with<encoded<proto::register_reply>>,
                     caf::replies_to<averager_atom>::with<averager_actor>,
                     caf::replies_to<subscribe_atom, encoded<proto::subscribe>>::with<std::string>,
                     caf::replies_to<peers_atom, encoded<proto::subscribe>>::with<encoded<proto::server_list>>,
                     caf::reacts_to<leave_atom, encoded<proto::leave_notice>>,
                     caf::replies_to<place_atom, encoded<proto::placement_request>>::with<encoded<proto::placement>>,
                     caf::reacts_to<report_atom, encoded<proto::trainer_report>>,
                     caf::reacts_to<evict_atom, caf::actor>,
                     caf::reacts_to<evict_atom, encoded<proto::verification_evidence>>,
                     caf::replies_to<status_atom, std::string>::with<std::string>>;

/// The node's coordinator restarted elsewhere: a trainer's load balancers
/// subscribe to `coordinator`, its status reporter reports there. A local
/// message (messages/local.hpp): no peer can point a trainer at a coordinator
/// of its own.
struct coordinator_changed {
  coordinator_actor coordinator;
};

}  // namespace swarm

SWARM_LOCAL_MESSAGE(swarm::coordinator_changed)
