#pragma once
// averager: the averaging coordinator of a swarm (SWARM section 5). It lives in
// the coordinator process; the coordinator forwards every registration to it.
// It only decides; the gradients go from server to server (butterfly, see
// policy/butterfly.hpp), never through here.
//
// Per stage:
//   idle --(servers at the stage's step hold target_batch_size samples)--> averaging
//   averaging --(every member reported or was excluded)--> idle
//
// averaging: members are the eligible servers in id order (policy::plan_round).
// A member that dies or gives up is excluded at once (round_exclude to every
// member, which the members treat like its death). On policy::round_clock (in
// multiples of --averaging-timeout): members not done at `report` say whom they
// wait for (round_waiting, logged); at `exclude` the averager excludes the
// members that did not say (hung) and does not choose them again until they
// report. Members that all answer but still cannot finish (a slow link) give up
// at `end`, when the round ends whatever happened: nobody steps, so nobody differs.
// At the end the stage moves to the majority result (step, hash); members with
// another result, and any server behind the stage, are told to reload the state
// of an up-to-date server (`reload` event); one order at a time per server,
// repeated when the server reports it dealt with the last (or after timeout_s).
//
// Batch size: a round takes what its members hold when it reaches them, which
// overshoots the target by what arrived meanwhile. The overshoot is handed to
// the next step: the next round starts that much earlier (owed, below), so steps
// average target_batch_size samples, as in local training.
//
// Leaving: a server that moves to another stage (actors/rebalancer.hpp) is
// forgotten like a dead one. When no live server holds a trained stage's state
// any more (its last holder died or left), the position is dropped
// (`stage_lost`, with the step that was lost) and the next server to report
// sets it afresh.
//
// Restart: it keeps nothing on disk. Servers register again with a new
// coordinator and report their step and hash, from which stage positions are
// rebuilt (the (step, hash) most servers report, policy::reported_position;
// no round starts until every server that registered has reported, or
// settle_s passed); a round in flight when it died finishes among the servers
// themselves. From its first round on, only rounds move a stage: a server
// reporting a step no round made is one to reload, not the stage's position.
//
// The majority decides (policy::majority): a round moves its stage to the most
// common result one step on. A member whose result differs from a strict
// majority of its round's twice in a row is evicted (`server_evicted`): out of
// its stage's rounds, and its coordinator drops it from membership.
//
// Elected (--control, actors/leadership.hpp): every order carries the term and
// is sent only while the lease holds. Each stage's position and servers are
// recorded in etcd as they change (actors/control_records.hpp); a successor
// starts from them (`resume`), and a stage whose recorded servers have all
// reported again needs no settle time: its first round can start at once.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "actors/control_records.hpp"
#include "actors/leadership.hpp"
#include "base/metrics.hpp"
#include "config/config.hpp"
#include "policy/averaging.hpp"
#include "messages/local.hpp"
#include "messages/protocol.hpp"

namespace swarm {

struct averager_settings {
  int num_stages = 2;
  int64_t target_batch_size = 64;    ///< samples per stage-wide optimizer step
  coordinator_config coordinator;    ///< its role's section: averaging_timeout_s (see "averaging" above)
  int64_t piece_elements = 4 << 20;  ///< floats per all-reduce message (net.chunk-bytes / 4)
  /// No round starts in the first settle_s after the averager starts (unless
  /// every server of the stage reported step 0: a fresh swarm), nor while a
  /// server that registered less than this ago has not reported yet: after a
  /// restart every server must be heard before the stage's position is taken
  /// from the highest step.
  double settle_s = 3.0;
  std::shared_ptr<leadership> leader;               ///< elected: term, lease, record (null: the one coordinator)
  std::vector<std::optional<stage_record>> resume;  ///< per stage, what the predecessor recorded (may be empty)
};

struct averager_state {
  static inline const char* name = "averager";
  using clock = std::chrono::steady_clock;

