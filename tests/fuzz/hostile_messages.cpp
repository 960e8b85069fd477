// The hostile peer's messages (tests/hostile/hostile_cases.hpp) as a
// structure-aware fuzz target for the actors' message handlers: a coordinator
// (with its averager and rebalancer), a registered stage-0 server and its door
// live in one actor system for the whole run; each input seeds the fields and
// picks which messages, in which order, reach them. Sent from their own
// process, the orders pass the sender checks here: what is fuzzed is the
// handlers behind them. Promise: afterwards the coordinator, the server and
// its door still answer (no crash, no hang, no handler that stops its actor).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>

#include <caf/all.hpp>

#include "actors/actor_helpers.hpp"
#include "actors/coordinator.hpp"
#include "fixtures.hpp"
#include "fuzz.hpp"
#include "hostile/hostile_cases.hpp"

namespace {

using namespace swarm;
using namespace std::chrono_literals;

/// Answers every message with an error, at once: what an order names as a
/// source, a member or a coordinator (a dead end that does not stall anyone).
caf::behavior bait(caf::event_based_actor* self) {
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
    return caf::sec::unexpected_message;
  });
  return {[](caf::ok_atom) {}};
}

struct world {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  hostile::targets t;

  world() {
    testing::configure_node(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    const auto hash = testing::tiny_model().hash();
    coordinator_settings cs{2, hash};
    cs.rebalancing.coordinator.rebalance = "off";
    auto coord = sys->spawn(coordinator, cs, std::make_shared<metrics_sink>());
    auto server = testing::actor_helpers::spawn_stage0_server(*sys, "target", "");
    caf::scoped_actor self{*sys};
    self->request(server, 10s, register_atom::value,
                  wrap(testing::actor_helpers::registration("target", 0, 4000, hash)),
                  caf::actor_cast<caf::actor>(coord))
        .receive([](const std::string&) {}, [](caf::error&) {});
    t.coordinator = caf::actor_cast<caf::actor>(coord);
    self->request(coord, 10s, averager_atom::value)
        .receive([&](const averager_actor& a) { t.averager = caf::actor_cast<caf::actor>(a); }, [](caf::error&) {});
    t.servers = {caf::actor_cast<caf::actor>(server)};
    t.server_stages = {0};
    t.server_ids = {"target"};
    self->request(server, 10s, door_atom::value)
        .receive([&](const caf::actor& d) { t.doors = {d}; }, [](caf::error&) {});
    t.bait = sys->spawn(bait);
    t.bait_endpoint = "127.0.0.1:1";  // nothing listens: a dial fails at once
    t.config_hash = hash;
    // The actors outlive main: at exit, leave before static destructors run
    // (spdlog's registry among them, which the actors' threads still log to).
    // Registered after the loggers were made, so it runs before they go.
    std::atexit([] {
      std::fflush(nullptr);
      std::_Exit(0);
    });
  }

  /// Whether `whom` answers `msg` (any answer, an error too) within the time.
  bool answers(const caf::actor& whom, const caf::message& msg) {
    caf::scoped_actor self{*sys};
    bool ok = false;
    self->request(whom, 30s, msg)
        .receive([&](caf::message&) { ok = true; },
                 [&](caf::error& e) { ok = e != caf::make_error(caf::sec::request_timeout); });
    return ok;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Never destroyed: CAF 0.17's actor system can wait forever in its destructor for a detached actor.
  static world& w = *new world;
  swarm::fuzz::reader in(data, size);
  std::mt19937_64 rng(in.take<uint64_t>());
  const auto cases = hostile::cases(w.t, rng);
  caf::scoped_actor self{*w.sys};
  while (in.left() > 0 && !cases.empty()) {
    const auto& c = cases[in.take<uint16_t>() % cases.size()];
    self->send(c.target, c.msg);
  }
  SWARM_FUZZ_EXPECT(w.answers(w.t.coordinator, caf::make_message(averager_atom::value)));
  SWARM_FUZZ_EXPECT(w.answers(w.t.servers.front(), caf::make_message(door_atom::value)));
  SWARM_FUZZ_EXPECT(w.answers(w.t.doors.front(), caf::make_message(reserve_atom::value)));
  return 0;
}
