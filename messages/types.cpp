#include "messages/types.hpp"

#include "messages/errors.hpp"
#include "messages/protocol.hpp"
#include "swarm.pb.h"

namespace swarm {

namespace {

/// Registers encoded<P> for each P, named after P.
template <class... Ps>
void add_payloads(caf::actor_system_config& cfg) {
  (cfg.add_message_type<encoded<Ps>>("swarm." + Ps::descriptor()->name()), ...);
}

}  // namespace

void register_types(caf::actor_system_config& cfg) {
  using namespace proto;
  add_payloads<allreduce_piece, backward_reply, backward_request, forward_reply, forward_request, leave_notice,
               membership_update, move_order, placement, placement_request, progress_report, register_reply,
               register_server, reload_order, round_begin, round_done, round_exclude, round_outcome, round_waiting,
               server_list, state_reply, state_request, subscribe, trainer_report, verification_evidence>(cfg);
  cfg.add_message_type<stage_actor>("stage_actor");
  cfg.add_message_type<averager_actor>("averager_actor");
  register_error_category(cfg);
}

}  // namespace swarm
