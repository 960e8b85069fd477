#pragma once
// stage_server: serves one pipeline stage to every trainer of the swarm.
//
//   spawned --> serving --(exit message)--> done
//
// serving: forward and backward requests run on the stage_worker one at a time
// (the actor is spawned detached, so its compute blocks only its own thread).
// Each request is decoded and validated at the boundary; a bad one gets an error
// reply and a log line and leaves the parameters untouched. Once batch_size
// samples of gradients are accumulated the server applies an optimizer step
// (stage-wide averaging replaces this local step in a later issue).

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "actors/metrics.hpp"
#include "config/config.hpp"
#include "messages/chunks.hpp"
#include "messages/protocol.hpp"
#include "models/stage_worker.hpp"

namespace swarm {

/// What a stage server needs to know; built from app_config by the server role.
struct stage_server_config {
  std::string server_id;       ///< unique name in logs and metrics, e.g. "s1.0"
  int64_t batch_size = 64;     ///< samples accumulated before each optimizer step
  int64_t chunk_bytes = 4 << 20;  ///< largest reply payload per message, bytes
};

struct stage_server_state {
  static inline const char* name = "stage_server";
  stage_server_config cfg;
  std::shared_ptr<stage_worker> worker;
  std::shared_ptr<metrics_sink> metrics;
  chunk_assembler chunks;
  std::set<caf::actor_addr> chunk_senders;  ///< monitored so their unfinished payloads can be dropped
  uint64_t next_transfer = 0;
  int64_t served = 0;    ///< requests answered successfully
  int64_t rejected = 0;  ///< requests answered with an error
};

[[nodiscard]] stage_actor::behavior_type stage_server(stage_actor::stateful_pointer<stage_server_state> self,
                                                      stage_server_config cfg, std::shared_ptr<stage_worker> worker,
                                                      std::shared_ptr<metrics_sink> metrics);

} // namespace swarm
