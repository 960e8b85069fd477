#include "messages/types.hpp"

#include "messages/errors.hpp"
#include "messages/protocol.hpp"

namespace swarm {

void register_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<stage_actor>("stage_actor");
  cfg.add_message_type<averager_actor>("averager_actor");
  register_error_category(cfg);
}

}  // namespace swarm
