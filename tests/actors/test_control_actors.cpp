// Tier (b): the coordinator's orders over a real middleman on loopback: a server
// moved to another stage, placement of a new one, fencing by term (and the term etcd
// names taken on registering); the control records.
// torch (through the stage server) before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/control_records.hpp"
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

TEST_CASE_METHOD(system_fixture, "a server told to move leaves its stage, joins the other, refuses the old one's work",
                 "[actors]") {
  const std::string path = "/tmp/swarm-test-move-metrics.jsonl";
  std::remove(path.c_str());
  const auto hash = tiny_model().hash();
  coordinator_settings cs{2, hash};
  cs.rebalancing.coordinator.rebalance = "off";  // the test gives the order itself
  auto coord = sys->spawn(coordinator, cs, std::make_shared<metrics_sink>());
  auto server = spawn_stage0_server(*sys, "mover", path);
  auto port = sys->middleman().publish(server, 0, "127.0.0.1");
  REQUIRE(port);
  caf::scoped_actor self{*sys};
  // One watcher per stage: the coordinator keeps one subscription per subscriber.
  caf::scoped_actor watch0{*sys}, watch1{*sys};
  for (auto [watcher, stage] : {std::pair{&watch0, 0u}, std::pair{&watch1, 1u}}) {
    proto::subscribe sub;
    sub.set_stage(stage);
    sub.set_config_hash(hash);
    (*watcher)
        ->request(coord, 5s, subscribe_atom::value, wrap(sub))
        .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  }
  auto next_update = [](caf::scoped_actor& watcher) {
    proto::membership_update up;
    watcher->receive([&](membership_atom, const encoded<proto::membership_update>& m) { up.ParseFromString(m.bytes); },
                     caf::after(10s) >> [] { FAIL("no membership update"); });
    return up;
  };
  // Registered by its node, as in the server role.
  self->request(server, 10s, register_atom::value, wrap(registration("mover", 0, *port, hash)),
                caf::actor_cast<caf::actor>(coord))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  CHECK(next_update(watch0).kind() == proto::membership_update::JOIN);

  proto::move_order order;
  order.set_stage(1);  // not the stage it serves: ignored
  order.set_to_stage(0);
  self->send(server, move_atom::value, wrap(order));
  order.set_stage(0);
  order.set_to_stage(1);
  order.set_reason("load");
  order.set_predicted_gain(0.5);
  self->send(server, move_atom::value, wrap(order));
  const auto left = next_update(watch0);
  CHECK(left.kind() == proto::membership_update::LEAVE);
  CHECK(left.server_id() == "mover");
  const auto joined = next_update(watch1);
  CHECK(joined.kind() == proto::membership_update::JOIN);
  CHECK(joined.server_id() == "mover");
  // Work for the stage it left is refused as LEAVING (retried elsewhere), not as a bad request.
  caf::error refused;
  self->request(server, 10s, forward_atom::value, uint64_t{0}, forward_payload(0, 2, 8))
      .receive([](uint64_t, const encoded<proto::forward_reply>&) { FAIL("served a stage it left"); },
               [&](caf::error& err) { refused = err; });
  CHECK(code_of(refused) == errc::LEAVING);
  CHECK(is_retryable(refused));
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
  self->wait_for(server);

  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  auto has = [&](const std::string& a, const std::string& b) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(a) != std::string::npos && l.find(b) != std::string::npos;
    });
  };
  // One server_exit per stage served: stage 0 when it left (moved_to 1), stage 1 when it stopped.
  CHECK(has("\"event\": \"server_exit\", \"stage\": 0", "\"moved_to\": 1"));
  CHECK(has("\"event\": \"server_exit\", \"stage\": 1", "\"moved_to\": -1"));
  CHECK(has("\"event\": \"rebalance\"", "\"from\": 0, \"to\": 1, \"reason\": \"load\""));
  CHECK(has("\"event\": \"rebalance\"", "\"state_copied\": false"));  // stage 1 had nobody to copy from
}

