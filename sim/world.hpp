#pragma once
// The simulated swarm's shared state. SimGrid runs every simulated actor as a
// coroutine in this one thread, so they share it without locks; each actor
// file (server, trainer, coordinator, churn) changes only what it owns and
// says so. Time is SimGrid's clock (simulated seconds from 0).

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/metrics.hpp"
#include "policy/admission.hpp"
#include "policy/rebalancing.hpp"
#include "policy/routing.hpp"
#include "policy/verification.hpp"
#include "models/shape/cost_model.hpp"
#include "sim/ledger.hpp"
#include "sim/scenario.hpp"
#include "sim/trace.hpp"

namespace swarm::sim {

namespace s4u = simgrid::s4u;

/// A request to a server, or an order from the coordinator.
struct request {
  enum kind_t { forward, backward, move } kind = forward;
  int stage = 0;
  uint64_t epoch = 0;  ///< the server life it was sent to; older ones are dropped unanswered
  int64_t samples = 0;
  double reply_bytes = 0;
  s4u::Mailbox* reply_to = nullptr;
  uint64_t attempt = 0;
  double commit_by = 1e300;     ///< swarm's commit deadline: a server refuses work it reaches later
  work_books* books = nullptr;  ///< its worker's books (sim/ledger): where its compute goes
  int queued_on = -1;           ///< the stage whose queue count it is in (sim/ledger), -1: none
  uint64_t ticket = 0;          ///< its reservation's grant (policy::admission), 0: sent without one
  double delay_s = 0;   ///< its asks' round trips (sim/trainer.cpp): not ready before this long after it arrived
  double ready_at = 0;  ///< arrival + delay_s (deliver())
  bool verify = false;  ///< a verification's second opinion (issue #47): its compute is verification's, adds nothing
};

/// A server's answer, or a down event the coordinator forwards to a waiting trainer.
struct reply {
  uint64_t attempt = 0;
  enum status_t { ok, down, leaving } status = ok;
  double served_s = 0;  ///< seconds its server spent computing it (ok only)
};

/// A member's share of an all-reduce round: `bytes` up its link and as many
/// down, by `deadline`; `done` is released when both ended (or were cut).
struct round_flow {
  uint64_t bytes = 0;
  double deadline = 0;
  s4u::SemaphorePtr done;
};

/// One end of a machine's all-reduce flows: an actor on the machine or on the
/// hub, taking its rounds in order (both ends see the same order, so each
/// round's two ends meet through the machine's two mailboxes).
struct flow_end {
  std::deque<std::shared_ptr<round_flow>> rounds;
  s4u::SemaphorePtr ready = s4u::Semaphore::create(0);
};

struct peer {
  enum state_t { off, joining, serving, moving } state = off;
  int index = 0;
  std::string name;  ///< "s<index>.<life>": a restarted machine is a new server, as in swarm
  s4u::Host* host = nullptr;
  /// Where requests are sent: its machine's receiver (sim/platform.cpp's nic)
  /// takes each as its bytes arrive and queues it for the server.
  s4u::Mailbox* inbox = nullptr;
  /// Requests that arrived, oldest first (swarm's actor mailbox), counted by
  /// `arrived`, which the server waits on. Not left in a SimGrid mailbox:
  /// SimGrid 3.32 keeps an actor's pending activities in a list it scans at
  /// every completion, so a server with n requests queued paid O(n) per
  /// request (a third of a 3,000-peer run).
  std::deque<request*> queue;
  s4u::SemaphorePtr arrived;
  s4u::Host* cpu = nullptr;  ///< where it computes: its own host (wan) or the one shared machine (local)
  s4u::ActorPtr actor;       ///< its server actor while it lives
  double speed = 1;          ///< compute relative to the calibrated core
  double slowdown = 1;       ///< as swarm --slowdown: sleeps (slowdown - 1) x its compute
  int region = 0;
  bool liar = false;       ///< every answer wrong (--liars): verification's quarry
  bool banned = false;     ///< a trainer's verification banned it: out of its stage (serving() skips it)
  double banned_at = -1;   ///< simulated seconds; -1: never
  int home_stage = -1;     ///< where it first served (kill churn without rebalancing returns it there)
  int initial_stage = -1;  ///< the stage it was started on at time 0 (-1: a later joiner)
  int initial_index = -1;  ///< its place among the peers started on initial_stage ("server S.I": I)
  int life = 0;
  uint64_t epoch = 0;     ///< bumped when it dies or leaves a stage
  int stage = -1;         ///< serving (or moving to / joining) this stage
  double settled_at = 0;  ///< when it arrived by a move (-inf: joined; as swarm, only movers cool down)
  /// A mover's rate on its old stage, as predicted here, until measured (NaN: none)
  double carried_rate = std::nan("");
  double busy_s = 0;        ///< seconds handling requests on this stage
  double samples_done = 0;  ///< samples whose gradients it added on this stage
  int64_t accumulated = 0;  ///< samples not yet averaged
  uint64_t step = 0;        ///< optimizer steps of its state
  bool reloading = false;   ///< copying its stage's state again (start_reload)
  // An order from the rebalancer, carried out by the server actor.
  int move_to = -1;
  policy::move_reason move_reason = policy::move_reason::load;
  double predicted_gain = 0;
  double ordered_at = 0;
  /// Trainers' workers waiting on a reply from this life: told `down` when it dies.
  std::vector<std::pair<s4u::Mailbox*, uint64_t>> waiters;
  int64_t served = 0;
  int64_t late = 0;             ///< requests refused past their commit deadline
  policy::admission admission;  ///< its reservations, this life on this stage
  int uploads = 0;              ///< state copies it is sending now
  // Its books (sim/ledger): what it is doing since when, in how many rounds, idle on which stage.
  phase ph = phase::off;
  double phase_since = 0;
  int in_round = 0;
  int idle_stage = -1;
  /// Its all-reduce flows' two ends (sim/platform.cpp): permanent actors, so
  /// that a round's 2 x 625 transfers are neither host-to-host transfers
  /// (SimGrid 3.32 keeps all of those in one list it scans at every
  /// completion: ~9,000 long at 10,000 peers) nor a pair of new actors per
  /// member and round (16 GB).
  std::shared_ptr<flow_end> near_end = std::make_shared<flow_end>(), hub_end = std::make_shared<flow_end>();
};

struct trainer_state {
  int index = 0;
  std::string name;
  s4u::Host* host = nullptr;
  s4u::Host* cpu = nullptr;                   ///< where its own work runs (local: the one shared machine)
  std::vector<policy::stage_router> routers;  ///< one per stage, as one load balancer each
  std::vector<policy::static_pin> pins;       ///< static routing: one per stage
  std::mt19937_64 rng;
  int64_t issued = 0, completed = 0, dropped = 0, retries = 0, reroutes = 0, busy = 0;
  int64_t samples = 0, steps = 0;
  int64_t next_step_samples = 0;
  double step_started = 0;
  uint64_t next_attempt = 1;
  std::vector<work_books> workers;  ///< one per in-flight slot (sim/ledger)
  int64_t verify_requests = 0, verify_disagreed = 0, verify_inconclusive = 0, verify_strikes = 0;
  int64_t forwards = 0;                ///< forward calls answered (verification's share is of these)
  std::vector<int> free_verify_boxes;  ///< mailboxes of finished verifications, for the next (sim/trainer.cpp)
  std::map<std::string, int> agreed;   ///< verifications each server agreed in (--verify-probation)
  int verify_boxes = 0;
  std::vector<double> latency_s;  ///< one-way latency to each peer's host, looked up once (<0: not yet)
};

struct totals {
  int64_t rounds_applied = 0, rounds_failed = 0;
  int64_t moves_load = 0, moves_redundancy = 0, moves_empty = 0, joins = 0, downs = 0, reloads = 0;
  int64_t liar_bans = 0, false_bans = 0;  ///< servers verification banned: lying ones, honest ones
  double optimal_samples = 0;             ///< integral of the best assignment's samples/s over time
  double fluid_samples = 0;
  double alive_peer_seconds = 0;
  // At the end of the warm-up: what the summary subtracts.
  int64_t warm_samples = 0;
  double warm_optimal = 0, warm_fluid = 0;
};

struct world {
  scenario cfg;
  calibration cal;
  std::vector<stage_cost> costs;
  std::vector<double> rebalance_cost;  ///< madds per sample per stage: the rebalancer's cost vector
  std::vector<peer> peers;
  std::vector<trainer_state> trainers;
  std::vector<uint64_t> stage_step;  ///< the stage's position (highest step reached)
  std::vector<bool> round_running;
  std::vector<chaos_action> replayed;  ///< --churn replay: the recorded run's kills, restarts and first joins
  /// Notified when a server takes the stage: trainers with no server to call
  /// wait on it (swarm's load balancers route as soon as a JOIN arrives).
  std::vector<s4u::ConditionVariablePtr> server_joined;
  s4u::MutexPtr joined_mutex;
  std::mt19937_64 rng;
  s4u::Host* coordinator_host = nullptr;
  s4u::Host* coordinator_cpu = nullptr;  ///< local: the one shared machine
  s4u::Host* hub = nullptr;              ///< a host without access link: the far end of all-reduce flows
  double coordinator_backlog_s = 0;      ///< CPU owed for reports since its last tick
  double machine_load = 0;               ///< local: busy fraction of its cores over the last second or so
  // The yardstick (sim/optimal) of the machines up now, integrated into
  // `total` at every change: per-second sampling missed what came and went
  // between ticks, 1.7% of the gap in a run with a failure every 10 s.
  double best_rate = 0, fluid_rate = 0, yardstick_at = 0;
  int alive_now = 0;
  totals total;
  ledger books;  ///< where the gap to the best assignment goes
  /// Verification's charges from every trainer, as swarm's coordinator counts
  /// them (policy/verification.hpp): --verify-strikes ban a server.
  policy::strike_book strikes{3};
  std::ofstream metrics;
  std::chrono::steady_clock::time_point wall_start;
  struct sample {
    double t, tokens_per_s, optimal_tokens_per_s;
  };
  std::vector<sample> timeline;  ///< one per --report-every: the summary's throughput over time

