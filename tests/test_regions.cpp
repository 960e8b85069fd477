// Tier (c): a TLS swarm across two emulated regions (scripts/regions.sh:
// network namespaces joined through a router that shapes each link to
// 100 Mbit/s and delays it to 50 ms round trip). Servers of each stage run in
// both regions; the trainer and the coordinator in region 0. Needs root and
// the packages of scripts/setup.sh; without them it says why and passes
// without running (Catch2 2.13 has no skip).
#include <catch2/catch.hpp>

#include <cstdio>
#include <map>

#include "process_util.hpp"

using namespace swarm::test;

namespace {

const std::string regions_script = std::string{SWARM_SOURCE_DIR} + "/scripts/regions.sh";

/// Output lines of `cmd`, or nullopt when it fails.
std::optional<std::vector<std::string>> run_lines(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p)
    return std::nullopt;
  std::vector<std::string> lines;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) {
    std::string l = buf;
    if (!l.empty() && l.back() == '\n')
      l.pop_back();
    lines.push_back(l);
  }
  return ::pclose(p) == 0 ? std::optional{lines} : std::nullopt;
}

/// Regions brought up for one test and torn down after it, whatever happens.
struct regions {
  std::string name;
  std::map<std::string, std::string> vars;  ///< REGION<i>, NS<i>
  bool up = false;

  regions(int count, const std::string& rate, int rtt_ms) : name("swt" + std::to_string(getpid())) {
    auto lines = run_lines("bash " + regions_script + " up " + name + " --regions " + std::to_string(count) +
                           " --rate " + rate + " --rtt " + std::to_string(rtt_ms));
    if (!lines)
      return;
    for (const auto& l : *lines)
      if (auto eq = l.find('='); eq != std::string::npos)
        vars[l.substr(0, eq)] = l.substr(eq + 1);
    up = true;
  }
  ~regions() {
    if (up)
      std::system(("bash " + regions_script + " down " + name + " >/dev/null 2>&1").c_str());
  }

  /// Starts `swarm args...` inside region i.
  pid_t spawn(int i, std::vector<std::string> args, const std::string& output) const {
    args.insert(args.begin(), {"ip", "netns", "exec", vars.at("NS" + std::to_string(i)), SWARM_BINARY});
    return spawn_command(args, output);
  }
  std::string address(int i) const { return vars.at("REGION" + std::to_string(i)); }
};

} // namespace

TEST_CASE("a TLS swarm across two regions at 100 Mbit/s and 50 ms trains and routes around a killed server",
          "[regions]") {
  if (std::system(("bash " + regions_script + " check >/dev/null 2>&1").c_str()) != 0) {
    WARN("skipped: scripts/regions.sh check failed (needs root and scripts/setup.sh's packages)");
    return;
  }
  const test_certs certs;
  const regions net(2, "100mbit", 50);
  REQUIRE(net.up);
  const std::string metrics = "/tmp/swarm-test-regions-" + std::to_string(getpid()) + ".jsonl";
  const std::string output = metrics + ".log";
  std::remove(metrics.c_str());
  std::remove(output.c_str());
  // Links must outlast a WAN transfer: a longer connection timeout than on loopback.
  std::vector<std::string> common{"--config", tiny, "--metrics", metrics, "--log-level", "warn",
                                  "--connection-timeout", "10"};
  const auto tls = certs.flags();
  common.insert(common.end(), tls.begin(), tls.end());
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };
  const std::string coordinator = net.address(0) + ":7100";
  std::vector<pid_t> pids{net.spawn(0, with({"--role", "coordinator", "--port", "7100"}), output)};
  std::map<std::pair<int, int>, pid_t> servers;  // (region, stage)
  for (int region = 0; region < 2; ++region)
    for (int stage = 0; stage < 2; ++stage) {
      servers[{region, stage}] = net.spawn(region, with({"--role", "server", "--coordinator", coordinator, "--stage",
                                                         std::to_string(stage), "--host", net.address(region)}),
                                           output);
      pids.push_back(servers[{region, stage}]);
    }
  const int steps = 80;
  const pid_t trainer = net.spawn(0, with({"--role", "trainer", "--coordinator", coordinator, "--host", net.address(0),
                                           "--max-steps", std::to_string(steps)}),
                                  output);
  auto count = [&](const char* event) { return events(metrics, event).size(); };
  const bool joined = wait_for_metrics(metrics, [&](const auto&) { return count("server_join") >= 4; }, 90);
  const bool trained = joined && wait_for_metrics(metrics, [&](const auto&) { return count("step") >= 20; }, 180);
  // The region-1 server of stage 1: every request it held is re-sent elsewhere.
  const pid_t victim = servers[{1, 1}];
  kill(victim, SIGKILL);
  const double killed_at = unix_seconds();
  const auto finished = trained ? wait_exit(trainer, 300) : std::nullopt;
  const size_t downs = count("server_down");  // before the shutdown below adds its own
  for (pid_t pid : pids)
    if (pid != victim)
      stop(pid);
  wait_exit(victim, 5);
  if (!finished)
    stop(trainer);
  INFO("process output: " << output);
  REQUIRE(joined);
  REQUIRE(trained);
  REQUIRE(finished == std::optional<int>{0});
  check_trainer_accounting(metrics, steps);
  // Servers registered from both regions.
  std::set<std::string> hosts;
  for (const auto& l : events(metrics, "server_join"))
    hosts.insert(text(l, "host"));
  CHECK(hosts == std::set<std::string>{net.address(0), net.address(1)});
  size_t after_kill = 0;
  for (const auto& l : events(metrics, "step"))
    after_kill += number(l, "t") > killed_at;
  const auto exits = events(metrics, "trainer_exit");
  REQUIRE(exits.size() == 1);
  std::printf("regions: %zu steps after the kill, %.0f retries, %.0f dropped\n", after_kill,
              number(exits[0], "retries"), number(exits[0], "dropped"));
  CHECK(downs >= 1);
  CHECK(after_kill >= 20);
  std::remove(metrics.c_str());
}

