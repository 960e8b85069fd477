#pragma once
// The conversations a process has with the coordinator from its start-up
// thread (blocking, through a scoped actor): a server asking where to serve
// (--stage auto) and registering its stage server (again after a coordinator
// restart), any node asking whether the coordinator answers, --role status
// asking for its screen. Kept beside the actors whose protocol they speak, so
// that apps/ only decides what to do with the answers.

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

/// Whether `coord` answers a harmless request (its averager's handle) within `timeout`.
[[nodiscard]] bool answers(caf::actor_system& sys, const coordinator_actor& coord, caf::timespan timeout);

/// The coordinator's status screen (--role status), or why it did not answer within `timeout`.
[[nodiscard]] caf::expected<std::string> status_screen(caf::actor_system& sys, const coordinator_actor& coord,
                                                       caf::timespan timeout);

}  // namespace swarm
