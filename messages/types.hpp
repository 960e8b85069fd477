#pragma once
// The one registration of what crosses an actor boundary: the typed actor
// handles sent inside messages and the project's error category. Every actor
// system of the binary and of the tests is configured through it, so a type
// added to the protocol is registered everywhere or nowhere.

#include <caf/actor_system_config.hpp>

namespace swarm {

/// Adds the message types and the "swarm" error category to `cfg`.
void register_types(caf::actor_system_config& cfg);

}  // namespace swarm
