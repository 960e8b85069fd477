// Tier (c): stage reassignment of the real binary as real processes. The
// rebalancer moves servers between stages (actors/rebalancer.hpp): a stage
// served by one server gets a second from a stage with spare ones, a stage that
// loses every server gets one at once, and a moved server holds its new stage's
// state (equal parameter hashes with its peers).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "process_util.hpp"

using namespace swarm::test;

namespace {

/// The first event of `name` by `server` about `stage`; empty when none.
std::string first_of(const std::string& metrics, const std::string& name, const std::string& server, int stage) {
  for (const auto& l : events(metrics, name))
    if (text(l, "server") == server && number(l, "stage") == stage)
      return l;
  return {};
}

/// Stages lost before `before` (only failures write stage_lost; a stage's
/// last server stopped at the end of a run does not).
size_t lost_before(const std::string& metrics, double before) {
  const auto lost = events(metrics, "stage_lost");
  return static_cast<size_t>(
      std::count_if(lost.begin(), lost.end(), [&](const auto& l) { return number(l, "t") < before; }));
}

/// Every join, down, move, loss and exit, for the report of a failed check.
std::string lifecycle(const std::string& metrics) {
  std::string out;
  for (const char* name : {"server_join", "server_down", "rebalance", "stage_lost", "server_exit"})
    for (const auto& l : events(metrics, name))
      out += l + "\n";
  return out;
}

/// Steps of `stage` after `from_step` at which `server` and at least one other reported equal parameters.
size_t shared_steps(const std::string& metrics, int stage, const std::string& server, int64_t from_step) {
  size_t n = 0;
  for (const auto& [key, hashes] : params_by_step(metrics))
    n += key.first == stage && key.second > from_step && hashes.count(server) > 0 && hashes.size() >= 2;
  return n;
}

/// Largest pause between consecutive trainer steps after unix time `after`, seconds.
double longest_stall(const std::string& metrics, double after) {
  double last = after, worst = 0;
  for (const auto& l : events(metrics, "step")) {
    const double t = number(l, "t");
    if (t < after)
      continue;
    worst = std::max(worst, t - last);
    last = t;
  }
  return worst;
}

/// Each stage's servers added exactly what the trainer saw acknowledged (no server died there).
void check_exact(const std::string& metrics, int stage) {
  const auto committed = committed_per_stage(metrics);
  const auto acked = acked_per_stage(metrics);
  REQUIRE(acked.size() > static_cast<size_t>(stage));
  INFO("stage " << stage);
  CHECK(committed.at(stage) == acked[static_cast<size_t>(stage)]);
}

/// 3 servers on stage 0, 2 on stage 1, and a trainer of `steps` steps, both
/// stages trained a little, the rebalancer settled. No load moves (min gain
/// 100x): only thin and empty stages are served, at once, once the rebalancer
/// settled (min(period, 10 s) after its start). Its period is 10 s so that it
/// settles only after all five servers joined: on loaded cores they joined over
/// more than 3 s and a settled rebalancer gave the lone stage-1 server a
/// partner before the second arrived (a setup with 2,3 servers).
struct three_two {
  static constexpr double settle_s = 10;
  const double started = unix_seconds();
  manual_swarm swarm{{"--rebalance-period", "10", "--rebalance-min-gain", "100", "--threads", "1"}, "rebalance"};
  std::vector<pid_t> stage1;
  pid_t trainer = 0;

  explicit three_two(int steps) {
    REQUIRE_FALSE(swarm.address.empty());
    for (int i = 0; i < 3; ++i)
      swarm.server(0);
    stage1 = {swarm.server(1), swarm.server(1)};
    REQUIRE(swarm.public_ports(5).size() == 6);
    trainer = swarm.trainer({"--max-steps", std::to_string(steps)});
    // Both stages trained a little (a stage lost at step 0 loses nothing: it is not reported).
    REQUIRE(wait_for_metrics(
        swarm.metrics,
        [](const auto& lines) {
          std::set<int> trained;
          for (const auto& l : lines)
            if (is_event(l, "round_end") && number(l, "applied") > 0 && number(l, "step") >= 3)
              trained.insert(static_cast<int>(number(l, "stage")));
          return trained.size() == 2;
        },
        60));
    const auto early = events(swarm.metrics, "rebalance");
    INFO("a move before the rebalancer settled: " << (early.empty() ? "" : early[0]));
    REQUIRE(early.empty());
    // Kills before it settled would be answered at its first tick, not at once.
    const double settled = started + settle_s + 0.5;
    if (unix_seconds() < settled)
      std::this_thread::sleep_for(std::chrono::duration<double>(settled - unix_seconds()));
  }
};

}  // namespace

