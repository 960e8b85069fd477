// Tier (c): fault tolerance of the real binary as real processes on loopback.
// Servers are killed with SIGKILL while they hold a forward and a backward,
// stopped with SIGSTOP, and slowed down; training must go on, the loss keep
// falling, and every sample be accounted for.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "process_util.hpp"

using namespace swarm::test;

TEST_CASE("training goes on when servers die holding a forward and a backward", "[faults]") {
  manual_swarm swarm({"--forward-timeout", "20", "--backward-timeout", "20"});
  REQUIRE_FALSE(swarm.address.empty());
  swarm.server(0);
  const pid_t hangs_in_backward = swarm.server(0, {"--fault", "hang-backward", "--fault-after", "40"});
  swarm.server(1);
  const pid_t hangs_in_forward = swarm.server(1, {"--fault", "hang-forward", "--fault-after", "40"});
  REQUIRE(swarm.public_ports(4).size() == 5);  // all serving from the first step: a late one might see no 40th
  // The faults hit each faulty server's 40th request; the router shares a
  // stage's requests by measured speed, so a server it favours less may take a
  // while (100 steps were too few once: the forward fault never came). The
  // trainer trains until both were killed and 60 steps more, then is stopped
  // (it lets its microbatches in flight finish).
  const pid_t trainer = swarm.trainer({"--max-steps", "0"});

  // kill -9 each faulty server as soon as it holds its request.
  std::set<std::string> killed_ops;
  REQUIRE(wait_for_metrics(
      swarm.metrics,
      [&](const std::vector<std::string>& lines) {
        for (const auto& l : lines)
          if (is_event(l, "fault") && killed_ops.insert(text(l, "op")).second) {
            const pid_t pid = static_cast<pid_t>(number(l, "pid"));
            CHECK((pid == hangs_in_backward || pid == hangs_in_forward));
            kill(pid, SIGKILL);
          }
        return killed_ops.size() == 2;
      },
      120));
  const double killed = unix_seconds();
  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const std::vector<std::string>& lines) { return steps_after(lines, killed) >= 60; }, 120));
  CHECK(stop(trainer) == 0);
  swarm.shutdown();

  check_trainer_accounting(swarm.metrics, -1);
  CHECK(number(events(swarm.metrics, "trainer_exit").at(0), "in_flight") == 0);
  std::set<std::string> rerouted;
  for (const auto& l : events(swarm.metrics, "reroute"))
    if (text(l, "reason") == "down")
      rerouted.insert(text(l, "op") + " stage " + std::to_string(static_cast<int>(number(l, "stage"))));
  CHECK(rerouted.count("forward stage 1") == 1);
  CHECK(rerouted.count("backward stage 0") == 1);
  // The dead servers took what they had added; the survivors hold no more than was acked.
  const auto committed = committed_per_stage(swarm.metrics);
  const auto acked = acked_per_stage(swarm.metrics);
  REQUIRE(acked.size() == 2);
  for (int s = 0; s < 2; ++s) {
    CHECK(committed.at(s) > 0);
    CHECK(committed.at(s) <= acked[s]);
  }
}

TEST_CASE("a stopped server is routed around and no sample counts twice", "[faults]") {
  manual_swarm swarm(
      {"--forward-timeout", "2", "--backward-timeout", "3", "--heartbeat", "0.5", "--connection-timeout", "3"});
  REQUIRE_FALSE(swarm.address.empty());
  const pid_t victim = swarm.server(0);
  swarm.server(0);
  swarm.server(1);
  swarm.server(1);
  REQUIRE(swarm.public_ports(4).size() == 5);  // the victim serving before the stop
  const int steps = 120;                       // the stop comes at step 40
  const pid_t trainer = swarm.trainer({"--max-steps", std::to_string(steps)});
  REQUIRE(wait_for_metrics(
      swarm.metrics,
      [](const std::vector<std::string>& lines) {
        return std::count_if(lines.begin(), lines.end(), [](const auto& l) { return is_event(l, "step"); }) >= 40;
      },
      120));
  kill(victim, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(6));  // past every deadline and the connection timeout
  kill(victim, SIGCONT);
  REQUIRE(wait_exit(trainer, 180) == 0);
  swarm.shutdown();

  check_trainer_accounting(swarm.metrics, steps);
  CHECK(events(swarm.metrics, "reroute").size() >= 1);
  // No server died: every acked sample was added at most once on its stage,
  // and the ones not added are those a server held back because its reply
  // may have come late (the stopped one, if the stop fell right after a commit).
  const auto committed = committed_per_stage(swarm.metrics);
  const auto withheld = committed_per_stage(swarm.metrics, "withheld_samples");
  const auto acked = acked_per_stage(swarm.metrics);
  REQUIRE(acked.size() == 2);
  for (int s = 0; s < 2; ++s) {
    INFO("stage " << s);
    std::printf("stopped server, stage %d: acked %lld, committed %lld, withheld %lld\n", s,
                static_cast<long long>(acked[s]), static_cast<long long>(committed.at(s)),
                static_cast<long long>(withheld.at(s)));
    CHECK(committed.at(s) <= acked[s]);
    CHECK(acked[s] <= committed.at(s) + withheld.at(s));
  }
}

TEST_CASE("a stage with servers at slowdown 1 and 3 splits work about 3:1", "[faults]") {
  const std::string metrics = "/tmp/swarm-test-slowdown-" + std::to_string(getpid()) + ".jsonl";
  std::remove(metrics.c_str());
  // Stage 0: servers at slowdown 1 and 3; stage 1: two at 1. Forwards count, as
  // backwards follow their forward's server.
  REQUIRE(run_swarm({"--role", "cluster", "--config", tiny, "--max-steps", "150", "--metrics", metrics, "--log-level",
                     "warn", "--server-slowdowns", "1,3,1,1"},
                    240) == 0);
  std::vector<double> served;  // stage 0 servers in launch order = pid order
  std::map<std::string, double> by_server;
  for (const auto& l : events(metrics, "server_exit"))
    if (number(l, "stage") == 0)
      by_server[text(l, "server")] = number(l, "served");
  REQUIRE(by_server.size() == 2);
  // Server ids end in the pid; the cluster starts the slow one second.
  std::vector<std::pair<int, double>> ordered;
  for (const auto& [id, n] : by_server)
    ordered.emplace_back(std::stoi(id.substr(id.find('-') + 1)), n);
  std::sort(ordered.begin(), ordered.end());
  const double ratio = ordered[0].second / std::max(ordered[1].second, 1.0);
  // Not exactly 3 here: 4 servers share 2 cores, and while the slow one sleeps
  // the fast one gets more CPU, so the split measured 3.7 and 4.5 in two runs.
  // Round-robin or least-in-flight routing would give about 1.
  std::printf("slowdown 1 vs 3: served %.0f vs %.0f requests, ratio %.2f (ideal 3, accepted 2.0-5.5)\n",
              ordered[0].second, ordered[1].second, ratio);
  CHECK(ratio > 2.0);
  CHECK(ratio < 5.5);
  std::remove(metrics.c_str());
}
