#pragma once
// A trainer's reports to the coordinator's status page: its step, loss,
// throughput and its load balancers' reroutes and bans, gathered from its own
// metrics events and sent every 2 s, off the data path.

#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "base/metrics.hpp"
#include "messages/protocol.hpp"

namespace swarm {

/// The latest report, kept current by the metrics events it observes.
struct trainer_tally;

/// A tally fed by `metrics`' events from now on (step, eval, reroute, ban).
[[nodiscard]] std::shared_ptr<trainer_tally> tally_of(metrics_sink& metrics);

/// Sends `coord` the tally as trainer_report every 2 s; (subscribe, handle)
/// points it at a new coordinator after a restart; (report) -> unit sends one
/// last report and answers once the coordinator took it (or could not).
[[nodiscard]] caf::behavior status_reporter(caf::event_based_actor* self, std::string trainer_id, int64_t max_steps,
                                            std::shared_ptr<trainer_tally> tally, coordinator_actor coord);

/// Has `reporter` send its last report; returns when it did, 3 s at most.
void report_last(caf::actor_system& sys, const caf::actor& reporter);

}  // namespace swarm
