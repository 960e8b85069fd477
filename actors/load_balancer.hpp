#pragma once
// load_balancer: one per stage per trainer process. Knows the stage's servers
// (JOINs from the coordinator, each connected to directly), picks one for every
// request and relays the reply.
//
//   waiting_for_servers <--(last server down / first server up)--> dispatching
//
// Both states accept requests; without a server they queue until one joins or
// no_server_wait_s passes (NO_SERVER). Every request to a server carries a
// deadline, and when a server goes down the balancer fails the requests pending
// there itself (PEER_GONE) at once: CAF 0.17 would only fail them at the deadline.
// Retrying is the caller's decision (is_retryable()).
//
// Protocol with the trainer (same process):
//   (forward_atom, request bytes) -> (reply bytes, id of the server that answered)
//   (backward_atom, request bytes, preferred server id) -> (reply bytes, server id)

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/metrics.hpp"
#include "messages/chunks.hpp"
#include "messages/protocol.hpp"

namespace swarm {

struct load_balancer_config {
  int stage = 0;
  uint64_t config_hash = 0;            ///< sent with the subscription
  double forward_timeout_s = 30.0;     ///< deadline of one forward at a server, seconds
  double backward_timeout_s = 75.0;    ///< deadline of one backward at a server, seconds
  double no_server_wait_s = 600.0;     ///< how long a request may wait for any server, seconds
  int64_t chunk_bytes = 4 << 20;       ///< largest request payload per message, bytes
};

struct load_balancer_state {
  static inline const char* name = "load_balancer";
  using clock = std::chrono::steady_clock;

  struct server {
    std::string id;
    stage_actor handle;
    int in_flight = 0;
  };
  struct request {
    bool forward = true;
    std::string payload;
    std::string preferred;  ///< server to use if it is live (backward: the forward's server)
    caf::response_promise promise;
    clock::time_point queued_at;
    std::string server_id;  ///< where it was sent, once dispatched
  };

  load_balancer_config cfg;
  std::shared_ptr<metrics_sink> metrics;
  std::vector<server> servers;           ///< connected, live
  std::set<std::string> connecting;      ///< JOINed, connection pending
  std::map<uint64_t, request> in_flight; ///< dispatched, by request id
  std::deque<request> waiting;           ///< no server yet
  chunk_assembler chunks;
  uint64_t next_transfer = 0;
  uint64_t next_request = 0;
  uint64_t rotation = 0;
};

/// Spawns with the coordinator to subscribe to.
[[nodiscard]] caf::behavior load_balancer(caf::stateful_actor<load_balancer_state>* self, load_balancer_config cfg,
                                          coordinator_actor coordinator, std::shared_ptr<metrics_sink> metrics);

} // namespace swarm
