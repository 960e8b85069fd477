#pragma once
// coordinator: the membership registry of a swarm.
//
//   spawned --> running --(exit message)--> done
//
// running: servers register (stage, host, port, model hash) and are monitored;
// trainers' load balancers subscribe to a stage and receive a JOIN for every
// server of it, present and future, and a DOWN when the coordinator sees one go.
// Load balancers monitor their servers themselves too, so a DOWN from here is
// a second opinion, not the only signal. Every registration is passed on to the
// averaging coordinator (actors/averager.hpp), whose handle servers ask for, and
// to the rebalancer (actors/rebalancer.hpp), which answers placement questions.
// A server that moves to another stage says it leaves its old one: subscribers
// of that stage get a LEAVE (requests it already holds still complete), and it
// registers again for the new stage when it is ready.
//
// Trainers report every charge their verification (issue #47) makes against a
// server, with its evidence. Charges are counted here over all trainers (each
// trainer alone sees a given server rarely in a large swarm: swarm-sim at
// 1,000 peers and 128 trainers banned 9 of 50 liars in an hour when each
// trainer counted alone); at --verify-strikes the server leaves its stage (a
// LEAVE to subscribers, out of the averager's rounds) and is refused for
// --ban-cooldown. So that one hostile trainer cannot empty a stage, the
// process whose report completes a ban may have banned at most a third of a
// stage's servers (at least one) at a time; a ban that leaves a stage without
// servers says so in an error line and its event.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "actors/averager.hpp"
#include "actors/leadership.hpp"
#include "base/metrics.hpp"
#include "observe/status_board.hpp"
#include "actors/rebalancer.hpp"
#include "messages/protocol.hpp"
#include "swarm.pb.h"

namespace swarm {

struct coordinator_settings {
  int num_stages = 2;                   ///< stages of the swarm's model
  uint64_t config_hash = 0;             ///< model_config::hash() every peer must match
  std::string tokenizer;                ///< model_config::tokenizer_label(): named in refusals
  averager_settings averaging;          ///< the averaging coordinator it spawns (num_stages is copied in)
  rebalancer_settings rebalancing;      ///< the rebalancer it spawns (num_stages is copied in)
  std::shared_ptr<status_board> board;  ///< answers status requests; fed by the metrics sink's observer (may be null)
  /// Strikes (verification_evidence from any trainer, issue #47) that ban a
  /// server: the trainers' --verify-strikes, counted here over all of them.
  int verify_strikes = 3;
  /// Elected through etcd (--control): its term and lease, shared with the
  /// averager and the rebalancer (copied into theirs); null: the one coordinator.
  std::shared_ptr<leadership> leader;
};

struct coordinator_state {
  static inline const char* name = "coordinator";
  coordinator_settings cfg;
  std::shared_ptr<metrics_sink> metrics;
  std::map<caf::actor_addr, proto::register_server> servers;               ///< live servers by actor
  std::map<caf::actor_addr, std::pair<caf::actor, uint32_t>> subscribers;  ///< load balancer -> stage
  /// Trainer id -> the actor that reports under it while it lives: a stranger
  /// can neither speak for a trainer nor grow the status board without bound.
  std::map<std::string, caf::actor_addr> trainers;
  static constexpr size_t max_trainers = 256;
  std::set<caf::actor_addr> evicted;  ///< servers its averager evicted: never admitted again
  /// Servers banned on a trainer's verification evidence (issue #47), by id:
  /// refused until `until` (unix seconds), for the reason given.
  struct ban {
    double until = 0;
    uint32_t stage = 0;
    std::string reporter;  ///< the reporting trainer's node
    std::string why;
  };
  std::map<std::string, ban> banned;
  std::map<std::string, int> strikes;  ///< verification's charges per server id, all trainers, until a ban
  averager_actor averaging;            ///< spawned and linked: it lives and dies with this actor
  rebalancer_actor rebalancing;        ///< spawned and linked, like the averager
};

[[nodiscard]] coordinator_actor::behavior_type coordinator(coordinator_actor::stateful_pointer<coordinator_state> self,
                                                           coordinator_settings cfg,
                                                           std::shared_ptr<metrics_sink> metrics);

/// The JOIN or DOWN update that tells subscribers about `reg`.
[[nodiscard]] proto::membership_update membership_of(const proto::register_server& reg,
                                                     proto::membership_update::change kind);

}  // namespace swarm
