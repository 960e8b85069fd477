#pragma once
// stage_server: serves one pipeline stage to every trainer of the swarm.
//
//   spawned --> serving --(exit message)--> done
//
// serving: forward and backward requests run on the stage_worker one at a time
// (the actor is spawned detached, so its compute blocks only its own thread).
// Each request is decoded and validated at the boundary; a bad one gets an error
// reply and a log line and leaves the parameters untouched.
//
// Steps are stage-wide (actors/stage_server_averaging.hpp): the server reports its
// accumulated samples to the averaging coordinator, which starts a round among
// the stage's servers; the server hands its gradient to its round peer
// (actors/round_peer.hpp), the peers all-reduce server to server beside the
// compute, and every member applies the same optimizer step when its peer hands
// the mean back. Staleness: a request that would add gradients while a round
// runs waits for its step (deferred, in order, at most stale_wait_s after the
// round began), so that its gradient steps the parameters it was computed on;
// forwards that add nothing (every stage's but the last) go on meanwhile. Past
// stale_wait_s (a round stuck on a dead member) requests are computed on the
// parameters before the step and count towards the next one: a step stale at
// most (docs/design.md).
//
// Exactly once: gradients of a microbatch (key: trainer, microbatch, direction)
// are added at most once per server: a request already past its commit deadline
// is refused before compute, gradients that finish after it are discarded
// (TIMEOUT, so the trainer's retry elsewhere is the only one that counts), and a
// repeat of a key this server already added is answered without adding again.
// The load balancer sets the commit deadline a grace period before its own
// request deadline (the request's reply_deadline), so a server that commits in
// time has that grace for its reply to arrive before anyone retries.
// A process that stops right after it commits (SIGSTOP, a starved machine)
// sends its reply late all the same, and the trainer's retry elsewhere counts
// too. So the gradients of an answered microbatch are held apart, and added
// (settle_held) only once the reply has been out for a while, or a later
// microbatch is computed, and the freeze watch saw no stall since the reply
// left as long as the slack it had to its reply deadline; otherwise they are
// withheld (withheld_samples: answered, maybe retried elsewhere, never added here).
//
// Moving (actors/stage_server_move.hpp): told by the rebalancer, the server
// stops taking requests (LEAVING: retried elsewhere, nothing computed), finishes
// a round or reload it is in, leaves its stage and serves another; its phases
// and their transitions are in actors/stage_server_phase.hpp.
// A server reports `server_exit` for every stage it stops serving: on exit, and
// on leaving a stage for another (then with `moved_to`).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>

#include "base/metrics.hpp"
#include "actors/round_peer.hpp"
#include "actors/stage_server_phase.hpp"
#include "config/config.hpp"
#include "net/bulk.hpp"
#include "net/chunks.hpp"
#include "policy/admission.hpp"
#include "messages/local.hpp"
#include "messages/protocol.hpp"
#include "models/checkpoint.hpp"
#include "models/stage_worker.hpp"
#include "swarm.pb.h"

