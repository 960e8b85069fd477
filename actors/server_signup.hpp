#pragma once
// A server process's conversations with the coordinator before it serves: where
// to serve (--stage auto) and registering its stage server (again after a
// coordinator restart). Blocking calls from the process's start-up thread, kept
// beside the actors whose protocol they speak so that apps/ only decides what
// to do with the answers.

#include <string>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "config/config.hpp"
#include "messages/protocol.hpp"
#include "swarm.pb.h"

namespace swarm {

/// Asks the coordinator where server `server_id` should go; its answer or why none.
[[nodiscard]] caf::expected<proto::placement> ask_placement(caf::actor_system& sys, const coordinator_actor& coord,
                                                            const std::string& server_id, const model_config& model);

/// Has `server` (re)register with the coordinator as `reg` says; the refusal, if any.
[[nodiscard]] caf::error register_with(caf::actor_system& sys, const coordinator_actor& coord,
                                       const proto::register_server& reg, const stage_actor& server);

}  // namespace swarm
