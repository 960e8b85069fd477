#pragma once
// The project's errors (base/error.hpp) as CAF errors of category "swarm", so
// they survive the wire: the code travels as its number, the sentence as the
// error's context. The numbers are proto::status's (messages/swarm.proto).

#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "base/error.hpp"

namespace swarm {

constexpr caf::atom_value error_category = caf::atom("swarm");

/// An error of the project's category with a human-readable context.
[[nodiscard]] caf::error make_error(errc code, std::string what);

/// `err` as a CAF error (none for OK): where a lower layer's error enters an actor.
[[nodiscard]] caf::error to_caf(const error& err);
template <class T>
[[nodiscard]] caf::expected<T> to_caf(result<T>&& r) {
  if (!r)
    return to_caf(r.error());
  return std::move(*r);
}

/// The project code of `err`: CAF's own timeouts and dead-peer errors map to
/// TIMEOUT and PEER_GONE, anything else foreign to INTERNAL.
[[nodiscard]] errc code_of(const caf::error& err);

/// Whether an actor that went down with `reason` was stopped on purpose (its
/// process asked to stop: user_shutdown, or it finished: normal), not lost. A
/// clean stop is reported as one: an info line, no failure event.
[[nodiscard]] bool stopped_on_purpose(const caf::error& reason);

/// is_retryable(code_of(err)).
[[nodiscard]] bool is_retryable(const caf::error& err);

/// "WRONG_SHAPE: inputs [8, 64] expected [8, 64, 128]" without an actor system.
[[nodiscard]] std::string describe(const caf::error& err);

/// Registers the "swarm" category so the actor system can render these errors.
void register_error_category(caf::actor_system_config& cfg);

}  // namespace swarm
