#pragma once
// load_balancer: one per stage per trainer process. Knows the stage's servers
// (JOINs from the coordinator, each connected to directly and monitored), picks
// one for every request and relays the reply; on failure it re-sends the request
// itself, so a dead or slow server costs only the work in flight.
//
//   waiting_for_servers <--(no eligible server / one joins or a ban ends)--> dispatching
//
// Both states accept requests; without an eligible server they queue until one
// is (checked on every join and every second) or no_server_wait_s passes
// (NO_SERVER), with one log line per stall, not one per request.
//
// Routing (swarm): policy::stage_router, interleaved weighted round-robin over
// measured throughput. Routing (static): one pinned server per stage, as
// GPipe-style pipelines; when it dies requests wait for a replacement to join.
//
// Failures of one attempt:
//   server down (monitor) -> every request pending there is re-sent at once
//                            (CAF 0.17 would only fail them at their deadline);
//   server leaving (LEAVE from the coordinator, or a LEAVING reply: it moves to
//                   another stage) -> no new requests for it; what it already
//                   holds completes or comes back LEAVING and is re-sent, no ban;
//   deadline passed       -> re-sent to another server, no ban (`timeout` event);
//   retryable error       -> server banned with backoff (`ban`), re-sent;
//   fatal error (bad request) -> returned to the trainer, which drops the microbatch.
// Before an attempt it asks the server's door for room (actors/door.hpp,
// policy::admission), unless the request was refused busy_retries times
// already: busy -> another server, no ban, not an attempt; no answer (its
// process stands still or is gone) -> as a timeout or a down of that server.
// After max_attempts attempts the last error goes back to the trainer.
//
// Protocol with the trainer (same process), replies (parts, server id, attempts);
// requests and replies travel as parts (messages/wire.hpp: take_tensor_data), so
// their tensors' bytes are never copied into or out of a serialized message:
//   (forward_atom, request parts, samples)
//   (backward_atom, request parts, samples, preferred server id)
// From the trainer node after a coordinator restart: coordinator_changed
// (messages/protocol.hpp). Membership updates are taken only from the
// coordinator subscribed to.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "base/metrics.hpp"
#include "config/config.hpp"
#include "policy/attempt.hpp"
#include "policy/routing.hpp"
#include "policy/verification.hpp"
#include "net/bulk.hpp"
#include "net/chunks.hpp"
#include "messages/protocol.hpp"

namespace swarm {

struct load_balancer_config {
  /// Its role's section: deadlines, no-server wait, commit grace, the router's
  /// knobs and the attempts' (policy::attempt_config).
  trainer_config trainer;
  net_config net;  ///< chunk_bytes, bulk_min_bytes
  int stage = 0;
  std::string trainer_id;    ///< for metrics
  uint64_t config_hash = 0;  ///< sent with the subscription
  std::string tokenizer;     ///< sent with it too: named if the coordinator refuses
  /// The bulk data plane (net/bulk.hpp): requests of at least
  /// net.bulk_min_bytes go over it, and replies may come over it; null = CAF only.
  std::shared_ptr<bulk_endpoint> bulk;
  uint64_t seed = 1;  ///< tie-breaks and static pinning
  /// Counts the busy answers of doors, for the trainer's step events (one
  /// counter shared by a trainer's balancers, read by the trainer); null: not counted.
  std::shared_ptr<std::atomic<int64_t>> busy_answers;
  /// Verified work's counts, shared the same way; null: not counted.
  std::shared_ptr<policy::verify_counters> verified;
  bool last_stage = false;  ///< its stage is the last: verified with `verify` forwards (no gradient added)
};

struct load_balancer_state {
  static inline const char* name = "load_balancer";
  using clock = std::chrono::steady_clock;