TEST_CASE("uneven start 3,1: a server moves to the lone stage with its state, no microbatch dropped", "[rebalancing]") {
  const std::string metrics = "/tmp/swarm-test-rebalance-" + std::to_string(getpid()) + ".jsonl";
  std::remove(metrics.c_str());
  const double period = 4;
  // Trains until the mover has stepped 10 times with its new peer, then the
  // cluster is stopped (trainers first: their microbatches in flight finish).
  const pid_t cluster =
      spawn_swarm({"--role", "cluster", "--config", tiny, "--stage-servers", "3,1", "--rebalance-period",
                   std::to_string(period), "--max-steps", "0", "--metrics", metrics, "--log-level", "warn"});
  const auto [stepped_together, code] = stop_when(
      cluster, metrics,
      [&](const auto&) {
        const auto moves = events(metrics, "rebalance");
        if (moves.empty())
          return false;
        const auto download = first_of(metrics, "state_download", text(moves[0], "server"), 1);
        return !download.empty() &&
               shared_steps(metrics, 1, text(moves[0], "server"), static_cast<int64_t>(number(download, "step"))) >= 10;
      },
      120);
  REQUIRE(code == 0);
  REQUIRE(stepped_together);

  const auto moves = events(metrics, "rebalance");
  REQUIRE(!moves.empty());
  const auto& move = moves.front();
  const std::string mover = text(move, "server");
  CHECK(number(move, "from") == 0);
  CHECK(number(move, "to") == 1);
  // Redundancy (stage 1 had one server) comes before throughput; either is right here.
  CHECK((text(move, "reason") == "redundancy" || text(move, "reason") == "load"));
  CHECK(move.find("\"state_copied\": true") != std::string::npos);
  // Ordered within two periods of the rebalancer's start (its first stage_load).
  const double ordered = number(move, "t") - number(move, "seconds");
  const double started = number(events(metrics, "stage_load").front(), "t");
  std::printf("move of %s: ordered %.2f s after the rebalancer started (period %.0f s), took %.3f s\n", mover.c_str(),
              ordered - started, period, number(move, "seconds"));
  CHECK(ordered - started <= 2 * period + 0.5);
  // It copied stage 1's state from its peer, then stepped with it with equal parameters.
  const auto download = first_of(metrics, "state_download", mover, 1);
  REQUIRE(!download.empty());
  const auto copied_step = static_cast<int64_t>(number(download, "step"));
  const size_t together = shared_steps(metrics, 1, mover, copied_step);
  std::printf("it copied stage 1 at step %lld and shared %zu later steps with its peer\n",
              static_cast<long long>(copied_step), together);
  CHECK(together >= 5);  // 9-40 seen: the move waits up to 10 s to hand its gradient in first
  CHECK(params_disagreements(metrics).empty());
  // The stage it left went on without it; it wrote server_exit for stage 0 when it left.
  const auto left = first_of(metrics, "server_exit", mover, 0);
  REQUIRE(!left.empty());
  CHECK(number(left, "moved_to") == 1);
  // It handed its gradient to stage 0's next round before leaving: nothing thrown away.
  CHECK(number(left, "dropped_samples") == 0);
  // Training went on: every step, nothing dropped, every acked sample added exactly once per stage.
  const auto exit = events(metrics, "trainer_exit");
  REQUIRE(exit.size() == 1);
  CHECK(number(exit[0], "in_flight") == 0);
  CHECK(number(exit[0], "dropped") == 0);
  check_exact(metrics, 0);
  check_exact(metrics, 1);
  std::remove(metrics.c_str());
}