namespace swarm {

/// What a stage server needs to know; built from app_config by the server role.
struct stage_server_config {
  std::string server_id;  ///< unique name in logs and metrics, e.g. "s1-4711"
  /// Its role's section: --slowdown, --averaging-compression, --stale-wait
  /// (see "Staleness" above), --activation-cache-mb (a moved-to stage's
  /// worker gets that budget), --max-outstanding (its door), the fault hook.
  server_config server;
  net_config net;  ///< chunk_bytes (largest reply payload per message), bulk_min_bytes
  // What it needs to build another stage when it moves:
  model_config model;
  int num_stages = 2;
  std::string device = "cpu";
  bool bf16 = false;  ///< a moved-to stage's precision (--precision)
  /// The bulk data plane (net/bulk.hpp): replies and pieces of at least
  /// net.bulk_min_bytes go over it; null = everything through CAF.
  std::shared_ptr<bulk_endpoint> bulk;
  double bulk_wait_s = 60;  ///< a claim on bytes that have not come fails after this (PEER_GONE)
  checkpoint_settings checkpoints;
  /// --init-from's whole model (null: random init): a stage built on a move starts from it too.
  std::shared_ptr<const named_tensors> initial_weights;
  /// A process that stood still this long (its peers' connection timeout) gives up
  /// the round it was in (base/freeze_watch.hpp); 0 = never.
  double freeze_s = 0;
  /// False while the node knows the coordinator is gone (set by the node; null: always up).
  std::shared_ptr<std::atomic<bool>> coordinator_up;
};

/// Totals of one stage served, reported when the server leaves it or exits (metrics event server_exit).
struct stage_server_counters {
  int64_t served = 0;             ///< requests answered successfully
  int64_t rejected = 0;           ///< requests answered with an error
  int64_t committed_samples = 0;  ///< samples whose gradients were added
  int64_t duplicates = 0;         ///< repeats answered without adding again
  int64_t late = 0;               ///< requests refused or discarded after their commit deadline
  int64_t rounds = 0;             ///< averaging rounds applied
  int64_t rounds_failed = 0;      ///< rounds given up (deadline, excluded, or a step behind)
  /// Samples of gradients thrown away: more than a step old (see carry_over), or with a move
  int64_t dropped_samples = 0;
  int64_t carried_gradients = 0;  ///< gradients a failed round or a reload did not use, kept for the next round
  int64_t withheld_samples = 0;   ///< answered, but held back: the reply may have come late (see the header)
};

/// A held microbatch added to a round's gradient before its reply's window
/// closed: the round peer checks the window before any part leaves.
struct reply_check {
  std::chrono::steady_clock::time_point sent_at, window_end;
  double slack_s = 0;   ///< a stall this long in the window may have made the reply late
  int64_t samples = 0;  ///< the microbatch's
};

/// This server's part in the averaging round now running or last run; the
/// exchange itself runs in its round peer (actors/round_peer.hpp).
struct server_round {
  uint64_t id = 0;
  uint64_t number = 0;  ///< the round's number within its stage (round_begin.number), for logs
  uint64_t step = 0;    ///< the step the round starts from
  int members = 0;
  std::chrono::steady_clock::time_point started;
  int64_t samples = 0;        ///< samples of the gradient handed in
  int64_t stale_samples = 0;  ///< of those, computed on parameters before `step` (local_gradient)
  int64_t microbatches = 0;
  double other_norm_sq = 0;           ///< round_begin.other_norm_sq: the clip's other stages
  int64_t term = 0;                   ///< round_begin.term: the ordering coordinator's
  std::optional<reply_check> check;   ///< a provisional microbatch in its gradient (settle_held_for_round)
  bool finished = false;              ///< applied or given up
  bool writer = false;                ///< its lowest live member: writes the stage's checkpoint
  std::vector<std::string> ids;       ///< the members' server ids, rank order (round_begin.members)
  std::vector<std::string> outliers;  ///< centered-clip: members whose parts lay outside the honest spread here
};

/// Requests and their exactly-once accounting; written by actors/stage_server.cpp only.
struct serving_state {
  /// Keys of microbatches whose gradients were added, oldest first; bounded.
  static constexpr size_t committed_window = 1 << 16;

  int64_t forwards_seen = 0, backwards_seen = 0, states_seen = 0;  ///< for the fault hook
  std::unordered_set<std::string> committed;
  std::deque<std::string> committed_order;
  double busy_s = 0;  ///< seconds spent handling requests on this stage (the rebalancer's rate)

  /// The answered microbatch whose gradients the worker holds apart (see "Exactly once").
  struct held_reply {
    uint64_t id = 0;
    std::string key;
    double reply_deadline = 0;  ///< unix seconds
    bool sent = false;          ///< the reply was handed to CAF or the bulk plane
    double slack_s = 0;         ///< reply_deadline minus the unix time it was handed over
    std::chrono::steady_clock::time_point sent_at;
  };
  std::optional<held_reply> held;
  uint64_t next_held = 0;
  /// How long an answered microbatch is held at most before its gradients are
  /// added (a later microbatch settles it sooner).
  static constexpr auto settle_after = std::chrono::milliseconds(300);
  /// How long CAF's or the bulk plane's writer takes to put a reply into the
  /// kernel, which sends it even while the process stands still: a stall that
  /// overlaps this window after the hand-over may have kept the reply back.
  static constexpr auto reply_leaves_within = std::chrono::milliseconds(50);
  /// Requests that add gradients, waiting for the round in flight to step (see
  /// the top); at most max_deferred (each holds its payload), later ones run at once.
  static constexpr size_t max_deferred = 256;
  std::deque<std::function<void()>> deferred;
  uint64_t waited_out = 0;  ///< the round whose stale_wait_s passed: nothing waits for it any more

