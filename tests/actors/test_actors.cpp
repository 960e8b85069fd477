// Tier (b): actor protocols inside one process, over a real middleman on loopback.
// torch (through the stage server) before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/control_records.hpp"
#include "actors/coordinator.hpp"
#include "base/clock.hpp"
#include "actors/load_balancer.hpp"
#include "actors/stage_server.hpp"
#include "messages/wire.hpp"
#include "fixtures.hpp"
#include "model_configs.hpp"

using namespace swarm;
using swarm::testing::system_fixture;
using namespace std::chrono_literals;

namespace {

using testing::tiny_model;

std::string forward_payload(uint32_t stage, int64_t batch, int64_t seq) {
  proto::forward_request req;
  req.set_microbatch_id(1);
  req.set_stage(stage);
  *req.mutable_inputs() = make_int64_tensor(std::vector<int64_t>(batch * seq, 65), {batch, seq});
  return encode(req);
}

/// A stage server's settings as the tests use them: replies cut into
/// `chunk_bytes` pieces, everything else as configured by default.
stage_server_config server_settings(std::string id, int64_t chunk_bytes = 16 << 20) {
  stage_server_config scfg;
  scfg.server_id = std::move(id);
  scfg.net.chunk_bytes = chunk_bytes;
  return scfg;
}

/// A real stage server `id` of tiny_model()'s stage 0 (of 2), its metrics to `path`.
stage_actor spawn_stage0_server(caf::actor_system& sys, const std::string& id, const std::string& path) {
  auto scfg = server_settings(id, 4 << 20);
  scfg.model = tiny_model();
  scfg.num_stages = 2;
  return sys.spawn<caf::detached>(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                                  std::make_shared<metrics_sink>(path, "server"),
                                  std::make_shared<stage_server_counters>());
}

/// A stage server that accepts requests and never answers: a hung peer.
stage_actor::behavior_type silent_server(stage_actor::pointer self) {
  return {
      [self](forward_atom, uint64_t, std::string&) -> caf::result<uint64_t, std::string> {
        return self->make_response_promise<uint64_t, std::string>();
      },
      [self](backward_atom, uint64_t, std::string&) -> caf::result<uint64_t, std::string> {
        return self->make_response_promise<uint64_t, std::string>();
      },
      [self](state_atom, uint64_t, std::string&) -> caf::result<uint64_t, std::string> {
        return self->make_response_promise<uint64_t, std::string>();
      },
      [](chunk_atom, uint64_t, std::string&) {},
      [](round_atom, std::string&, std::vector<caf::actor>&) {},
      [](done_atom, std::string&, std::vector<float>&) {},
      [](reload_atom, std::string&, caf::actor&) {},
      [](deadline_atom, uint64_t, int32_t) {},
      [](register_atom, std::string&, caf::actor&) { return std::string{}; },
      [](move_atom, std::string&) {},
      [](bulk_atom, uint64_t, std::vector<std::string>&) {},
      [](bulk_atom, uint64_t) {},
      [](settle_atom, uint64_t) {},
      [](leave_atom) {},
      [self](door_atom) -> caf::result<caf::actor> { return self->make_response_promise<caf::actor>(); },
  };
}

proto::register_server registration(const std::string& id, uint32_t stage, uint16_t port, uint64_t hash) {
  proto::register_server reg;
  reg.set_stage(stage);
  reg.set_server_id(id);
  reg.set_host("127.0.0.1");
  reg.set_port(port);
  reg.set_num_stages(2);
  reg.set_config_hash(hash);
  return reg;
}

}  // namespace