TEST_CASE_METHOD(system_fixture, "placement: a new server gets the emptiest stage; bad questions get errors",
                 "[actors]") {
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>());
  caf::scoped_actor self{*sys};
  auto ask = [&](const encoded<proto::placement_request>& bytes) {
    caf::expected<proto::placement> out{caf::error{}};
    self->request(coord, 5s, place_atom::value, bytes)
        .receive([&](const encoded<proto::placement>& reply) { out = decode(reply); },
                 [&](caf::error& err) { out = err; });
    return out;
  };
  CHECK(code_of(ask(encoded<proto::placement_request>{std::string("\xff\xff\xff", 3)}).error()) == errc::BAD_REQUEST);
  proto::placement_request req;
  req.set_config_hash(42);
  CHECK(code_of(ask(wrap(req)).error()) == errc::BAD_REQUEST);  // no server id
  req.set_server_id("a");
  req.set_config_hash(41);
  CHECK(code_of(ask(wrap(req)).error()) == errc::BAD_CONFIG);
  // The first answer counts as placed until its server registers, but a
  // process holds one place: asking again under other ids (a stranger making
  // servers up) moves its hold instead of filling the stages with phantoms.
  req.set_config_hash(42);
  auto first = ask(wrap(req));
  REQUIRE(first);
  CHECK(first->stage() == 0);
  for (const char* id : {"b", "c", "d"}) {
    req.set_server_id(id);
    auto again = ask(wrap(req));
    REQUIRE(again);
    CHECK(again->stage() == 0);
  }
  // A leave_notice from an actor that never registered changes nothing.
  proto::leave_notice note;
  note.set_stage(0);
  note.set_to_stage(1);
  self->send(coord, leave_atom::value, wrap(note));
  self->send(coord, leave_atom::value, encoded<proto::leave_notice>{"garbage"});
  proto::subscribe sub;
  sub.set_stage(0);
  proto::server_list list;
  self->request(coord, 5s, peers_atom::value, wrap(sub))
      .receive([&](const encoded<proto::server_list>& m) { list.ParseFromString(m.bytes); },
               [](caf::error& err) { FAIL(describe(err)); });
  CHECK(list.servers_size() == 0);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(system_fixture, "fencing: a server refuses orders of a term older than its coordinator's",
                 "[actors][control]") {
  const std::string path = "/tmp/swarm-test-fencing-metrics.jsonl";
  std::remove(path.c_str());
  const auto hash = tiny_model().hash();
  coordinator_settings cs{2, hash};
  cs.rebalancing.coordinator.rebalance = "off";
  cs.leader = std::make_shared<leadership>();
  cs.leader->term = 7;  // an elected coordinator's term: the server learns it by registering
  auto coord = sys->spawn(coordinator, cs, std::make_shared<metrics_sink>());
  auto server = spawn_stage0_server(*sys, "fenced", path);
  auto port = sys->middleman().publish(server, 0, "127.0.0.1");
  REQUIRE(port);
  caf::scoped_actor self{*sys}, watch{*sys};
  proto::subscribe sub;
  sub.set_stage(0);
  sub.set_config_hash(hash);
  watch->request(coord, 5s, subscribe_atom::value, wrap(sub))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  self->request(server, 10s, register_atom::value, wrap(registration("fenced", 0, *port, hash)),
                caf::actor_cast<caf::actor>(coord))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  CHECK(next_update(watch, 10s));  // its JOIN

  // A deposed leader's (term 3) round and move: refused, the server stays.
  proto::round_begin begin;
  begin.set_stage(0);
  begin.set_round(1);
  begin.set_step(0);
  begin.add_members("fenced");
  begin.set_timeout_s(5);
  begin.set_piece_elements(1024);
  begin.set_term(3);
  self->send(server, round_atom::value, wrap(begin), std::vector<caf::actor>{caf::actor_cast<caf::actor>(server)});
  proto::move_order order;
  order.set_stage(0);
  order.set_to_stage(1);
  order.set_reason("load");
  order.set_term(3);
  self->send(server, move_atom::value, wrap(order));
  CHECK_FALSE(next_update(watch, 1500ms));  // no LEAVE
  // The same move of the current term is carried out.
  order.set_term(7);
  self->send(server, move_atom::value, wrap(order));
  const auto left = next_update(watch, 10s);
  CHECK((left && left->kind() == proto::membership_update::LEAVE));  // not REQUIRE: the server must be stopped below
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
  self->wait_for(server);

  std::ifstream in(path);
  int refused_round = 0, refused_move = 0;
  for (std::string l; std::getline(in, l);) {
    if (l.find("\"event\": \"stale_order\"") == std::string::npos)
      continue;
    CHECK(l.find("\"term\": 3, \"newest_term\": 7") != std::string::npos);
    refused_round += l.find("\"order\": \"round\"") != std::string::npos;
    refused_move += l.find("\"order\": \"move\"") != std::string::npos;
  }
  CHECK(refused_round == 1);
  CHECK(refused_move == 1);
}

