#pragma once
// One error enum for the whole project: proto::status (messages/swarm.proto),
// carried as a caf::error of category "swarm" so it survives the wire.

#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>

#include "swarm.pb.h"

namespace swarm {

using errc = proto::status;

constexpr caf::atom_value error_category = caf::atom("swarm");

/// An error of the project's category with a human-readable context.
[[nodiscard]] caf::error make_error(errc code, std::string what);

/// The project code of `err`: CAF's own timeouts and dead-peer errors map to
/// TIMEOUT and PEER_GONE, anything else foreign to INTERNAL.
[[nodiscard]] errc code_of(const caf::error& err);

/// Whether the caller may retry the same work on another peer (timeouts, dead
/// peers, no server) as opposed to a fatal problem with the request itself.
[[nodiscard]] bool is_retryable(const caf::error& err);

/// "WRONG_SHAPE: inputs [8, 64] expected [8, 64, 128]" without an actor system.
[[nodiscard]] std::string describe(const caf::error& err);

/// Registers the "swarm" category so the actor system can render these errors.
void register_error_category(caf::actor_system_config& cfg);

} // namespace swarm