TEST_CASE("chaos of short SIGSTOPs and a clean move: no gradient dropped anywhere", "[rebalancing]") {
  // Stops (0.15 s) shorter than a step (128 samples, about 0.4 s here) leave a
  // stopped server's gradient at most a step stale, which it keeps; the move
  // hands its gradient in first; the end stops every server on purpose.
  const std::string metrics = "/tmp/swarm-test-chaos-stop-" + std::to_string(getpid()) + ".jsonl";
  std::remove(metrics.c_str());
  REQUIRE(run_swarm(
              {"--role",       "cluster", "--config",    tiny,    "--stage-servers", "3,1",  "--rebalance-period", "4",
               "--batch-size", "128",     "--max-steps", "40",    "--chaos",         "stop", "--chaos-every",      "2",
               "--chaos-down", "0.15",    "--metrics",   metrics, "--log-level",     "warn"},
              240) == 0);
  const auto chaos = events(metrics, "chaos");
  const auto stops =
      std::count_if(chaos.begin(), chaos.end(), [](const auto& l) { return text(l, "action") == "stop"; });
  const auto moves = events(metrics, "rebalance");
  int64_t dropped = 0, carried = 0;
  for (const auto& l : events(metrics, "server_exit")) {
    dropped += static_cast<int64_t>(number(l, "dropped_samples"));
    carried += static_cast<int64_t>(number(l, "carried_gradients"));
  }
  std::printf("chaos: %lld stops, %zu moves, %lld samples dropped, %lld gradients carried over\n",
              static_cast<long long>(stops), moves.size(), static_cast<long long>(dropped),
              static_cast<long long>(carried));
  CHECK(stops >= 3);
  CHECK(moves.size() >= 1);
  CHECK(dropped == 0);
  const auto exits = events(metrics, "trainer_exit");
  REQUIRE(exits.size() == 1);
  CHECK(number(exits[0], "dropped") == 0);
  CHECK(params_disagreements(metrics).empty());
  std::remove(metrics.c_str());
}

TEST_CASE("3,2 and both stage-1 servers killed 10 s apart: a stage-0 server fills in before the second kill",
          "[rebalancing]") {
  // The trainer runs until it has trained 60 steps after the second kill, then
  // is stopped: it lets its microbatches in flight finish, so the accounting
  // stays exact (a fixed 2,400 steps took 130 s here; 1,200 once ran out before
  // the second kill).
  three_two run(0);
  auto& swarm = run.swarm;
  const pid_t trainer = run.trainer;
  kill(run.stage1[0], SIGKILL);
  const auto first_kill_at = std::chrono::steady_clock::now();
  const double first_kill = unix_seconds();
  // A stage-0 server comes over and copies the survivor's state.
  REQUIRE(wait_for_metrics(
      swarm.metrics,
      [](const auto& lines) {
        return std::any_of(lines.begin(), lines.end(),
                           [](const auto& l) { return is_event(l, "rebalance") && number(l, "to") == 1; });
      },
      10));
  std::this_thread::sleep_until(first_kill_at + std::chrono::seconds(10));
  REQUIRE(wait_exit(trainer, 0.01) == std::nullopt);  // still training: the second kill must land mid-run
  kill(run.stage1[1], SIGKILL);
  const double second_kill = unix_seconds();
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const auto& lines) { return steps_after(lines, second_kill) >= 60; }, 120));
  CHECK(stop(trainer) == 0);
  const double trained = unix_seconds();
  swarm.shutdown();

  const auto move = events(swarm.metrics, "rebalance").at(0);
  const std::string mover = text(move, "server");
  const double ordered = number(move, "t") - number(move, "seconds");
  std::printf(
      "redundancy move of %s ordered %.2f s after the first kill, done %.2f s after it; second kill at +%.1f s\n",
      mover.c_str(), ordered - first_kill, number(move, "t") - first_kill, second_kill - first_kill);
  CHECK(text(move, "reason") == "redundancy");
  CHECK(number(move, "from") == 0);
  CHECK(number(move, "t") < second_kill);
  // It copied the survivor's state (not initial parameters).
  const auto download = first_of(swarm.metrics, "state_download", mover, 1);
  REQUIRE(!download.empty());
  CHECK(number(download, "step") > 0);
  CHECK(number(download, "t") < second_kill);
  // The stage never emptied, so nothing was lost and nobody else moved.
  CHECK(lost_before(swarm.metrics, trained) == 0);
  const auto moves = events(swarm.metrics, "rebalance");
  CHECK(std::count_if(moves.begin(), moves.end(), [&](const auto& l) { return number(l, "t") < trained; }) == 1);
  const double stall = longest_stall(swarm.metrics, first_kill);
  std::printf("longest pause between steps after the first kill: %.2f s; training ended %.1f s after it\n", stall,
              trained - first_kill);
  CHECK(stall < 5);
  check_trainer_accounting(swarm.metrics, -1);
  CHECK(number(events(swarm.metrics, "trainer_exit").at(0), "in_flight") == 0);  // it let them finish
  // Stage 0 lost no server (one left it cleanly): exact. Stage 1's dead took theirs with them.
  check_exact(swarm.metrics, 0);
  CHECK(committed_per_stage(swarm.metrics).at(1) <= acked_per_stage(swarm.metrics).at(1));
  const auto disagreements = params_disagreements(swarm.metrics);
  for (const auto& [stage, step] : disagreements)
    UNSCOPED_INFO("servers of stage " << stage << " reported different parameters at step " << step);
  CHECK(disagreements.empty());
}