TEST_CASE_METHOD(system_fixture,
                 "fencing: registering through its node, a server follows the term etcd names, even a lower one",
                 "[actors][control]") {
  // etcd restored from an older snapshot names a leader of a lower term than
  // the servers saw. Before, a server refused that leader's registration (and
  // so every order) for as long as it ran.
  const std::string path = "/tmp/swarm-test-term-reset-metrics.jsonl";
  std::remove(path.c_str());
  const auto hash = tiny_model().hash();
  auto elected = [&](int64_t term) {
    coordinator_settings cs{2, hash};
    cs.rebalancing.coordinator.rebalance = "off";
    cs.leader = std::make_shared<leadership>();
    cs.leader->term = term;
    return sys->spawn(coordinator, cs, std::make_shared<metrics_sink>());
  };
  auto server = spawn_stage0_server(*sys, "follower", path);
  auto port = sys->middleman().publish(server, 0, "127.0.0.1");
  REQUIRE(port);
  caf::scoped_actor self{*sys}, watch{*sys};
  auto register_with = [&](const coordinator_actor& coord) {
    caf::error refused;
    self->request(server, 10s, register_atom::value, wrap(registration("follower", 0, *port, hash)),
                  caf::actor_cast<caf::actor>(coord))
        .receive([](const std::string&) {}, [&](caf::error& err) { refused = std::move(err); });
    return refused;
  };
  auto old_leader = elected(9);
  REQUIRE_FALSE(register_with(old_leader));
  self->send_exit(old_leader, caf::exit_reason::user_shutdown);
  self->wait_for(old_leader);

  auto restored = elected(3);  // the leader etcd names after the restore
  proto::subscribe sub;
  sub.set_stage(0);
  sub.set_config_hash(hash);
  watch->request(restored, 5s, subscribe_atom::value, wrap(sub))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  const auto refused = register_with(restored);
  CHECK_FALSE(refused);
  INFO("registering with term 3 after term 9: " << describe(refused));
  CHECK(next_update(watch, 10s));  // its JOIN
  // Fencing still holds below the adopted term; the adopted term's move is carried out.
  proto::move_order order;
  order.set_stage(0);
  order.set_to_stage(1);
  order.set_reason("load");
  order.set_term(2);
  self->send(server, move_atom::value, wrap(order));
  CHECK_FALSE(next_update(watch, 1500ms));
  order.set_term(3);
  self->send(server, move_atom::value, wrap(order));
  const auto left = next_update(watch, 10s);
  CHECK((left && left->kind() == proto::membership_update::LEAVE));
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(restored, caf::exit_reason::user_shutdown);
  self->wait_for(server);

  std::ifstream in(path);
  int stale = 0;
  for (std::string l; std::getline(in, l);)
    if (l.find("\"event\": \"stale_order\"") != std::string::npos) {
      ++stale;
      CHECK(l.find("\"term\": 2, \"newest_term\": 3") != std::string::npos);
    }
  CHECK(stale == 1);
}

TEST_CASE("control records: what a leader keeps in etcd round-trips; wrong shapes are refused with why", "[control]") {
  stage_record st{41, 18446744073709551615ull, {"s-1", "s-2"}};
  std::string why;
  auto back = decode_stage_record(encode_record(st), why);
  REQUIRE(back);
  CHECK(*back == st);
  rebalancer_record rb{1796580000.5, {{"s-1", 1796580010.25}}};
  auto rb_back = decode_rebalancer_record(encode_record(rb), why);
  REQUIRE(rb_back);
  CHECK(rb_back->last_load_move == rb.last_load_move);
  CHECK(rb_back->movers == rb.movers);
  for (const char* bad :
       {"", "[]", "not json", R"({"step": -1, "hash": "1", "members": []})", R"({"step": 1, "hash": 1, "members": []})",
        R"({"step": 1, "hash": "12x", "members": []})", R"({"step": 1, "hash": "99999999999999999999", "members": []})",
        R"({"step": 1, "hash": "1", "members": "s-1"})", R"({"step": 1, "hash": "1", "members": [3]})",
        R"({"step": "1", "hash": "1", "members": []})"}) {
    INFO(bad);
    why.clear();
    CHECK_FALSE(decode_stage_record(bad, why));
    CHECK_FALSE(why.empty());
  }
  for (const char* bad : {"{}", R"({"last_load_move": "x", "movers": {}})", R"({"last_load_move": 1, "movers": []})",
                          R"({"last_load_move": 1, "movers": {"s-1": "soon"}})"}) {
    INFO(bad);
    why.clear();
    CHECK_FALSE(decode_rebalancer_record(bad, why));
    CHECK_FALSE(why.empty());
  }
}

