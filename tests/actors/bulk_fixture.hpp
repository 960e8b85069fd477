#pragma once
// The bulk endpoint tests' fixture (test_bulk, test_bulk_doors). Include after catch.hpp.

#include <memory>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "net/bulk.hpp"

namespace swarm::testing {

/// An actor system with a bulk endpoint whose frames go to `self`.
struct endpoint_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<bulk_endpoint> bulk;
  std::unique_ptr<caf::scoped_actor> self;

  explicit endpoint_fixture(const bulk_options& opts = {}) {
    cfg.load<caf::io::middleman>();
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
    auto started = bulk_endpoint::start(*sys, opts);
    REQUIRE(started);
    bulk = *started;
    REQUIRE(bulk->port() != 0);
    self = std::make_unique<caf::scoped_actor>(*sys);
    bulk->attach(caf::actor_cast<caf::actor>(*self));
  }
};

}  // namespace swarm::testing
