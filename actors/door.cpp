#include "actors/door.hpp"

#include <caf/all.hpp>

#include "base/clock.hpp"
#include "messages/local.hpp"
#include "net/peer_roles.hpp"

namespace swarm {

door_actor::behavior_type door(door_actor::stateful_pointer<door_state> self, policy::admission_config cfg,
                               caf::actor_addr server) {
  self->state.admission = policy::admission{cfg};
  self->state.server = std::move(server);
  return {
      [self](reserve_atom) -> uint64_t {
        if (!sent_as(self, role_trainer, "door", "reservation"))
          return 0;  // as when full: the trainer sends without a ticket
        return self->state.admission.grant(monotonic_seconds()).value_or(0);
      },
      [self](release_atom, uint64_t ticket) {
        if (sent_by(self, self->state.server, "door", "server", "release"))
          self->state.admission.done(ticket);
      },
  };
}

}  // namespace swarm