namespace {

using report_as_atom = caf::atom_constant<caf::atom("reportas")>;

/// A stand-in server that sends what it is told to the averager as its own progress report.
caf::behavior puppet_server(caf::event_based_actor* self) {
  return {
      [self](report_as_atom, const averager_actor& avg, const encoded<proto::progress_report>& rep) {
        self->send(avg, progress_atom::value, rep);
      },
      [](reload_atom, const encoded<proto::reload_order>&, const caf::actor&) {},  // "load your newest checkpoint"
  };
}

encoded<proto::progress_report> progress(const std::string& id, uint32_t stage, uint64_t step, uint64_t hash) {
  proto::progress_report rep;
  rep.set_server_id(id);
  rep.set_stage(stage);
  rep.set_step(step);
  rep.set_parameter_hash(hash);
  return wrap(rep);
}

}  // namespace

TEST_CASE_METHOD(system_fixture,
                 "a stage's state is lost when its last holder dies while a newcomer has not reported yet",
                 "[actors]") {
  // The race test_rebalancing once hit: a server moved onto a stage the
  // instant its servers were killed joined before their downs, so when the
  // last holder's down came the newcomer (not reported yet) counted as maybe
  // holding the state; its report of initial parameters then changed nothing,
  // and the stage never stepped again.
  const std::string path = "/tmp/swarm-test-lost-race.jsonl";
  std::remove(path.c_str());
  auto coord =
      sys->spawn(coordinator, coordinator_settings{2, 42}, std::make_shared<metrics_sink>(path, "coordinator"));
  caf::scoped_actor self{*sys};
  averager_actor avg;
  self->request(coord, 5s, averager_atom::value)
      .receive([&](const averager_actor& a) { avg = a; }, [](caf::error& err) { FAIL(describe(err)); });
  auto holder = sys->spawn(puppet_server);
  auto newcomer = sys->spawn(puppet_server);
  // Each step is done before the next: a puppet answers once it sent its report,
  // and the averager answers a request it does not take (an error) only after
  // what this actor sent it before.
  auto barrier = [&] {
    self->request(caf::actor_cast<caf::actor>(avg), 5s, report_as_atom::value).receive([] {}, [](caf::error&) {});
  };
  auto report = [&](const caf::actor& puppet, encoded<proto::progress_report> rep) {
    self->request(puppet, 5s, report_as_atom::value, avg, std::move(rep))
        .receive([] {}, [](caf::error& err) { FAIL(describe(err)); });
  };
  self->send(avg, join_atom::value, wrap(registration("holder", 1, 4001, 42)), holder, caf::actor{});
  barrier();
  report(holder, progress("holder", 1, 5, 77));
  self->send(avg, join_atom::value, wrap(registration("newcomer", 1, 4002, 42)), newcomer, caf::actor{});
  barrier();
  self->send_exit(holder, caf::exit_reason::kill);
  self->wait_for(holder);
  report(newcomer, progress("newcomer", 1, 0, 99));
  auto lost = [&] {
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);)
      if (l.find("\"event\": \"stage_lost\"") != std::string::npos)
        return l;
    return std::string{};
  };
  std::string line;
  for (int i = 0; i < 100 && line.empty(); ++i, std::this_thread::sleep_for(50ms))
    line = lost();
  INFO("the coordinator's events: " << path);
  CHECK(line.find("\"stage\": 1, \"step\": 5") != std::string::npos);
  self->send_exit(newcomer, caf::exit_reason::kill);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
}
