// Tier (b): an actor's own timers are local messages (messages/local.hpp). The
// messages that used to be those timers, sent by anyone, are refused with an
// error and change nothing: before, a `deadline` for stage 1,000,000 indexed
// the averager's stages out of range (the coordinator process died), and a
// `tick` started one more perpetual timer chain in the coordinator.
// torch (through the stage server) before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/coordinator.hpp"
#include "actors/stage_server.hpp"
#include "messages/wire.hpp"
#include "fixtures.hpp"
#include "actor_helpers.hpp"

using namespace swarm;
using swarm::testing::system_fixture;
using namespace std::chrono_literals;
using namespace swarm::testing::actor_helpers;

namespace {

// The atoms of the timers as they were in the protocol.
using old_deadline = caf::atom_constant<caf::atom("deadline")>;
using old_tick = caf::atom_constant<caf::atom("tick")>;
using old_settle = caf::atom_constant<caf::atom("settle")>;
using old_leave = caf::atom_constant<caf::atom("leave")>;
using old_bulk = caf::atom_constant<caf::atom("bulk")>;

/// Sends `xs` to `dest` as a request and returns the error it was answered with (none: it was taken).
template <class Dest, class... Ts>
caf::error answer_to(caf::scoped_actor& self, const Dest& dest, Ts... xs) {
  caf::error out;
  self->request(caf::actor_cast<caf::actor>(dest), 5s, xs...)
      .receive([&](caf::message&) {}, [&](caf::error& err) { out = std::move(err); });
  return out;
}

}  // namespace

TEST_CASE_METHOD(system_fixture, "timers are local: their old messages from anyone are refused and change nothing",
                 "[actors]") {
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>());
  caf::scoped_actor self{*sys};
  averager_actor avg;
  self->request(coord, 5s, averager_atom::value)
      .receive([&](const averager_actor& a) { avg = a; }, [](caf::error& err) { FAIL(describe(err)); });
  REQUIRE(avg);
  self->monitor(avg);
  self->monitor(coord);
  const auto refused = caf::make_error(caf::sec::unexpected_message);
  CHECK(answer_to(self, avg, old_deadline::value, uint32_t{1000000}, uint64_t{0}, int32_t{0}) == refused);
  CHECK(answer_to(self, avg, old_deadline::value, uint32_t{1000000}, uint64_t{7}, int32_t{1}) == refused);
  CHECK(answer_to(self, coord, old_tick::value) == refused);
  auto server = spawn_stage0_server(*sys, "s-local", "");
  self->monitor(server);
  CHECK(answer_to(self, server, old_deadline::value, uint64_t{1}, int32_t{2}) == refused);
  CHECK(answer_to(self, server, old_settle::value, uint64_t{1}) == refused);
  CHECK(answer_to(self, server, old_leave::value) == refused);
  CHECK(answer_to(self, server, old_bulk::value, uint64_t{5}) == refused);
  CHECK(answer_to(self, server, old_bulk::value, uint64_t{5}, std::vector<std::string>{"forged"}) == refused);
  // All three still answer their protocol (a forward is computed), and none went down.
  proto::subscribe sub;
  sub.set_stage(0);
  self->request(coord, 5s, peers_atom::value, wrap(sub))
      .receive([](const encoded<proto::server_list>&) {}, [](caf::error& err) { FAIL(describe(err)); });
  self->request(server, 30s, forward_atom::value, uint64_t{0}, forward_payload(0, 1, 4))
      .receive([](uint64_t, const encoded<proto::forward_reply>& m) { CHECK(!m.bytes.empty()); },
               [](caf::error& err) { FAIL(describe(err)); });
  CHECK(answer_to(self, avg, old_deadline::value, uint32_t{0}, uint64_t{0}, int32_t{0}) == refused);  // alive
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(0s) >> [] {});
  CHECK_FALSE(down);
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
}