  [[nodiscard]] double now() const { return s4u::Engine::get_clock(); }
  /// One JSON line in swarm's metrics vocabulary, t = simulated seconds.
  void emit(const char* event, std::initializer_list<metrics_sink::field> fields, const char* role = "sim");
  void emit(const char* event, const std::vector<metrics_sink::field>& fields, const char* role = "sim");
  /// Samples completed by all trainers so far.
  [[nodiscard]] int64_t samples() const;
  /// Serving peers of `stage`.
  [[nodiscard]] std::vector<peer*> serving(int stage);
  /// `name` stops serving `stage` (dies or leaves it): every trainer's router
  /// forgets it, and a trainer pinned to it (static routing) retires the
  /// stage's other servers, as swarm's load balancer does.
  void forget(int stage, const std::string& name);
  /// The serving peer of `stage` sending the fewest state copies now (so joiners
  /// spread over a stage's uplinks), or nullptr.
  [[nodiscard]] peer* state_source(int stage, const peer* except);
  /// Integrates the yardstick up to now; `changed`: the machines up changed,
  /// so the best assignment is computed again (start_server, peer_died).
  void yardstick(bool changed);
  /// Compute seconds (calibrated core) a peer needs per sample on `stage`.
  [[nodiscard]] double seconds_per_sample(int stage) const;
};

/// The one world of this process (SimGrid's actors take no context argument).
world& the_world();

// Actors and their entry points (one file each).
/// Spawns p's server on p.host: one of the swarm's first servers on `stage`
/// (nothing to copy), or with stage -1 a join: start-up, placement, state copy.
void start_server(peer& p, int stage);  // sim/server.cpp
/// Has `p`, behind its stage (it joined during a round), copy the stage's
/// state again as swarm's averager orders it: out of rounds meanwhile.
void start_reload(peer& p);                  // sim/server.cpp
void trainer_worker(int trainer, int slot);  // sim/trainer.cpp
void coordinator_main();                     // sim/coordinator.cpp
void churn_main();                           // sim/churn.cpp
/// Where a joining server goes (the rebalancer's placement; home stage when rebalancing is off).
int place(peer& p);  // sim/coordinator.cpp
/// A peer's machine went off: trainers hear `down`, routers forget it.
void peer_died(peer& p, const char* reason);  // sim/churn.cpp
/// Loads of every live server as the rebalancer sees them (one on its way to a stage counts there).
[[nodiscard]] std::vector<policy::server_load> server_loads(world& w);  // sim/coordinator.cpp
/// `p`'s samples per busy second on its stage: measured, else carried there by a move (NaN: neither).
[[nodiscard]] double rate_here(const peer& p);  // sim/coordinator.cpp
/// `p`'s rate on stage `from` (rate_here), as predicted on `to`.
[[nodiscard]] double moved_rate(const world& w, const peer& p, int from, int to);  // sim/coordinator.cpp
/// Moves `bytes` from host to host; true once they arrived, false when
/// `timeout` passed. Blocks the calling actor. Hosts never go off (see
/// peer_died): callers check the peers' epochs to see whether an end died.
bool transfer(s4u::Host* from, s4u::Host* to, double bytes, double timeout);
/// Messages the calling actor sent and has not seen arrive, oldest first.
/// Not detached: SimGrid 3.32 keeps every detached activity in one list and
/// removes each finished one by a linear scan (73% of a 3,000-peer run).
/// Kept by its sender, a message dies with it, as a killed process's unsent
/// bytes do.
using outbox = std::deque<s4u::CommPtr>;
/// Sends `r` to `box` (`bytes` on the wire), first forgetting what arrived.
void send(outbox& out, s4u::Mailbox* box, reply* r, double bytes);
/// Puts `r` in p's queue (after its bytes arrived) and wakes p's server.
void deliver(peer& p, request* r);
/// `r` left its server's queue (taken or dropped): the books count it out.
void unqueue(const request& r);
/// Drops p's queue: its server died or a new one starts.
void clear_queue(peer& p);
/// Writes the summary and ends the process (sim/main.cpp), at --duration.
[[noreturn]] void finish(world& w);
/// Builds hosts, links and the peers' and trainers' records.
void build_platform(world& w);  // sim/platform.cpp

}  // namespace swarm::sim
