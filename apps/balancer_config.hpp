#pragma once
// A stage's load balancer as a trainer's keys set it up (apps/role_trainer.cpp);
// --role generate routes through the same balancers.

#include <memory>
#include <string>

#include "actors/load_balancer.hpp"
#include "config/config.hpp"

namespace swarm {

/// Stage `stage`'s load balancer: the trainer's routing, deadline and ban keys, and its own seed.
[[nodiscard]] load_balancer_config balancer_config(const app_config& cfg, const std::string& trainer_id, int stage,
                                                   std::shared_ptr<bulk_endpoint> bulk);

}  // namespace swarm
