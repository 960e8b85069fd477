#pragma once
// round_peer: a stage server's part in its stage's averaging rounds (the
// butterfly all-reduce, policy/butterfly.hpp), on its own thread beside
// the server's, which is busy computing requests. Each stage server spawns one,
// linked, and registers it with the coordinator; rounds' pieces, exclusions and
// HELLOs go to the peers, never through a server's mailbox, where they would
// wait behind the requests queued there (a round then took ~0.3 s of a 1.2 s
// step on config/small, and the samples computed meanwhile were a step stale).
//
//   idle --(round from its server: the gradient handed over)--> exchanging
//   exchanging --(every shard reduced)--> done: outcome + mean gradient to the server
//              (its parts wait for the reply check's window, when there is one)
//              --(excluded / deadline / a newer round / abandoned)--> given up: outcome to the server
//   done / given up: the exchange is kept until the next round begins, so
//   members still finishing can repair from it.
//
// exchanging: the members it must dial (lower ids dial higher ones and say
// HELLO) are linked first; pieces that overtake the round's start wait (a few
// rounds' worth, bounded). At round_clock::report x timeout a peer not done
// tells the averager whom it waits for; at timeout it gives up. The server
// applies the mean gradient (the optimizer step) when the outcome reaches it,
// and reports round_done to the averager (actors/stage_server_averaging.hpp).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>

#include "policy/butterfly.hpp"
#include "base/metrics.hpp"
#include "messages/protocol.hpp"
#include "messages/local.hpp"
#include "net/bulk.hpp"
#include "swarm.pb.h"

namespace swarm {

/// What a round peer needs of its server's config (stage_server_config).
struct round_peer_config {
  std::string server_id;
  std::string compression = "fp16";  ///< none | fp16 | blockwise8: how its pieces travel
  std::shared_ptr<bulk_endpoint> bulk;
  int64_t bulk_min_bytes = 64 << 10;
  double bulk_wait_s = 60;
  /// Test hooks (0 = never): hang in the hang_after-th round, after sending its
  /// parts; give the fail_after-th round it holds gradient in up before sending any.
  int64_t hang_after = 0;
  int64_t fail_after = 0;
};

struct round_peer_state {
  static inline const char* name = "round_peer";

  struct exchange_round {
    uint64_t id = 0;
    uint64_t number = 0;  ///< within its stage, for logs
    uint32_t stage = 0;
    int64_t samples = 0;                    ///< in this member's gradient
    std::vector<round_peer_actor> members;  ///< rank order
    std::vector<std::string> ids;           ///< rank order
    std::unique_ptr<policy::butterfly_round> exchange;
    int64_t bytes_sent = 0, bytes_received = 0;  ///< encoded piece values, as they crossed the wire
    bool finished = false;                       ///< outcome sent; kept to help others repair
    std::set<int> unready;                       ///< members not linked directly yet (being dialed, or no HELLO yet)
    bool begun = false;                          ///< pieces flow (every member linked or gone)
    std::vector<int> gone_early;                 ///< ranks gone before it began, told to the exchange then
    /// A microbatch added provisionally (stage_server.hpp reply_check): no part
    /// leaves before window_end, nor at all when the process stood still
    /// `slack` or longer since sent_at (then the reply may have come late).
    std::chrono::steady_clock::time_point sent_at{}, window_end{};
    double slack_s = 0;
    bool start_timed = false;
  };

  round_peer_config cfg;
  std::shared_ptr<metrics_sink> metrics;
  stage_actor server;
  averager_actor averager;  ///< from the last round: whom to tell what it waits for
  std::optional<exchange_round> round;
  std::map<uint64_t, std::vector<std::pair<caf::actor_addr, proto::allreduce_piece>>>
      early_pieces;  ///< rounds not begun here yet
  std::map<uint64_t, std::set<caf::actor_addr>> early_hellos;
  std::set<caf::actor_addr> monitored;  ///< other members' peers, so a round learns of their death (once each)
  bulk_inbox inbox;
  int64_t rounds_seen = 0;           ///< for the test hooks
  int64_t rounds_with_gradient = 0;  ///< of them, those it held gradient in
};

/// The round peer's own timers on a round: local (messages/local.hpp), so in no interface and from no peer.
namespace round_peer_local {
struct window_over {  ///< the provisional microbatch's reply window closed: the exchange may begin
  uint64_t round = 0;
};
struct report_due {  ///< policy::round_clock::report: tell the averager whom it waits for
  uint64_t round = 0;
};
struct round_end {  ///< policy::round_clock::end: give the round up
  uint64_t round = 0;
};
}  // namespace round_peer_local

[[nodiscard]] round_peer_actor::behavior_type round_peer(round_peer_actor::stateful_pointer<round_peer_state> self,
                                                         round_peer_config cfg, std::shared_ptr<metrics_sink> metrics,
                                                         stage_actor server);

}  // namespace swarm

SWARM_LOCAL_MESSAGE(swarm::round_peer_local::window_over)
SWARM_LOCAL_MESSAGE(swarm::round_peer_local::report_due)
SWARM_LOCAL_MESSAGE(swarm::round_peer_local::round_end)
