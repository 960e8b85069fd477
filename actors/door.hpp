#pragma once
// door: a stage server's admission desk, one per server, in its process and
// linked to it. The server computes on its own thread and reads its mailbox
// only between requests, so a reservation asked of the server itself would
// wait out the compute in progress; the door answers at once.
//
//   open (one state): reserve -> ticket or 0 (busy) by policy::admission;
//                     release(ticket) from its server when that request is over
//                     (from anyone else refused: tickets are sequential, so a
//                     stranger could otherwise free every grant).
//
// A stranger that holds every grant makes trainers send without asking after
// their busy retries (trainer --busy-retries): it slows routing, it cannot
// shut the server off, and the grants lapse after admission_config::hold_s.

#include <caf/typed_event_based_actor.hpp>

#include "policy/admission.hpp"
#include "messages/protocol.hpp"

namespace swarm {

struct door_state {
  static inline const char* name = "door";
  policy::admission admission;
  caf::actor_addr server;  ///< the only sender of releases
};

[[nodiscard]] door_actor::behavior_type door(door_actor::stateful_pointer<door_state> self,
                                             policy::admission_config cfg, caf::actor_addr server);

}  // namespace swarm