TEST_CASE(
    "a stage wiped out at once: a server is reassigned at once and starts from initial parameters, "
    "and the loss of state is reported",
    "[rebalancing]") {
  // The trainer runs until stopped, 80 steps after the wipe (a fixed step
  // count could end before the rebalancer settled: 300 steps took 10 s here).
  three_two run(0);
  auto& swarm = run.swarm;
  const pid_t trainer = run.trainer;
  REQUIRE(wait_exit(trainer, 0.01) == std::nullopt);
  for (pid_t pid : run.stage1)
    kill(pid, SIGKILL);
  const double killed = unix_seconds();
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const std::vector<std::string>& lines) { return steps_after(lines, killed) >= 80; }, 240));
  CHECK(stop(trainer) == 0);
  const double trained = unix_seconds();
  swarm.shutdown();

  INFO("killed at " << std::fixed << killed << ", trainer done at " << trained << ":\n" << lifecycle(swarm.metrics));
  REQUIRE(lost_before(swarm.metrics, trained) == 1);
  const auto lost = events(swarm.metrics, "stage_lost");
  CHECK(number(lost[0], "stage") == 1);
  CHECK(number(lost[0], "step") > 0);
  const auto move = events(swarm.metrics, "rebalance").at(0);
  const double ordered = number(move, "t") - number(move, "seconds");
  std::printf("stage 1 lost its state at step %.0f; %s ordered over %.2f s after the kill, serving %.2f s after it\n",
              number(lost[0], "step"), text(move, "server").c_str(), ordered - killed, number(move, "t") - killed);
  // The two down events arrive apart: after the first the stage is short of
  // replicas (redundancy), after the second empty; either way at once, with
  // nobody left to copy from.
  CHECK((text(move, "reason") == "empty" || text(move, "reason") == "redundancy"));
  CHECK(number(move, "from") == 0);
  CHECK(number(move, "to") == 1);
  CHECK(move.find("\"state_copied\": false") != std::string::npos);
  CHECK(ordered - killed < 3);
  // Training went on after the stage came back.
  const double stall = longest_stall(swarm.metrics, killed);
  std::printf("longest pause between steps after the kill: %.2f s\n", stall);
  CHECK(stall < 10);
  const auto exits = events(swarm.metrics, "trainer_exit");
  REQUIRE(exits.size() == 1);
  CHECK(number(exits[0], "in_flight") == 0);  // it let them finish
  CHECK(number(exits[0], "issued") == number(exits[0], "completed") + number(exits[0], "dropped"));
  check_exact(swarm.metrics, 0);
  // Stage 1 started over, so its steps up to the lost one were reported twice with
  // other parameters; nothing else may differ. The servers finish a round among
  // themselves (actors/round_peer.cpp), so the killed ones may have applied one
  // more than stage_lost names, which is the last the averager heard of (seen
  // once in CI: params at step 73, stage_lost at 72).
  for (const auto& [stage, step] : params_disagreements(swarm.metrics)) {
    INFO("stage " << stage << " step " << step);
    CHECK((stage == 1 && step <= number(lost[0], "step") + 1));
  }
}
