#pragma once
// rebalancer: decides which server serves which stage (SWARM section 3.2). It
// lives in the coordinator process beside the averager; the coordinator passes
// it every registration and every placement question, the averager every load
// report it accepted (progress reports: seconds busy and samples added since the
// server began serving its stage). It only decides (policy/rebalancing.hpp);
// the server moves itself (actors/stage_server_move.hpp).
//
//   settling --(settle_s after start)--> watching
//   watching: every tick (min(period, 5 s)) measures each server's rate and writes
//             `stage_load`; every period it may order one load move; on a
//             server's join or crash, and every tick, it orders at once a move
//             to a stage that is empty or short of min_replicas (a server
//             stopped on purpose is answered at the next tick).
//   A move is in flight from the order until the server registers on its new
//   stage, dies, or move_timeout_s passes. While one is, only empty stages get
//   another; a mover counts on its new stage already.
//
// Placement: a server started with --stage auto asks where to go before it
// builds anything; the answer counts as a server of that stage (a pending join)
// until it registers or move_timeout_s passes, so servers starting together
// spread out. `enabled` false (--rebalance off): placements only, no moves.
//
// Restart: it keeps nothing. Servers register again (a mover registers on its
// new stage when done); rates are measured anew. Elected (--control): moves
// carry the term and go out only while the lease holds; when the last load
// move was weighed and when each mover arrived (the cooldowns) are recorded in
// etcd (actors/control_records.hpp), and a successor resumes them.

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "actors/control_records.hpp"
#include "actors/leadership.hpp"
#include "base/metrics.hpp"
#include "config/config.hpp"
#include "policy/rebalancing.hpp"
#include "messages/protocol.hpp"

namespace swarm {

struct rebalancer_settings {
  int num_stages = 2;
  std::vector<double> stage_cost;  ///< work per sample of each stage (models/shape/partition.hpp stage_costs)
  /// Its role's section: rebalance (off: place joiners, never move anyone),
  /// rebalance_period_s (load moves at most once per period) and the moves' rule.
  coordinator_config coordinator;
  double move_timeout_s = 120;  ///< an ordered move or a placement not registered by then is forgotten, seconds
  /// No move before this long after start: servers of a fresh (or restarted)
  /// swarm are still registering, and a stage not heard from yet is not empty.
  double settle_s = 10;
  /// Busy seconds a rate is measured over (at least): shorter windows on shared
  /// cores are too noisy to compare servers by.
  double min_busy_s = 1.0;
  std::shared_ptr<leadership> leader;       ///< elected: term, lease, record (null: the one coordinator)
  std::optional<rebalancer_record> resume;  ///< the predecessor's cooldowns
};

struct rebalancer_state {
  static inline const char* name = "rebalancer";
  using clock = std::chrono::steady_clock;

  struct server {
    caf::actor handle;
    int stage = 0;
    double settled_at = 0;       ///< arrived on its stage by a move (rebalancer seconds); -inf for a newcomer
    double rate = std::nan("");  ///< samples/s per busy second on its stage; NaN: not measured yet
    // Cumulative figures of its current stage (progress_report), and where the measuring window began.
    double busy_s = 0;
    uint64_t committed = 0;
    double window_busy_s = 0;
    uint64_t window_committed = 0;
    std::optional<int> moving_to;  ///< ordered to move there, not arrived yet
    double move_sent = 0;
  };

  /// A server placed on a stage that has not registered yet; `node` asked for
  /// it (one hold per process: a stranger's made-up ids replace each other).
  struct hold {
    int stage = 0;
    double when = 0;
    caf::node_id node;
  };
  /// Holds at most: joiners arriving at once, not a stranger's flood of ids.
  static constexpr size_t max_placed = 64;

  rebalancer_settings cfg;
  std::shared_ptr<metrics_sink> metrics;
  std::map<std::string, server> servers;  ///< live servers by id
  std::map<std::string, hold> placed;     ///< by id: placed, not registered yet
  clock::time_point started;
  double last_load_check = 0;  ///< when load moves were last considered
  double started_unix = 0;     ///< `started` as unix seconds: records hold unix times
  rebalancer_record recorded;  ///< the cooldowns as last recorded
};

[[nodiscard]] rebalancer_actor::behavior_type rebalancer(rebalancer_actor::stateful_pointer<rebalancer_state> self,
                                                         rebalancer_settings cfg,
                                                         std::shared_ptr<metrics_sink> metrics);

}  // namespace swarm
