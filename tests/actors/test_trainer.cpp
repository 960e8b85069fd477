// The trainer actor against fake load balancers whose replies it cannot tell
// from real ones: what it says about the stages' optimizer steps.
#include <ATen/core/Tensor.h>

#include <catch2/catch.hpp>

#include <fstream>

#include <caf/all.hpp>

#include "actors/trainer.hpp"
#include "fixtures.hpp"
#include "messages/protocol.hpp"
#include "messages/wire.hpp"

using namespace swarm;
using swarm::testing::system_fixture;

namespace {

proto::tensor floats(int64_t n) {
  proto::tensor t;
  t.add_shape(n);
  t.set_dtype(proto::FLOAT32);
  t.set_codec(proto::RAW);
  t.set_data(std::string(static_cast<size_t>(n) * 4, '\0'));
  return t;
}

using reply = caf::result<std::vector<std::string>, std::string, int32_t>;

/// A load balancer of one stage whose server reports `step(n)` at its n-th reply.
caf::behavior fake_stage(caf::event_based_actor* self, bool last, std::function<int64_t(int64_t)> step) {
  auto replies = std::make_shared<int64_t>(0);
  return {
      [=](forward_atom, std::vector<std::string>&, int64_t) -> reply {
        proto::forward_reply rep;
        rep.set_server_step(static_cast<uint64_t>(step(++*replies)));
        if (last) {
          rep.set_loss(1.0f);
          *rep.mutable_input_grad() = floats(4);
        } else {
          *rep.mutable_outputs() = floats(4);
        }
        return {encode_parts(rep), "fake", int32_t{1}};
      },
      [=](backward_atom, std::vector<std::string>&, int64_t, std::string&) -> reply {
        proto::backward_reply rep;
        rep.set_server_step(static_cast<uint64_t>(step(++*replies)));
        return {encode_parts(rep), "fake", int32_t{1}};
      },
  };
}

std::vector<std::string> lines_with(const std::string& path, const std::string& what) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (l.find(what) != std::string::npos)
      out.push_back(l);
  return out;
}

/// Trains 40 steps of one microbatch each against the two fakes; the metrics file.
std::string train(caf::actor_system& sys, std::function<int64_t(int64_t)> stage0,
                  std::function<int64_t(int64_t)> stage1) {
  const std::string path = "/tmp/swarm-test-trainer-" + std::to_string(::getpid()) + ".jsonl";
  std::remove(path.c_str());
  trainer_settings cfg;
  cfg.trainer_id = "t-fake";
  cfg.model.seq_len = 8;
  cfg.model.microbatch = 2;
  cfg.train.batch_size = 2;
  cfg.train.max_steps = 40;
  cfg.train.in_flight = 1;
  auto metrics = std::make_shared<metrics_sink>(path, "trainer");
  auto text = std::make_shared<const corpus>(std::string(4096, 'x'));
  std::vector<caf::actor> stages{sys.spawn(fake_stage, false, std::move(stage0)),
                                 sys.spawn(fake_stage, true, std::move(stage1))};
  auto t = sys.spawn(trainer, cfg, text, stages, metrics);
  caf::scoped_actor self{sys};
  self->monitor(t);
  bool ended = false;
  self->receive([&](caf::down_msg&) { ended = true; }, caf::after(std::chrono::seconds(30)) >> [] {});
  REQUIRE(ended);
  for (auto& s : stages)
    self->send_exit(s, caf::exit_reason::user_shutdown);
  return path;
}

}  // namespace

TEST_CASE_METHOD(system_fixture, "the trainer warns when a stage stops stepping while the others go on",
                 "[actors][trainer]") {
  // Stage 0 stays at step 3; stage 1 steps at every reply.
  const auto path = train(
      *sys, [](int64_t) { return 3; }, [](int64_t n) { return n; });
  const auto lag = lines_with(path, "\"stage_lag\"");
  REQUIRE(!lag.empty());
  CHECK(lag[0].find("\"stage\": 0") != std::string::npos);
  CHECK(lag[0].find("\"step\": 3") != std::string::npos);
  CHECK(lag[0].find("\"gained\": 6") != std::string::npos);
  CHECK(lag.size() >= 5);  // again each 5 steps more: 6, 11, ... as it stays
  const auto exit = lines_with(path, "\"trainer_exit\"");
  REQUIRE(exit.size() == 1);
  CHECK(exit[0].find("\"stage_steps\": \"3/40\"") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE_METHOD(system_fixture, "the trainer stays quiet while the stages step together, drifting apart",
                 "[actors][trainer]") {
  // Stage 1 takes 11 steps for every 10 of stage 0's (rounds closing past the batch).
  const auto path = train(
      *sys, [](int64_t n) { return 100 + n; }, [](int64_t n) { return n + n / 10; });
  CHECK(lines_with(path, "\"stage_lag\"").empty());
  REQUIRE(lines_with(path, "\"trainer_exit\"").size() == 1);
  std::remove(path.c_str());
}