TEST_CASE("a server on another host that forgot --host is refused at once, naming --host", "[regions]") {
  if (std::system(("bash " + regions_script + " check >/dev/null 2>&1").c_str()) != 0) {
    WARN("skipped: scripts/regions.sh check failed (needs root and scripts/setup.sh's packages)");
    return;
  }
  const regions net(2, "1gbit", 0);
  REQUIRE(net.up);
  const std::string base = "/tmp/swarm-test-slip-" + std::to_string(getpid());
  const std::string metrics = base + ".jsonl", output = base + ".log", slip_output = base + ".slip.log";
  for (const auto& f : {metrics, output, slip_output})
    std::remove(f.c_str());
  const std::vector<std::string> common{"--config", tiny, "--metrics", metrics, "--log-level", "warn"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    return args;
  };
  const std::string coordinator = net.address(0) + ":7100";
  const pid_t coord = net.spawn(0, with({"--role", "coordinator", "--port", "7100", "--host", net.address(0)}), output);
  // Region 1's server without --host advertises 127.0.0.1, which from region 0
  // is region 0's own loopback: nothing of it there.
  const double started = unix_seconds();
  const pid_t slip = net.spawn(1, with({"--role", "server", "--coordinator", coordinator, "--stage", "0"}), slip_output);
  const auto slip_exit = wait_exit(slip, 60);
  const double took = unix_seconds() - started;
  // The same server with --host joins.
  const pid_t good = net.spawn(1, with({"--role", "server", "--coordinator", coordinator, "--stage", "0", "--host",
                                        net.address(1)}),
                               output);
  const bool joined = wait_for_metrics(metrics, [&](const auto&) { return !events(metrics, "server_join").empty(); }, 60);
  stop(good);
  stop(coord);
  if (!slip_exit)
    stop(slip);
  std::string said;
  for (const auto& l : read_lines(slip_output))
    said += l + "\n";
  std::printf("the server without --host exited with %d after %.1f s, saying:\n%s", slip_exit.value_or(-1), took,
              said.c_str());
  CHECK(slip_exit == std::optional<int>{2});
  CHECK_THAT(said, Catch::Contains("127.0.0.1") && Catch::Contains("--host"));
  CHECK(joined);
  const auto joins = events(metrics, "server_join");
  REQUIRE(joins.size() == 1);
  CHECK(text(joins[0], "host") == net.address(1));
  std::remove(metrics.c_str());
}
