// Tier (b): the majority decides (issue #46). An averager with three stand-in
// servers of one stage: a member claiming a step no round made does not move
// the stage, and one whose round results differ from the majority's twice in a
// row is evicted (its coordinator told, an event written). Before, the highest
// reported step won and every other server reloaded from its claimant.
// torch (through the averager's config) before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <mutex>

#include <caf/all.hpp>

#include "actors/averager.hpp"
#include "messages/wire.hpp"
#include "fixtures.hpp"
#include "actor_helpers.hpp"

using namespace swarm;
using swarm::testing::system_fixture;
using namespace std::chrono_literals;
using namespace swarm::testing::actor_helpers;

namespace {

proto::progress_report report(const std::string& id, uint64_t step, uint64_t hash) {
  proto::progress_report rep;
  rep.set_stage(0);
  rep.set_server_id(id);
  rep.set_step(step);
  rep.set_parameter_hash(hash);
  rep.set_samples(30);  // a batch (64) only once all three reported
  return rep;
}

proto::round_done result(const std::string& id, uint64_t round, uint64_t step, uint64_t hash) {
  proto::round_done done;
  done.set_stage(0);
  done.set_server_id(id);
  done.set_round(round);
  done.set_applied(true);
  done.set_step(step);
  done.set_parameter_hash(hash);
  return done;
}

/// The id of the next round a stand-in server is told to begin (other orders skipped).
uint64_t next_round(caf::scoped_actor& server) {
  uint64_t id = 0;
  bool more = true;
  server->receive_while(more)(
      [&](round_atom, const encoded<proto::round_begin>& b, const std::vector<caf::actor>&) {
        id = decode(b)->round();
        more = false;
      },
      [](reload_atom, const encoded<proto::reload_order>&, const caf::actor&) {},
      caf::after(10s) >> [&] { more = false; });
  return id;
}

}  // namespace

TEST_CASE_METHOD(system_fixture, "the majority of a round's results decides; a repeat dissenter is evicted",
                 "[actors][hostile]") {
  auto log = std::make_shared<event_log>();
  auto& events = *log;
  averager_settings cfg;
  cfg.num_stages = 1;
  cfg.settle_s = 0;
  cfg.coordinator.averaging_timeout_s = 30;
  auto avg = sys->spawn(averager, cfg, log->sink(), rebalancer_actor{});
  caf::scoped_actor coordinator{*sys}, a{*sys}, b{*sys}, liar{*sys};
  std::vector<std::pair<std::string, caf::scoped_actor*>> servers{{"a", &a}, {"b", &b}, {"liar", &liar}};
  for (auto& [id, s] : servers) {
    const auto handle = caf::actor_cast<caf::actor>(*s);
    coordinator->send(avg, join_atom::value, wrap(registration(id, 0, 4000, 1)), handle, handle);
  }
  for (auto& [id, s] : servers)
    (*s)->send(avg, progress_atom::value, wrap(report(id, 0, 5)));

  // Round 1: the liar claims a step far ahead. No round made it: it neither wins nor counts.
  const uint64_t r1 = next_round(a);
  REQUIRE(r1 != 0);
  REQUIRE(next_round(b) == r1);
  REQUIRE(next_round(liar) == r1);
  a->send(avg, done_atom::value, wrap(result("a", r1, 1, 11)));
  b->send(avg, done_atom::value, wrap(result("b", r1, 1, 11)));
  liar->send(avg, done_atom::value, wrap(result("liar", r1, 1000000, 99)));
  // It says it reloaded, then dissents again in round 2: evicted.
  for (auto& [id, s] : servers)
    (*s)->send(avg, progress_atom::value, wrap(report(id, 1, 11)));
  const uint64_t r2 = next_round(a);
  REQUIRE(r2 != 0);
  REQUIRE(next_round(b) == r2);
  REQUIRE(next_round(liar) == r2);
  a->send(avg, done_atom::value, wrap(result("a", r2, 2, 12)));
  b->send(avg, done_atom::value, wrap(result("b", r2, 2, 12)));
  liar->send(avg, done_atom::value, wrap(result("liar", r2, 2, 98)));

  caf::actor evicted;
  coordinator->receive([&](evict_atom, const caf::actor& who) { evicted = who; }, caf::after(10s) >> [] {});
  CHECK(evicted == caf::actor_cast<caf::actor>(liar));
  CHECK(events.count("\"event\": \"round_end\"", "\"step\": 1,") == 1);
  CHECK(events.count("\"event\": \"round_end\"", "\"step\": 2,") == 1);
  CHECK(events.count("1000000") == 0);  // never the stage's step
  CHECK(events.count("\"event\": \"server_evicted\"", "\"server\": \"liar\"") == 1);
  // Its reload orders named an honest source: never itself.
  CHECK(events.count("\"event\": \"reload\"", "\"from\": \"liar\"") == 0);
  coordinator->send_exit(avg, caf::exit_reason::user_shutdown);
}