  /// A new stage: its keys would collide with the old one's (keys name no stage).
  void begin_stage() {
    committed.clear();
    committed_order.clear();
    busy_s = 0;
  }
};

/// Stage-wide averaging and reloads; written by actors/stage_server_averaging.cpp,
/// except `begin_stage` (a move) and the parameter hash after a start or a move.
struct averaging_state {
  uint64_t hash = 0;              ///< parameter hash, cached: it changes only with a step or a reload
  int64_t reported_samples = -1;  ///< accumulated samples in the last progress report
  std::optional<server_round> round;
  /// A failed round's gradient whose parts went out: the others may have stepped
  /// with them. The next round tells: at the same step nobody did (it goes into
  /// that round), a step on they did (it was used).
  struct returned_gradient {
    local_gradient gradient;
    int64_t step = 0;
  };
  std::optional<returned_gradient> returned;
  round_peer_actor peer;  ///< runs the rounds' exchanges beside this thread (linked)
  bool reloading = false;
  uint64_t reloads = 0;  ///< reload orders finished or turned down (see progress_report)

  [[nodiscard]] bool in_round() const { return round && !round->finished; }
  /// In a round not finished yet, or copying a peer's state: a move waits for either.
  [[nodiscard]] bool busy() const { return in_round() || reloading; }
  /// A new stage with parameters that hash to `parameters`: nothing of the old one's rounds counts.
  void begin_stage(uint64_t parameters) {
    hash = parameters;
    round.reset();
    returned.reset();
    reported_samples = -1;
  }
};

/// Registration, moving and stopping (actors/stage_server_phase.hpp);
/// written by actors/stage_server_move.cpp only.
struct membership_state {
  server_phase phase = server_phase::starting;  ///< changed by moving::enter() only
  coordinator_actor coordinator;        ///< set by the node's register message; again after a coordinator restart
  averager_actor averager;              ///< fetched on registering; again after a coordinator restart
  proto::register_server registration;  ///< as last sent; its stage is the one served now
  bool registered = false;              ///< registered at least once (server_exit is owed)
  std::chrono::steady_clock::time_point registered_at;  ///< last registration: rounds after a later freeze are given up
  std::optional<proto::move_order> move;                ///< ordered, not done (draining, moving)
  std::chrono::steady_clock::time_point move_ordered;
  bool hand_in_timer = false;  ///< the move's wait for a round to hand its gradient to is timed
  /// Stopping since (its gradient waits for a round: moving::hand_in_before_stop).
  std::chrono::steady_clock::time_point stopping_since;
  int64_t stopping_samples = 0;    ///< gradient samples held when stopped
  std::set<uint32_t> left_stages;  ///< stages it served before: their late requests get LEAVING, not an error
  int64_t newest_term = 0;         ///< the newest coordinator term seen (Fencing, moving::accept_term)
  /// First checkpoint due from here
  std::chrono::steady_clock::time_point serving_since = std::chrono::steady_clock::now();

  [[nodiscard]] bool draining() const { return phase == server_phase::draining; }
};

/// The actor's state, one sub-struct per file that writes it, so a reader sees
/// who may change what. Its phases (actors/stage_server_phase.hpp) are one
/// field with coded transitions, not CAF behaviors: a typed actor's every
/// behavior must handle its whole interface (10 handlers here), and draining
/// differs from serving in one line of one handler; moving blocks the
/// (detached) actor and is never seen by a handler.
struct stage_server_state {
  static inline const char* name = "stage_server";

