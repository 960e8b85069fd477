#include "actors/door.hpp"

#include <caf/all.hpp>

#include "base/clock.hpp"

namespace swarm {

door_actor::behavior_type door(door_actor::stateful_pointer<door_state> self, policy::admission_config cfg) {
  self->state.admission = policy::admission{cfg};
  return {
      [self](reserve_atom) -> uint64_t { return self->state.admission.grant(monotonic_seconds()).value_or(0); },
      [self](release_atom, uint64_t ticket) { self->state.admission.done(ticket); },
  };
}

}  // namespace swarm
