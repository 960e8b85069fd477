// Durability with real processes of the real binary: SIGTERM at any moment ends
// every role within seconds, exit events written, no partial file left.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include "models/checkpoint.hpp"
#include "process_util.hpp"
#include "durability_helpers.hpp"

using namespace swarm::test;
namespace fs = std::filesystem;
using namespace swarm::test::durability_helpers;

namespace {

/// SIGTERM to `pid`: its exit code (nullopt: still running after 30 s) and how long it took.
std::pair<std::optional<int>, double> timed_stop(pid_t pid) {
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGTERM);
  const auto code = wait_exit(pid, 30);
  return {code, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

TEST_CASE("SIGTERM ends a server downloading state, and one hung in a handler, within seconds", "[durability]") {
  manual_swarm swarm({}, "sigterm-download", true);
  REQUIRE(!swarm.address.empty());
  const pid_t holder = swarm.server(0, {"--fault", "hang-state"});
  REQUIRE(swarm.public_ports(1).size() == 2);
  const pid_t joining = swarm.server(0);
  REQUIRE(wait_for_metrics(
      swarm.metrics,
      [](const auto& lines) {
        for (const auto& l : lines)
          if (is_event(l, "fault"))
            return true;
        return false;
      },
      30));
  const auto [joining_code, joining_s] = timed_stop(joining);
  const auto [holder_code, holder_s] = timed_stop(holder);
  swarm.servers.clear();
  std::printf("SIGTERM: server downloading state exit %d after %.2f s; server hung in a handler exit %d after %.2f s\n",
              joining_code.value_or(-1), joining_s, holder_code.value_or(-1), holder_s);
  CHECK(joining_code == 0);
  CHECK(holder_code == 0);
  CHECK(joining_s < 8);
  CHECK(holder_s < 8);
  std::string log;
  for (const auto& l : read_lines(swarm.output))
    log += l + "\n";
  CHECK_THAT(log, Catch::Contains("while downloading the stage's state; exiting now"));
  std::remove(swarm.output.c_str());
}

TEST_CASE("SIGTERM ends every role within seconds, exit events written, no partial file", "[durability]") {
  const auto dir = fresh_dir("sigterm");
  manual_swarm swarm({"--checkpoint-dir", dir, "--checkpoint-every", "1"}, "sigterm", true);
  REQUIRE(!swarm.address.empty());
  const pid_t s0 = swarm.server(0);
  const pid_t s1 = swarm.server(1);
  const pid_t t = swarm.trainer({"--max-steps", "0"});
  REQUIRE(wait_for_metrics(
      swarm.metrics,
      [](const auto& lines) {
        int steps = 0;
        for (const auto& l : lines)
          steps += is_event(l, "step");
        return steps >= 30;
      },
      90));
  // The trainer mid-training: trainer_exit with what was in flight, and its position saved.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto [trainer_code, trainer_s] = timed_stop(t);
  std::printf("trainer stopped: exit %d after %.2f s\n", trainer_code.value_or(-1), trainer_s);
  CHECK(trainer_code == 0);
  CHECK(trainer_s < 5);
  const auto exits = events(swarm.metrics, "trainer_exit");
  REQUIRE(exits.size() == 1);
  CHECK(number(exits[0], "issued") ==
        number(exits[0], "completed") + number(exits[0], "dropped") + number(exits[0], "in_flight"));
  swarm::checkpoint_store store{dir, 3};
  const auto position = store.latest_written(swarm::checkpoint_header::kind::trainer, 0);
  REQUIRE(position);
  CHECK(position->step == number(exits[0], "steps"));

  // Servers in the middle of rounds and checkpoint writes (one per step), and the coordinator.
  const auto [s1_code, s1_s] = timed_stop(s1);
  const auto [s0_code, s0_s] = timed_stop(s0);
  const auto [c_code, c_s] = timed_stop(swarm.coordinator);
  swarm.servers.clear();
  swarm.coordinator = 0;
  std::printf("servers stopped after %.2f and %.2f s, the coordinator after %.2f s\n", s1_s, s0_s, c_s);
  CHECK(s1_code == 0);
  CHECK(s0_code == 0);
  CHECK(c_code == 0);
  CHECK(std::max({s1_s, s0_s, c_s}) < 5);
  CHECK(events(swarm.metrics, "server_exit").size() == 2);
  CHECK(partial_files(dir) == 0);
  for (int stage : {0, 1}) {
    auto newest = store.newest(swarm::checkpoint_header::kind::stage, stage, 2, tiny_hash());
    REQUIRE(newest);
    REQUIRE(newest->has_value());
    CHECK((*newest)->skipped == 0);  // whole and readable
  }
  fs::remove_all(dir);
}

TEST_CASE("a cluster stopped with SIGTERM mid-training ends every process without the launcher's SIGKILL",
          "[durability]") {
  for (int run = 0; run < test_size(1, 5); ++run) {
    const auto metrics = fresh_dir("stop") + ".jsonl";
    std::remove(metrics.c_str());
    const std::string out = metrics + ".log";
    std::remove(out.c_str());
    const pid_t cluster = spawn_swarm(
        {"--role", "cluster", "--config", tiny, "--metrics", metrics, "--log-level", "warn", "--max-steps", "0"}, out);
    REQUIRE(wait_for_metrics(
        metrics,
        [](const auto& lines) {
          int steps = 0;
          for (const auto& l : lines)
            steps += is_event(l, "step");
          return steps >= 20;
        },
        90));
    const auto t0 = std::chrono::steady_clock::now();
    kill(cluster, SIGTERM);
    const auto code = wait_exit(cluster, 60);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string log;
    for (const auto& l : read_lines(out))
      log += l + "\n";
    std::printf("cluster stopped in %.2f s\n", secs);
    CHECK(code == 0);
    CHECK(secs < 10);
    CHECK_THAT(log, !Catch::Contains("ignored SIGTERM"));
    CHECK(events(metrics, "trainer_exit").size() == 1);
    CHECK(events(metrics, "server_exit").size() == 4);
    std::remove(metrics.c_str());
    std::remove(out.c_str());
  }
}
