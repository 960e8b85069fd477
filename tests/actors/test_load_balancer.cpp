// Tier (b): the load balancer over a real middleman on loopback: re-sends at a dead
// server, a server's door, dialing again, a stage without servers.
// torch (through the stage server) before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/coordinator.hpp"
#include "actors/load_balancer.hpp"
#include "actors/stage_server.hpp"
#include "messages/wire.hpp"
#include "fixtures.hpp"
#include "actor_helpers.hpp"

using namespace swarm;
using swarm::testing::system_fixture;
using namespace std::chrono_literals;
using namespace swarm::testing::actor_helpers;

TEST_CASE_METHOD(system_fixture, "load balancer re-sends requests pending at a dead server at once", "[actors]") {
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>());
  auto hung = sys->spawn(silent_server);
  auto hung_port = sys->middleman().publish(hung, 0, "127.0.0.1");
  REQUIRE(hung_port);
  auto worker = std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu");
  auto good = sys->spawn(stage_server, server_settings("good", 4 << 20), worker, std::make_shared<metrics_sink>(),
                         std::make_shared<stage_server_counters>());
  auto good_port = sys->middleman().publish(good, 0, "127.0.0.1");
  REQUIRE(good_port);
  caf::scoped_actor self{*sys};
  auto join = [&](const std::string& id, uint16_t port, const stage_actor& handle) {
    caf::scoped_actor registrar{*sys};  // own actor: join also runs on the chaos thread
    registrar->request(coord, 5s, register_atom::value, wrap(registration(id, 0, port, 42)), handle, caf::actor{})
        .receive([](const encoded<proto::register_reply>&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
  };
  join("hung", *hung_port, caf::actor_cast<stage_actor>(hung));
  // Deadlines far beyond the test's patience: only the down event can move the request.
  load_balancer_config lbc;
  lbc.config_hash = 42;
  lbc.trainer.forward_timeout_s = lbc.trainer.backward_timeout_s = lbc.trainer.no_server_wait_s = 60.0;
  const std::string metrics_path = "/tmp/swarm-test-lb-metrics.jsonl";
  std::remove(metrics_path.c_str());
  auto lb = sys->spawn(load_balancer, lbc, caf::actor_cast<coordinator_actor>(coord),
                       std::make_shared<metrics_sink>(metrics_path, "trainer"));

  std::string served_by;
  int32_t attempts = 0;
  const auto start = std::chrono::steady_clock::now();
  std::thread chaos([&] {
    std::this_thread::sleep_for(500ms);  // the request is at the hung server by now
    join("good", *good_port, caf::actor_cast<stage_actor>(good));
    std::this_thread::sleep_for(300ms);
    caf::anon_send_exit(hung, caf::exit_reason::kill);
  });
  self->request(lb, 30s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8).bytes}, int64_t{2})
      .receive(
          [&](bulk_parts& parts, const std::string& server, int32_t n) {
            served_by = server;
            attempts = n;
            CHECK(decode_parts<proto::forward_reply>(std::move(parts), "forward_reply"));
          },
          [&](caf::error& err) { FAIL(describe(err)); });
  chaos.join();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(served_by == "good");
  CHECK(attempts == 2);
  CHECK(waited < 10.0);
  std::ifstream in(metrics_path);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(all.find("\"event\": \"reroute\"") != std::string::npos);
  CHECK(all.find("\"reason\": \"down\"") != std::string::npos);
  for (const auto& a :
       {caf::actor_cast<caf::actor>(lb), caf::actor_cast<caf::actor>(coord), caf::actor_cast<caf::actor>(good)})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(system_fixture, "a server's door grants room up to max-outstanding; a full one is passed over",
                 "[actors]") {
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>());
  caf::scoped_actor self{*sys};
  auto serve = [&](const std::string& id) {
    auto scfg = server_settings(id, 4 << 20);
    scfg.server.admission.max_outstanding = 1;
    scfg.server.admission.hold_s = 1.5;  // the test's own grant below lapses (only its server releases one)
    auto server = sys->spawn(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                             std::make_shared<metrics_sink>(), std::make_shared<stage_server_counters>());
    auto port = sys->middleman().publish(server, 0, "127.0.0.1");
    REQUIRE(port);
    self->request(coord, 5s, register_atom::value, wrap(registration(id, 0, *port, 42)), server, caf::actor{})
        .receive([](const encoded<proto::register_reply>&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
    return server;
  };
  auto door_of = [&](const stage_actor& server) {
    door_actor door;
    self->request(server, 5s, door_atom::value)
        .receive([&](const caf::actor& d) { door = caf::actor_cast<door_actor>(d); },
                 [](caf::error& err) { FAIL(caf::to_string(err)); });
    return door;
  };
  auto reserve = [&](const door_actor& door) {
    uint64_t ticket = 99;
    self->request(door, 5s, reserve_atom::value)
        .receive([&](uint64_t t) { ticket = t; }, [](caf::error& err) { FAIL(caf::to_string(err)); });
    return ticket;
  };
  load_balancer_config lbc;
  lbc.config_hash = 42;
  lbc.busy_answers = std::make_shared<std::atomic<int64_t>>(0);
  auto lb = sys->spawn(load_balancer, lbc, caf::actor_cast<coordinator_actor>(coord), std::make_shared<metrics_sink>());
  auto forward = [&] { return forward_through(self, lb, 15s); };

  auto solo = serve("solo");
  const auto solo_door = door_of(solo);
  std::this_thread::sleep_for(300ms);  // the load balancer has connected and asked for the door
  // Each request asks, is granted the one place, and its server frees it when done:
  // without the release the fourth ask would find no room.
  for (int i = 0; i < 3; ++i)
    CHECK(forward() == "solo");
  CHECK(lbc.busy_answers->load() == 0);
  const auto held_at = std::chrono::steady_clock::now();
  const uint64_t held = reserve(solo_door);
  CHECK(held != 0);
  CHECK(reserve(solo_door) == 0);  // one place at most

  // Its one place taken, solo is passed over while another has room.
  auto other = serve("other");
  std::this_thread::sleep_for(300ms);
  for (int i = 0; i < 6; ++i)
    CHECK(forward() == "other");
  // Each time the rotation came to solo it said busy, and the trainer's counter shows it.
  CHECK(lbc.busy_answers->load() >= 1);
  CHECK(lbc.busy_answers->load() <= 6 * lbc.trainer.attempts.busy_retries);
  self->send(solo_door, release_atom::value, held);  // not its server: refused, the place stays taken
  CHECK(reserve(solo_door) == 0);
  std::this_thread::sleep_until(held_at + 1600ms);  // until the grant lapses (hold_s)
  CHECK(reserve(solo_door) != 0);
  for (const auto& a : {caf::actor_cast<caf::actor>(lb), caf::actor_cast<caf::actor>(coord),
                        caf::actor_cast<caf::actor>(solo), caf::actor_cast<caf::actor>(other)})
    self->send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(system_fixture, "a server the load balancer failed to connect to is dialed again", "[actors]") {
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>());
  // A port nobody listens on yet: the first dial is refused.
  int probe = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const uint16_t port = ntohs(addr.sin_port);
  ::close(probe);
  auto worker = std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu");
  auto late = sys->spawn(stage_server, server_settings("late", 4 << 20), worker, std::make_shared<metrics_sink>(),
                         std::make_shared<stage_server_counters>());
  caf::scoped_actor self{*sys};
  self->request(coord, 5s, register_atom::value, wrap(registration("late", 0, port, 42)),
                caf::actor_cast<stage_actor>(late), caf::actor{})
      .receive([](const encoded<proto::register_reply>&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
  load_balancer_config lbc;
  lbc.config_hash = 42;
  lbc.trainer.forward_timeout_s = lbc.trainer.backward_timeout_s = lbc.trainer.no_server_wait_s = 60.0;
  auto lb = sys->spawn(load_balancer, lbc, caf::actor_cast<coordinator_actor>(coord), std::make_shared<metrics_sink>());
  std::this_thread::sleep_for(500ms);  // the first dial was refused by now
  REQUIRE(sys->middleman().publish(late, port, "127.0.0.1"));
  std::string served_by;
  self->request(lb, 15s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8).bytes}, int64_t{2})
      .receive([&](bulk_parts&, const std::string& server, int32_t) { served_by = server; },
               [&](caf::error& err) { served_by = describe(err); });
  for (const auto& a :
       {caf::actor_cast<caf::actor>(lb), caf::actor_cast<caf::actor>(coord), caf::actor_cast<caf::actor>(late)})
    self->send_exit(a, caf::exit_reason::user_shutdown);
  CHECK(served_by == "late");  // without the retry it waits out the 15 s
}

TEST_CASE_METHOD(system_fixture, "a stage without servers fails requests with NO_SERVER after the wait", "[actors]") {
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>());
  load_balancer_config lbc;
  lbc.config_hash = 42;
  lbc.trainer.no_server_wait_s = 1.0;
  auto lb = sys->spawn(load_balancer, lbc, caf::actor_cast<coordinator_actor>(coord), std::make_shared<metrics_sink>());
  caf::scoped_actor self{*sys};
  caf::error result;
  const auto start = std::chrono::steady_clock::now();
  self->request(lb, 30s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8).bytes}, int64_t{2})
      .receive([](const bulk_parts&, const std::string&, int32_t) { FAIL("served without servers"); },
               [&](caf::error& err) { result = err; });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(code_of(result) == errc::NO_SERVER);
  CHECK(waited >= 1.0);
  CHECK(waited < 5.0);  // the wait is counted from the first time it queued, not from the last retry
  self->send_exit(lb, caf::exit_reason::user_shutdown);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(system_fixture,
                 "verification catches a server answering with noise: strikes, a ban here, its stage at the "
                 "coordinator, evidence in both",
                 "[actors][verify]") {
  auto coord_log = std::make_shared<event_log>(), lb_log = std::make_shared<event_log>();
  coordinator_settings cs{2, 42};
  cs.verify_strikes = 2;  // as the trainer's: its strikes alone ban
  auto coord = sys->spawn(coordinator, cs, coord_log->sink());
  caf::scoped_actor self{*sys};
  auto enrol = [&](const std::string& id, const stage_actor& server) {
    auto port = sys->middleman().publish(server, 0, "127.0.0.1");
    REQUIRE(port);
    caf::error refused;
    self->request(coord, 5s, register_atom::value, wrap(registration(id, 0, *port, 42)), server, caf::actor{})
        .receive([](const encoded<proto::register_reply>&) {}, [&](caf::error& err) { refused = err; });
    return refused;
  };
  std::vector<stage_actor> servers;
  for (const std::string id : {"honest-a", "honest-b", "liar"}) {
    auto scfg = server_settings(id, 4 << 20);
    if (id == "liar")
      scfg.server.fault = server_config::fault_kind::noise, scfg.server.allow_faults = true;
    servers.push_back(sys->spawn(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                                 std::make_shared<metrics_sink>(), std::make_shared<stage_server_counters>()));
    REQUIRE(!enrol(id, servers.back()));
  }
  load_balancer_config lbc;
  lbc.config_hash = 42;
  lbc.trainer.verify_fraction = 1.0;  // every forward, so that the test is short
  lbc.trainer.verify_strikes = 2;
  lbc.trainer_id = "t0";
  lbc.verified = std::make_shared<policy::verify_counters>();
  auto lb = sys->spawn(load_balancer, lbc, caf::actor_cast<coordinator_actor>(coord), lb_log->sink());
  std::this_thread::sleep_for(300ms);  // connected to all three
  // Each forward the liar answers, or verifies, charges it (two honest servers
  // outvote it); two charges ban it. Forwards after the ban never reach it.
  std::vector<std::string> served;
  for (int i = 0; i < 40 && lbc.verified->bans.load() == 0; ++i) {
    served.push_back(forward_through(self, lb, 15s));
    std::this_thread::sleep_for(50ms);  // the verification's answers come in beside
  }
  REQUIRE(lbc.verified->bans.load() == 1);
  for (int i = 0; i < 6; ++i)
    CHECK(forward_through(self, lb, 15s) != "liar");
  std::this_thread::sleep_for(300ms);
  CHECK(lb_log->count("\"event\": \"verify_strike\"", "\"server\": \"liar\"") >= 2);
  CHECK(lb_log->count("\"event\": \"verify_strike\"", "\"server\": \"honest-") == 0);
  REQUIRE(lb_log->count("\"event\": \"verify_ban\"", "\"server\": \"liar\"") == 1);
  const auto ban = lb_log->find("\"event\": \"verify_ban\"");
  CHECK(ban.find("\"agreeing\": \"honest-") != std::string::npos);  // the two that outvoted it
  CHECK(ban.find("\"output_hash\"") != std::string::npos);
  CHECK(lbc.verified->strikes.load() >= 2);
  CHECK(lbc.verified->requests.load() >= static_cast<int64_t>(served.size()));
  // The coordinator took it out of its stage and refuses it for the cool-down.
  REQUIRE(coord_log->count("\"event\": \"server_banned\"", "\"server\": \"liar\"") == 1);
  CHECK(coord_log->find("\"event\": \"server_banned\"").find("\"last_of_stage\": false") != std::string::npos);
  auto again = sys->spawn(stage_server, server_settings("liar", 4 << 20),
                          std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"), std::make_shared<metrics_sink>(),
                          std::make_shared<stage_server_counters>());
  const auto refused = enrol("liar", again);
  CHECK(describe(refused).find("banned") != std::string::npos);
  // One trainer bans at most a third of a stage at a time: evidence against an
  // honest server from the same process, as many strikes as ban, is not acted on.
  proto::verification_evidence forged;
  forged.set_trainer_id("t0");
  forged.set_server_id("honest-a");
  self->send(coord, evict_atom::value, wrap(forged));
  self->send(coord, evict_atom::value, wrap(forged));
  std::this_thread::sleep_for(300ms);
  CHECK(coord_log->count("\"event\": \"server_banned\"", "\"server\": \"honest-a\"") == 0);
  for (const auto& a :
       {caf::actor_cast<caf::actor>(lb), caf::actor_cast<caf::actor>(coord), caf::actor_cast<caf::actor>(again)})
    self->send_exit(a, caf::exit_reason::user_shutdown);
  for (const auto& s : servers)
    self->send_exit(s, caf::exit_reason::user_shutdown);
}
