#pragma once
// What actor tests share: an actor system configured as every node's is (the
// models they train: model_configs.hpp).

#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "messages/types.hpp"

namespace swarm::testing {

/// The middleman, every type the protocol sends (messages/types.hpp), and no CAF console log.
inline void configure_node(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  register_types(cfg);
  cfg.set("logger.console", caf::atom("none"));
}

/// An actor system made by configure_node.
struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  system_fixture() {
    configure_node(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

}  // namespace swarm::testing