  struct server {
    caf::actor handle;
    caf::actor peer;  ///< its round peer: round_begin lists these, exclusions go to them
    uint32_t stage = 0;
    std::string endpoint;  ///< "host:port" it published
    policy::member_view view;
    clock::time_point joined{};
    uint64_t reloads = 0;         ///< its count of reload orders dealt with (progress_report.reloads)
    bool reload_pending = false;  ///< ordered, and `reloads` has not moved since
    clock::time_point reload_sent{};
    uint64_t reload_step = 0;  ///< the stage's step the last order was for
    int dissents = 0;          ///< rounds in a row its result differed from a strict majority
    /// Numbers of the stage's rounds (its last policy::outlier_window) in which
    /// a majority named it an outlier (centered-clip).
    std::deque<uint64_t> outlier_rounds;
    bool agreed = false;  ///< its last round result was the majority's: a reload source first
  };
  struct round {
    uint64_t id = 0;
    uint64_t number = 0;  ///< per stage, from 1: what logs show (ids are 15 digits)
    uint64_t step = 0;
    std::vector<caf::actor_addr> members;      ///< rank order
    std::vector<std::string> ids;              ///< rank order
    std::map<caf::actor_addr, bool> finished;  ///< member -> applied
    std::map<caf::actor_addr, policy::stage_position> results;
    std::map<caf::actor_addr, int64_t> taken;  ///< samples of the gradient each member handed in
    std::set<caf::actor_addr> excluded;
    std::set<caf::actor_addr> answered;                         ///< sent round_waiting: alive, just waiting
    std::map<std::string, std::set<caf::actor_addr>> named_by;  ///< member id -> the members naming it an outlier
    clock::time_point started;
  };
  struct stage {
    policy::stage_position position;
    std::optional<round> running;
    int64_t owed = 0;  ///< samples earlier rounds took beyond the target; the next round starts this much earlier
    double grad_norm_sq = 0;  ///< its mean gradient's squared norm at its last applied step (the others' clip uses it)
    uint64_t rounds_started = 0;
    /// When maybe_start's own timer fires (it waits for the settle time, a
    /// server's first report or one catching up, which may never call again).
    std::optional<clock::time_point> recheck_at;
    std::vector<std::string> resumed_members;  ///< the predecessor's servers: once all reported, no settle wait
    bool settled = false;                  ///< past its settle wait (settle_s, a fresh stage, or all resumed reported)
    std::optional<stage_record> recorded;  ///< what was last recorded in etcd
    /// Set while the position comes from the servers' reports (at start, and
    /// after the state was lost), from at or past this; unset once a round moved it.
    std::optional<policy::stage_position> voting_from = policy::stage_position{};
  };

  averager_settings cfg;
  std::shared_ptr<metrics_sink> metrics;
  rebalancer_actor rebalancing;  ///< gets every progress report accepted here (its load figures)
  std::map<caf::actor_addr, server> servers;
  std::set<caf::actor_addr> evicted;  ///< servers evicted for their results: never joined again
  caf::actor coordinator;             ///< who sends joins (its own process): told of evictions
  std::vector<stage> stages;
  uint64_t next_round = 0;
  clock::time_point started;
};

/// The averager's own timers: local (messages/local.hpp), so in no interface and from no peer.
namespace averager_local {
struct recheck {  ///< maybe_start again (stage_state::recheck_at)
  uint32_t stage = 0;
};
struct exclude_due {  ///< policy::round_clock::exclude into `round`: members that said nothing are excluded
  uint32_t stage = 0;
  uint64_t round = 0;
};
struct round_end {  ///< policy::round_clock::end: the round finishes with what it has
  uint32_t stage = 0;
  uint64_t round = 0;
};
}  // namespace averager_local

[[nodiscard]] averager_actor::behavior_type averager(averager_actor::stateful_pointer<averager_state> self,
                                                     averager_settings cfg, std::shared_ptr<metrics_sink> metrics,
                                                     rebalancer_actor rebalancing);

}  // namespace swarm

SWARM_LOCAL_MESSAGE(swarm::averager_local::recheck)
SWARM_LOCAL_MESSAGE(swarm::averager_local::exclude_due)
SWARM_LOCAL_MESSAGE(swarm::averager_local::round_end)