  stage_server_config cfg;
  std::shared_ptr<stage_worker> worker;  ///< replaced on a move
  std::shared_ptr<metrics_sink> metrics;
  std::shared_ptr<stage_server_counters> counters;  ///< reset on a move
  // Payloads in pieces, of requests and of rounds alike:
  chunk_assembler chunks;
  bulk_inbox inbox;                         ///< payloads from the bulk connection, paired with their messages
  std::set<caf::actor_addr> chunk_senders;  ///< monitored so their unfinished payloads can be dropped
  uint64_t next_transfer = 0;
  door_actor door;  ///< answers reservations while this one computes
  serving_state serving;
  averaging_state avg;
  membership_state member;
};

/// The server's own messages: local (messages/local.hpp), so in no interface and from no peer.
namespace stage_server_local {
struct round_overdue {  ///< its round peer gave no outcome by the round's end (+5 s)
  uint64_t round = 0;
};
struct stale_wait_over {  ///< requests deferred for this round's step stop waiting ("Staleness")
  uint64_t round = 0;
};
struct settle_due {  ///< the held microbatch's settle_after is up ("Exactly once")
  uint64_t held = 0;
};
struct leave_check {};  ///< stopping on purpose: is its gradient handed in? (moving::stop_when_handed_in)
struct move_again {     ///< a move order it put off may go on (moving::on_move)
  encoded<proto::move_order> order;
};
}  // namespace stage_server_local

[[nodiscard]] stage_actor::behavior_type stage_server(stage_actor::stateful_pointer<stage_server_state> self,
                                                      stage_server_config cfg, std::shared_ptr<stage_worker> worker,
                                                      std::shared_ptr<metrics_sink> metrics,
                                                      std::shared_ptr<stage_server_counters> counters);

/// The worker of `stage` as `cfg` builds it (model, device, precision,
/// activation cache, --init-from's weights): at start and on every move. Why
/// not, when the config cannot build it.
[[nodiscard]] caf::expected<std::shared_ptr<stage_worker>> build_stage_worker(const stage_server_config& cfg,
                                                                              int stage);

/// Adds the held microbatch's gradients (see "Exactly once") when its reply left
/// in time, else withholds them; a no-op when none is held. Called before
/// anything that reads or replaces the accumulator.
void settle_held(stage_actor::stateful_pointer<stage_server_state> self);

/// settle_held() for a round about to take the gradient: a held microbatch
/// whose reply is still inside its leaving window is added now, provisionally
/// (the check returned goes with the round), so that it steps the parameters it
/// was computed on rather than the next ones.
std::optional<reply_check> settle_held_for_round(stage_actor::stateful_pointer<stage_server_state> self);

/// Runs the requests deferred for a round's step, in order (see "Staleness");
/// called once the round applied or was given up.
void release_deferred(stage_actor::stateful_pointer<stage_server_state> self);

/// Imports a peer's state (`reply`: a reassembled state_reply) into `worker`
/// and checks that the parameters then hash as the peer said; on success logs
/// and writes `state_download` (from `from`, timed since `started`). Used by a
/// joining server and by a reload. A reload names the (step, hash) its
/// stage's majority holds (`expected`): a state that claims another is refused
/// before it touches the parameters.
[[nodiscard]] caf::error adopt_state(stage_worker& worker, const caf::expected<std::string>& reply,
                                     const std::string& server_id, const std::string& from,
                                     std::chrono::steady_clock::time_point started, metrics_sink& metrics,
                                     std::optional<std::pair<uint64_t, uint64_t>> expected = std::nullopt);

}  // namespace swarm

SWARM_LOCAL_MESSAGE(swarm::stage_server_local::round_overdue)
SWARM_LOCAL_MESSAGE(swarm::stage_server_local::stale_wait_over)
SWARM_LOCAL_MESSAGE(swarm::stage_server_local::settle_due)
SWARM_LOCAL_MESSAGE(swarm::stage_server_local::leave_check)
SWARM_LOCAL_MESSAGE(swarm::stage_server_local::move_again)