TEST_CASE_METHOD(system_fixture, "stage server answers bad requests with errors and keeps serving", "[actors]") {
  auto worker = std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu");
  // 1 KiB chunks so the 2x8x16 float reply (1 KiB + header) must travel in pieces.
  auto server = sys->spawn(stage_server, server_settings("s0", 1024), worker, std::make_shared<metrics_sink>(),
                           std::make_shared<stage_server_counters>());
  caf::scoped_actor self{*sys};
  auto ask = [&](uint64_t transfer, std::string payload) {
    caf::expected<std::pair<uint64_t, std::string>> out{caf::error{}};
    self->request(server, 10s, forward_atom::value, transfer, std::move(payload))
        .receive([&](uint64_t id, std::string& tail) { out = std::make_pair(id, std::move(tail)); },
                 [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  auto garbage = ask(0, std::string("\xff\xff\xff", 3));
  REQUIRE_FALSE(garbage);
  CHECK(code_of(garbage.error()) == errc::BAD_REQUEST);
  auto wrong_stage = ask(0, forward_payload(1, 2, 8));
  REQUIRE_FALSE(wrong_stage);
  CHECK((code_of(wrong_stage.error()) == errc::UNKNOWN_STAGE || code_of(wrong_stage.error()) == errc::BAD_REQUEST));
  auto too_long = ask(0, forward_payload(0, 2, 9));
  REQUIRE_FALSE(too_long);
  CHECK(code_of(too_long.error()) == errc::WRONG_SHAPE);
  auto orphan = ask(77, "tail");  // a transfer whose chunks never came
  REQUIRE_FALSE(orphan);
  CHECK(code_of(orphan.error()) == errc::BAD_REQUEST);

  // A valid request, itself sent in chunks, still works after all that.
  uint64_t next = 0;
  auto piece = cut(forward_payload(0, 2, 8), 40, next);
  REQUIRE(piece.lead.size() >= 2);
  for (auto& p : piece.lead)
    self->send(server, chunk_atom::value, piece.transfer_id, p);
  auto ok = ask(piece.transfer_id, piece.tail);
  REQUIRE(ok);
  CHECK(ok->first != 0);  // the reply came in chunks too
  chunk_assembler chunks;
  self->receive_while([&] { return self->mailbox().size() > 0; })(
      [&](chunk_atom, uint64_t id, const std::string& bytes) { chunks.add(server.address(), id, bytes); });
  auto whole = chunks.finish(server.address(), ok->first, ok->second);
  REQUIRE(whole);
  auto rep = decode<proto::forward_reply>(*whole, "forward_reply");
  REQUIRE(rep);
  CHECK(shape_string(rep->outputs()) == "[2, 8, 16]");
  CHECK_FALSE(check_tensor(rep->outputs(), "outputs"));
  // It says how long it computed (the trainers' routers rate it on that), a
  // positive time shorter than the whole exchange took.
  CHECK(rep->compute_s() > 0);
  CHECK(rep->compute_s() < 10);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE_METHOD(system_fixture, "a reply that left after its reply deadline holds its gradients back; a retry counts",
                 "[actors]") {
  // One stage: stage 0 is also the last, so a forward adds gradients.
  auto worker = std::make_shared<stage_worker>(tiny_model(), 0, 1, "cpu");
  auto counters = std::make_shared<stage_server_counters>();
  auto server = sys->spawn(stage_server, server_settings("s0"), worker, std::make_shared<metrics_sink>(), counters);
  caf::scoped_actor self{*sys};
  auto ask = [&](uint64_t microbatch, double reply_in_s) {
    proto::forward_request req;
    req.set_microbatch_id(microbatch);
    req.set_trainer_id("t");
    req.set_stage(0);
    *req.mutable_inputs() = make_int64_tensor(std::vector<int64_t>(16, 65), {2, 8});
    *req.mutable_targets() = make_int64_tensor(std::vector<int64_t>(16, 66), {2, 8});
    req.set_commit_deadline(unix_seconds() + 60);
    req.set_reply_deadline(unix_seconds() + reply_in_s);
    bool ok = false;
    self->request(server, 10s, forward_atom::value, uint64_t{0}, encode(req))
        .receive([&](uint64_t, std::string&) { ok = true; }, [&](caf::error&) {});
    return ok;
  };
  // Committed before the commit deadline, but the reply leaves after the reply
  // deadline: the trainer has retried it; it must not count here.
  REQUIRE(ask(1, -1));
  REQUIRE(ask(2, 60));  // settles the first (withheld); this one is held
  REQUIRE(ask(1, 60));  // the retry comes back here: it counts now, not a duplicate
  REQUIRE(ask(2, 60));  // a true repeat: answered, not added again
  self->monitor(server);
  self->send_exit(server, caf::exit_reason::user_shutdown);  // settles the last held one
  self->receive([](const caf::down_msg&) {});
  CHECK(counters->withheld_samples == 2);
  CHECK(counters->committed_samples == 4);
  CHECK(counters->duplicates == 1);
  CHECK(worker->held_samples() == 0);
  CHECK(worker->accumulated_samples() == 4);
}

TEST_CASE_METHOD(system_fixture, "coordinator admits matching servers, refuses others, reports downs", "[actors]") {
  const std::string path = "/tmp/swarm-test-actors-metrics.jsonl";
  std::remove(path.c_str());
  auto metrics = std::make_shared<metrics_sink>(path, "coordinator");
  auto coord = sys->spawn(coordinator, coordinator_settings{2, 42}, metrics);
  caf::scoped_actor self{*sys};
  auto fake = sys->spawn(silent_server);

  proto::subscribe sub;
  sub.set_stage(1);
  sub.set_config_hash(42);
  bool subscribed = false;
  self->request(coord, 5s, subscribe_atom::value, encode(sub))
      .receive([&](const std::string&) { subscribed = true; }, [&](caf::error&) {});
  REQUIRE(subscribed);

  caf::error refused;
  self->request(coord, 5s, register_atom::value, encode(registration("bad", 1, 4000, 41)), fake, caf::actor{})
      .receive([](const std::string&) {}, [&](caf::error& err) { refused = err; });
  CHECK(code_of(refused) == errc::BAD_CONFIG);

  bool joined = false;
  self->request(coord, 5s, register_atom::value, encode(registration("s1", 1, 4000, 42)), fake, caf::actor{})
      .receive([&](const std::string&) { joined = true; }, [](caf::error&) {});
  REQUIRE(joined);
  proto::membership_update up;
  self->receive([&](membership_atom, const std::string& bytes) { up.ParseFromString(bytes); },
                caf::after(5s) >> [] { FAIL("no JOIN"); });
  CHECK(up.kind() == proto::membership_update::JOIN);
  CHECK(up.server_id() == "s1");
  CHECK(up.port() == 4000);

  self->send_exit(fake, caf::exit_reason::kill);
  self->receive([&](membership_atom, const std::string& bytes) { up.ParseFromString(bytes); },
                caf::after(5s) >> [] { FAIL("no DOWN"); });
  CHECK(up.kind() == proto::membership_update::DOWN);
  self->send_exit(coord, caf::exit_reason::user_shutdown);

  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(all.find("\"event\": \"server_join\"") != std::string::npos);
  CHECK(all.find("\"event\": \"server_down\"") != std::string::npos);
}

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
    registrar->request(coord, 5s, register_atom::value, encode(registration(id, 0, port, 42)), handle, caf::actor{})
        .receive([](const std::string&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
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
  self->request(lb, 30s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8)}, int64_t{2})
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
    auto server = sys->spawn(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                             std::make_shared<metrics_sink>(), std::make_shared<stage_server_counters>());
    auto port = sys->middleman().publish(server, 0, "127.0.0.1");
    REQUIRE(port);
    self->request(coord, 5s, register_atom::value, encode(registration(id, 0, *port, 42)), server, caf::actor{})
        .receive([](const std::string&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
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
  auto forward = [&] {
    std::string served_by;
    self->request(lb, 15s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8)}, int64_t{2})
        .receive([&](bulk_parts&, const std::string& server, int32_t) { served_by = server; },
                 [&](caf::error& err) { served_by = describe(err); });
    return served_by;
  };

  auto solo = serve("solo");
  const auto solo_door = door_of(solo);
  std::this_thread::sleep_for(300ms);  // the load balancer has connected and asked for the door
  // Each request asks, is granted the one place, and its server frees it when done:
  // without the release the fourth ask would find no room.
  for (int i = 0; i < 3; ++i)
    CHECK(forward() == "solo");
  CHECK(lbc.busy_answers->load() == 0);
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
  self->send(solo_door, release_atom::value, held);
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
  self->request(coord, 5s, register_atom::value, encode(registration("late", 0, port, 42)),
                caf::actor_cast<stage_actor>(late), caf::actor{})
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
  load_balancer_config lbc;
  lbc.config_hash = 42;
  lbc.trainer.forward_timeout_s = lbc.trainer.backward_timeout_s = lbc.trainer.no_server_wait_s = 60.0;
  auto lb = sys->spawn(load_balancer, lbc, caf::actor_cast<coordinator_actor>(coord), std::make_shared<metrics_sink>());
  std::this_thread::sleep_for(500ms);  // the first dial was refused by now
  REQUIRE(sys->middleman().publish(late, port, "127.0.0.1"));
  std::string served_by;
  self->request(lb, 15s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8)}, int64_t{2})
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
  self->request(lb, 30s, forward_atom::value, bulk_parts{forward_payload(0, 2, 8)}, int64_t{2})
      .receive([](const bulk_parts&, const std::string&, int32_t) { FAIL("served without servers"); },
               [&](caf::error& err) { result = err; });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(code_of(result) == errc::NO_SERVER);
  CHECK(waited >= 1.0);
  CHECK(waited < 5.0);  // the wait is counted from the first time it queued, not from the last retry
  self->send_exit(lb, caf::exit_reason::user_shutdown);
  self->send_exit(coord, caf::exit_reason::user_shutdown);
}

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
        ->request(coord, 5s, subscribe_atom::value, encode(sub))
        .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  }
  auto next_update = [](caf::scoped_actor& watcher) {
    proto::membership_update up;
    watcher->receive([&](membership_atom, const std::string& bytes) { up.ParseFromString(bytes); },
                     caf::after(10s) >> [] { FAIL("no membership update"); });
    return up;
  };
  // Registered by its node, as in the server role.
  self->request(server, 10s, register_atom::value, encode(registration("mover", 0, *port, hash)),
                caf::actor_cast<caf::actor>(coord))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  CHECK(next_update(watch0).kind() == proto::membership_update::JOIN);

  proto::move_order order;
  order.set_stage(1);  // not the stage it serves: ignored
  order.set_to_stage(0);
  self->send(server, move_atom::value, encode(order));
  order.set_stage(0);
  order.set_to_stage(1);
  order.set_reason("load");
  order.set_predicted_gain(0.5);
  self->send(server, move_atom::value, encode(order));
  const auto left = next_update(watch0);
  CHECK(left.kind() == proto::membership_update::LEAVE);
  CHECK(left.server_id() == "mover");
  const auto joined = next_update(watch1);
  CHECK(joined.kind() == proto::membership_update::JOIN);
  CHECK(joined.server_id() == "mover");
  // Work for the stage it left is refused as LEAVING (retried elsewhere), not as a bad request.
  caf::error refused;
  self->request(server, 10s, forward_atom::value, uint64_t{0}, forward_payload(0, 2, 8))
      .receive([](uint64_t, const std::string&) { FAIL("served a stage it left"); },
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
  auto ask = [&](const std::string& bytes) {
    caf::expected<proto::placement> out{caf::error{}};
    self->request(coord, 5s, place_atom::value, bytes)
        .receive([&](const std::string& reply) { out = decode<proto::placement>(reply, "placement"); },
                 [&](caf::error& err) { out = err; });
    return out;
  };
  CHECK(code_of(ask(std::string("\xff\xff\xff", 3)).error()) == errc::BAD_REQUEST);
  proto::placement_request req;
  req.set_config_hash(42);
  CHECK(code_of(ask(encode(req)).error()) == errc::BAD_REQUEST);  // no server id
  req.set_server_id("a");
  req.set_config_hash(41);
  CHECK(code_of(ask(encode(req)).error()) == errc::BAD_CONFIG);
  // Two servers asking in turn spread over the empty stages: the first answer counts as placed.
  req.set_config_hash(42);
  auto first = ask(encode(req));
  req.set_server_id("b");
  auto second = ask(encode(req));
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->stage() == 0);
  CHECK(second->stage() == 1);
  // A leave_notice from an actor that never registered changes nothing.
  proto::leave_notice note;
  note.set_stage(0);
  note.set_to_stage(1);
  self->send(coord, leave_atom::value, encode(note));
  self->send(coord, leave_atom::value, std::string("garbage"));
  proto::subscribe sub;
  sub.set_stage(0);
  proto::server_list list;
  self->request(coord, 5s, peers_atom::value, encode(sub))
      .receive([&](const std::string& bytes) { list.ParseFromString(bytes); },
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
  watch->request(coord, 5s, subscribe_atom::value, encode(sub))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  self->request(server, 10s, register_atom::value, encode(registration("fenced", 0, *port, hash)),
                caf::actor_cast<caf::actor>(coord))
      .receive([](const std::string&) {}, [](caf::error& err) { FAIL(describe(err)); });
  auto next_update = [&](caf::duration wait) {
    std::optional<proto::membership_update> up;
    watch->receive([&](membership_atom, const std::string& bytes) { up.emplace().ParseFromString(bytes); },
                   caf::after(wait) >> [] {});
    return up;
  };
  CHECK(next_update(caf::duration{10s}));  // its JOIN

  // A deposed leader's (term 3) round and move: refused, the server stays.
  proto::round_begin begin;
  begin.set_stage(0);
  begin.set_round(1);
  begin.set_step(0);
  begin.add_members("fenced");
  begin.set_timeout_s(5);
  begin.set_piece_elements(1024);
  begin.set_term(3);
  self->send(server, round_atom::value, encode(begin), std::vector<caf::actor>{caf::actor_cast<caf::actor>(server)});
  proto::move_order order;
  order.set_stage(0);
  order.set_to_stage(1);
  order.set_reason("load");
  order.set_term(3);
  self->send(server, move_atom::value, encode(order));
  CHECK_FALSE(next_update(caf::duration{1500ms}));  // no LEAVE
  // The same move of the current term is carried out.
  order.set_term(7);
  self->send(server, move_atom::value, encode(order));
  const auto left = next_update(caf::duration{10s});
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
