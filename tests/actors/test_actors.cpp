// Tier (b): actor protocols inside one process, over a real middleman on loopback:
// the stage server's answers and reply deadlines, the coordinator's admissions.
// torch (through the stage server) before catch.hpp: glog's CHECK would otherwise replace Catch2's.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/coordinator.hpp"
#include "base/clock.hpp"
#include "actors/stage_server.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"
#include "policy/verification.hpp"
#include "fixtures.hpp"
#include "actor_helpers.hpp"

using namespace swarm;
using swarm::testing::system_fixture;
using namespace std::chrono_literals;
using namespace swarm::testing::actor_helpers;

TEST_CASE_METHOD(system_fixture, "stage server answers bad requests with errors and keeps serving", "[actors]") {
  auto worker = std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu");
  // 1 KiB chunks so the 2x8x16 float reply (1 KiB + header) must travel in pieces.
  auto server = sys->spawn(stage_server, server_settings("s0", 1024), worker, std::make_shared<metrics_sink>(),
                           std::make_shared<stage_server_counters>());
  caf::scoped_actor self{*sys};
  auto ask = [&](uint64_t transfer, std::string payload) {
    caf::expected<std::pair<uint64_t, std::string>> out{caf::error{}};
    self->request(server, 10s, forward_atom::value, transfer, encoded<proto::forward_request>{std::move(payload)})
        .receive(
            [&](uint64_t id, encoded<proto::forward_reply>& tail) { out = std::make_pair(id, std::move(tail.bytes)); },
            [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  auto garbage = ask(0, std::string("\xff\xff\xff", 3));
  REQUIRE_FALSE(garbage);
  CHECK(code_of(garbage.error()) == errc::BAD_REQUEST);
  auto wrong_stage = ask(0, forward_payload(1, 2, 8).bytes);
  REQUIRE_FALSE(wrong_stage);
  CHECK((code_of(wrong_stage.error()) == errc::UNKNOWN_STAGE || code_of(wrong_stage.error()) == errc::BAD_REQUEST));
  auto too_long = ask(0, forward_payload(0, 2, 9).bytes);
  REQUIRE_FALSE(too_long);
  CHECK(code_of(too_long.error()) == errc::WRONG_SHAPE);
  auto orphan = ask(77, "tail");  // a transfer whose chunks never came
  REQUIRE_FALSE(orphan);
  CHECK(code_of(orphan.error()) == errc::BAD_REQUEST);

  // A valid request, itself sent in chunks, still works after all that.
  uint64_t next = 0;
  auto piece = cut(forward_payload(0, 2, 8).bytes, 40, next);
  REQUIRE(piece.lead.size() >= 2);
  for (auto& p : piece.lead)
    self->send(server, chunk_atom::value, piece.transfer_id, p);
  auto ok = ask(piece.transfer_id, piece.tail);
  REQUIRE(ok);
  CHECK(ok->first != 0);  // the reply came in chunks too
  chunk_assembler chunks;
  self->receive_while([&] { return self->mailbox().size() > 0; })(
      [&](chunk_atom, uint64_t id, const std::string& bytes) {
        (void)chunks.add(server.address(), id, bytes, std::chrono::steady_clock::now());
      });
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
    self->request(server, 10s, forward_atom::value, uint64_t{0}, wrap(req))
        .receive([&](uint64_t, encoded<proto::forward_reply>&) { ok = true; }, [&](caf::error&) {});
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
  self->request(coord, 5s, subscribe_atom::value, wrap(sub))
      .receive([&](const std::string&) { subscribed = true; }, [&](caf::error&) {});
  REQUIRE(subscribed);

  caf::error refused;
  self->request(coord, 5s, register_atom::value, wrap(registration("bad", 1, 4000, 41)), fake, caf::actor{})
      .receive([](const encoded<proto::register_reply>&) {}, [&](caf::error& err) { refused = err; });
  CHECK(code_of(refused) == errc::BAD_CONFIG);

  bool joined = false;
  self->request(coord, 5s, register_atom::value, wrap(registration("s1", 1, 4000, 42)), fake, caf::actor{})
      .receive([&](const encoded<proto::register_reply>&) { joined = true; }, [](caf::error&) {});
  REQUIRE(joined);
  proto::membership_update up;
  self->receive([&](membership_atom, const encoded<proto::membership_update>& m) { up.ParseFromString(m.bytes); },
                caf::after(5s) >> [] { FAIL("no JOIN"); });
  CHECK(up.kind() == proto::membership_update::JOIN);
  CHECK(up.server_id() == "s1");
  CHECK(up.port() == 4000);

  self->send_exit(fake, caf::exit_reason::kill);
  self->receive([&](membership_atom, const encoded<proto::membership_update>& m) { up.ParseFromString(m.bytes); },
                caf::after(5s) >> [] { FAIL("no DOWN"); });
  CHECK(up.kind() == proto::membership_update::DOWN);
  self->send_exit(coord, caf::exit_reason::user_shutdown);

  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(all.find("\"event\": \"server_join\"") != std::string::npos);
  CHECK(all.find("\"event\": \"server_down\"") != std::string::npos);
}

TEST_CASE_METHOD(system_fixture, "a server told to lie (--fault noise) answers with noise; an honest one does not",
                 "[actors][verify]") {
  // Two servers of stage 0 of 2 with the same parameters (the model's seed):
  // the same request must come back the same from honest ones (issue #47's
  // verification compares them), and far apart from the liar.
  caf::scoped_actor self{*sys};
  auto answer = [&](const std::string& id, bool lie) {
    auto scfg = server_settings(id);
    if (lie)
      scfg.server.fault = server_config::fault_kind::noise, scfg.server.allow_faults = true;
    auto server = sys->spawn(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                             std::make_shared<metrics_sink>(), std::make_shared<stage_server_counters>());
    std::vector<float> out;
    self->request(server, 10s, forward_atom::value, uint64_t{0}, forward_payload(0, 2, 8))
        .receive(
            [&](uint64_t, encoded<proto::forward_reply>& bytes) {
              auto rep = decode(bytes);
              REQUIRE(rep);
              auto t = decode_tensor(rep->outputs(), "outputs");
              REQUIRE(t);
              auto f = t->contiguous();
              out.assign(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
            },
            [&](caf::error& err) { FAIL(describe(err)); });
    self->send_exit(server, caf::exit_reason::user_shutdown);
    return out;
  };
  const auto honest = answer("honest", false), again = answer("again", false), liar = answer("liar", true);
  REQUIRE(honest.size() == liar.size());
  CHECK(policy::relative_distance(honest.data(), again.data(), honest.size()) <= policy::verify_tolerance(false));
  CHECK(policy::relative_distance(honest.data(), liar.data(), honest.size()) > 10 * policy::verify_tolerance(true));
}