  struct request {
    std::string head;                        ///< the encoded request, its tensors' bytes moved to `data`
    std::shared_ptr<const bulk_parts> data;  ///< kept for a retry, shared with frames in flight
    int64_t bytes = 0;                       ///< head and data
    caf::response_promise promise;
    clock::time_point queued_at;  ///< when it started waiting for a server; zero while not waiting
    /// The task and its attempts as the planner sees them: forward or
    /// backward, samples, the forward's server (backward), the servers that
    /// failed it and those that answered busy.
    policy::attempt_history history;
    std::string failed_reason;  ///< why the previous attempt failed (for `reroute`)
    caf::error last_error;
    uint64_t ticket = 0;  ///< the chosen server's grant for this attempt; 0: none
    /// A verification's request (its key in `verifying`): its answer is
    /// compared, not delivered; its history avoids the servers already asked.
    uint64_t verification = 0;
    // The attempt in flight:
    std::string server_id;
    clock::time_point sent_at;
  };

  load_balancer_config cfg;
  std::shared_ptr<metrics_sink> metrics;
  std::map<std::string, stage_actor> servers;  ///< connected, live, by server id
  std::set<std::string> leaving;               ///< in `servers`, left for another stage: never chosen
  std::set<std::string> connecting;            ///< JOINed, connection pending
  /// JOINed, but the connection failed (a starved or restarting peer): dialed
  /// again on the tick after `retry_at`, waiting twice as long each time (at
  /// most 60 s), until it connects or the coordinator says it left or died.
  struct unreachable_server {
    std::string bytes;  ///< its JOIN, encoded
    clock::time_point retry_at;
    double wait_s = 2.0;
  };
  std::map<std::string, unreachable_server> unreachable;
  std::map<std::string, door_actor> doors;  ///< the servers' doors, once each said which
  std::map<uint64_t, request> asking;       ///< waiting for a door's answer, by ask id
  std::map<uint64_t, request> in_flight;    ///< dispatched, by attempt id
  std::deque<request> waiting;              ///< no eligible server yet
  policy::stage_router router;
  std::mt19937_64 rng;
  policy::static_pin pin;  ///< static routing: the one server used
  chunk_assembler chunks;
  bulk_inbox inbox;  ///< replies from the bulk connection, paired with their messages
  uint64_t next_transfer = 0;
  uint64_t next_attempt = 0;
  bool stalled = false;                  ///< a stall was logged and has not ended
  caf::actor_addr coordinator;           ///< the coordinator subscribed to: membership comes only from it
  coordinator_actor coordinator_handle;  ///< the same, to report the servers verification caught

  /// One forward being verified (issue #47): the request again, and the
  /// answers so far (the first server's, its verifier's, a referee's).
  struct answer {
    std::string server;
    uint64_t step = 0;          ///< the server_step it claimed
    float loss = 0;             ///< last stage
    std::vector<float> values;  ///< outputs, or on the last stage input_grad
  };
  struct verification {
    std::string head;  ///< the request as first sent (with `verify` set on the last stage)
    std::shared_ptr<const bulk_parts> data;
    int64_t bytes = 0;
    double samples = 0;
    uint64_t microbatch = 0;
    std::vector<answer> answers;
  };
  std::map<uint64_t, verification> verifying;
  uint64_t next_verification = 0;
  policy::strike_book strikes{3};
  std::set<std::string> caught;       ///< banned for wrong answers: never chosen, JOINs ignored
  std::map<std::string, int> agreed;  ///< verifications each server agreed in (--verify-probation)
};

/// Spawns with the coordinator to subscribe to.
[[nodiscard]] caf::behavior load_balancer(caf::stateful_actor<load_balancer_state>* self, load_balancer_config cfg,
                                          coordinator_actor coordinator, std::shared_ptr<metrics_sink> metrics);

/// One forward through `balancer` from a start-up thread (blocking, through a
/// scoped actor in `sys`), as a trainer would send it: the reply, or why none
/// came within `deadline`. swarm --role generate asks its logits so.
[[nodiscard]] caf::expected<proto::forward_reply> forward_blocking(caf::actor_system& sys, const caf::actor& balancer,
                                                                   proto::forward_request req, int64_t samples,
                                                                   caf::timespan deadline);

}  // namespace swarm
