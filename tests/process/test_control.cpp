// Standby coordinators elected through etcd (issue 27), with real processes:
// `swarm --role cluster --control-replicas 3` (three etcd members, two
// candidates, servers and a trainer following etcd's leader), hit by this
// test as a user's world would: the leader SIGKILLed, the leader SIGSTOPped
// past its lease, one etcd member killed, two etcd members stopped (no
// quorum). After each, scripts/check_history.py must find no order of a
// deposed leader, no stale round applied and one hash per (stage, step).

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "process_util.hpp"

using namespace swarm::test;

namespace {

/// The newest `leadership` won event: (pid, term); (0, 0) when none.
std::pair<pid_t, int64_t> leader_now(const std::string& metrics) {
  const auto won = events(metrics, "leadership");
  for (auto it = won.rbegin(); it != won.rend(); ++it)
    if (text(*it, "change") == "won")
      return {static_cast<pid_t>(number(*it, "pid")), static_cast<int64_t>(number(*it, "term"))};
  return {0, 0};
}

/// The pid of the newest start of cluster child `name` ("etcd m1").
pid_t pid_of(const std::string& metrics, const std::string& name) {
  pid_t pid = 0;
  for (const auto& l : events(metrics, "process_start"))
    if (text(l, "process") == name)
      pid = static_cast<pid_t>(number(l, "pid"));
  return pid;
}

/// Applied averaging rounds of `stage` within (from, to] (unix seconds).
int64_t rounds_between(const std::string& metrics, int stage, double from, double to) {
  int64_t n = 0;
  for (const auto& l : events(metrics, "averaging_round"))
    if (number(l, "stage") == stage && l.find("\"applied\": true") != std::string::npos && number(l, "t") > from &&
        number(l, "t") <= to)
      ++n;
  return n;
}

void append(const std::string& path, const std::string& line) { std::ofstream(path, std::ios::app) << line << "\n"; }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// Sends `sig` to `pid` (cluster child `what`), first writing it to `hits` as a
/// chaos event, so scripts/check_history.py measures recovery from it.
void hit(const std::string& hits, pid_t pid, int sig, const std::string& what) {
  append(hits, "{\"t\": " + std::to_string(unix_seconds()) +
                   ", \"role\": \"test\", \"event\": \"chaos\", \"action\": \"" + (sig == SIGKILL ? "kill" : "stop") +
                   "\", \"process\": \"" + what + "\", \"pid\": " + std::to_string(pid) + "}");
  ::kill(pid, sig);
}

/// The leader SIGKILLed `times` times: each time the other candidate leads
/// (a larger term), and both stages get time to step again.
void kill_leaders(const std::string& metrics, const std::string& hits, int times) {
  for (int i = 0; i < times; ++i) {
    const auto [leader, term] = leader_now(metrics);
    REQUIRE(leader > 0);
    hit(hits, leader, SIGKILL, "coordinator");
    REQUIRE(wait_for_metrics(
        metrics, [&](const std::vector<std::string>&) { return leader_now(metrics).second > term; }, 20));
    sleep_s(2.5);
  }
}

/// The leader SIGSTOPped past its lease, then continued: a successor leads
/// meanwhile, and the old one exits (3) without ordering again.
void stop_leader_past_its_lease(const std::string& metrics, const std::string& hits) {
  const auto [stopped, stopped_term] = leader_now(metrics);
  hit(hits, stopped, SIGSTOP, "coordinator (stopped)");
  REQUIRE(wait_for_metrics(
      metrics, [&](const std::vector<std::string>&) { return leader_now(metrics).second > stopped_term; }, 20));
  sleep_s(1.5);
  ::kill(stopped, SIGCONT);
  REQUIRE(wait_for_metrics(
      metrics,
      [&](const std::vector<std::string>& lines) {
        for (const auto& l : lines)
          if (is_event(l, "process_exit") && number(l, "pid") == stopped)
            return number(l, "code") == 3;
        return false;
      },
      20));
}

/// One etcd member of three killed (the launcher restarts it a second later):
/// the leader keeps its lease, rounds go on.
void check_one_member_lost(const std::string& metrics, const std::string& hits) {
  const auto term_before = leader_now(metrics).second;
  const double member_killed = unix_seconds();
  hit(hits, pid_of(metrics, "etcd m0"), SIGKILL, "etcd m0");
  sleep_s(4);
  CHECK(leader_now(metrics).second == term_before);
  CHECK(rounds_between(metrics, 0, member_killed, unix_seconds()) >= 3);
  CHECK(rounds_between(metrics, 1, member_killed, unix_seconds()) >= 3);
}

/// Two members stopped: no quorum, so nobody leads and no round starts; the
/// trainer goes on (servers accumulate). Rounds resume once they are back.
void check_quorum_lost(const std::string& metrics) {
  const pid_t m1 = pid_of(metrics, "etcd m1"), m2 = pid_of(metrics, "etcd m2");
  const double quorum_lost = unix_seconds();
  ::kill(m1, SIGSTOP);
  ::kill(m2, SIGSTOP);
  sleep_s(5);
  const double quorum_back = unix_seconds();
  ::kill(m1, SIGCONT);
  ::kill(m2, SIGCONT);
  int64_t orders_without_quorum = 0, steps_without_quorum = 0;
  for (const auto& l : read_lines(metrics)) {
    const double t = number(l, "t");
    // The leader may finish what it began in its last lease (at most ~1 s).
    if (is_event(l, "round_start") && t > quorum_lost + 1.5 && t < quorum_back)
      ++orders_without_quorum;
    if (is_event(l, "step") && t > quorum_lost + 1.5 && t < quorum_back)
      ++steps_without_quorum;
  }
  CHECK(orders_without_quorum == 0);
  CHECK(steps_without_quorum >= 5);
  const bool resumed = wait_for_metrics(
      metrics,
      [&](const std::vector<std::string>&) {
        return rounds_between(metrics, 0, quorum_back, 1e12) > 0 && rounds_between(metrics, 1, quorum_back, 1e12) > 0;
      },
      45);
  CHECK(resumed);
  double first_after = 1e12;
  for (const auto& l : events(metrics, "averaging_round"))
    if (number(l, "t") > quorum_back && l.find("\"applied\": true") != std::string::npos)
      first_after = std::min(first_after, number(l, "t"));
  INFO("first round " << first_after - quorum_back << " s after quorum came back");
  CHECK(first_after - quorum_back < 15);
}

}  // namespace

TEST_CASE("control: the history checker finds two leaders, stale applies and split hashes", "[control]") {
  const auto dir = std::filesystem::temp_directory_path() / ("swarm-history-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string ok = (dir / "ok.jsonl").string(), bad = (dir / "bad.jsonl").string();
  // Term 5 orders, term 9 takes over; a round of term 5 ordered before term 9 began may finish after.
  for (const auto& p : {ok, bad}) {
    append(
        p,
        R"({"t": 10.0, "role": "coordinator", "event": "round_start", "stage": 0, "round": 1, "step": 3, "peers": 2, "term": 5})");
    append(
        p,
        R"({"t": 12.0, "role": "coordinator", "event": "round_start", "stage": 0, "round": 2, "step": 4, "peers": 2, "term": 9})");
    append(
        p,
        R"({"t": 12.5, "role": "server", "event": "averaging_round", "stage": 0, "server": "a", "round": 1, "term": 5, "step": 4, "applied": true})");
    append(p,
           R"({"t": 12.6, "role": "server", "event": "params", "stage": 0, "server": "a", "step": 4, "hash": "77"})");
    append(p,
           R"({"t": 12.7, "role": "server", "event": "params", "stage": 0, "server": "b", "step": 4, "hash": "77"})");
  }
  std::string out;
  CHECK(check_history({ok}, "", out) == 0);
  INFO(out);
  CHECK(out.find("history: OK") != std::string::npos);
  // The deposed term 5 orders again after term 9 began, a server applies it, and hashes split.
  append(
      bad,
      R"({"t": 13.0, "role": "coordinator", "event": "round_start", "stage": 1, "round": 3, "step": 4, "peers": 2, "term": 5})");
  append(
      bad,
      R"({"t": 13.2, "role": "server", "event": "averaging_round", "stage": 1, "server": "c", "round": 3, "term": 5, "step": 5, "applied": true})");
  append(bad,
         R"({"t": 13.3, "role": "server", "event": "params", "stage": 0, "server": "c", "step": 4, "hash": "78"})");
  CHECK(check_history({bad}, "", out) == 1);
  CHECK(out.find("stale order") != std::string::npos);
  CHECK(out.find("stale apply") != std::string::npos);
  CHECK(out.find("two hashes") != std::string::npos);
  // A kill whose successor's first round came 3 s later: slow for a 2 s limit.
  const std::string slow = (dir / "slow.jsonl").string();
  append(
      slow,
      R"({"t": 10.0, "role": "coordinator", "event": "round_start", "stage": 0, "round": 1, "step": 3, "peers": 2, "term": 5})");
  append(slow,
         R"({"t": 11.0, "role": "test", "event": "chaos", "action": "kill", "process": "coordinator", "pid": 1})");
  append(
      slow,
      R"({"t": 14.0, "role": "coordinator", "event": "round_start", "stage": 0, "round": 2, "step": 3, "peers": 2, "term": 9})");
  append(
      slow,
      R"({"t": 14.0, "role": "server", "event": "averaging_round", "stage": 0, "server": "a", "round": 2, "term": 9, "step": 4, "applied": true})");
  CHECK(check_history({slow}, "--max-recovery 2", out) == 1);
  CHECK(out.find("slow recovery") != std::string::npos);
  CHECK(check_history({slow}, "--max-recovery 4", out) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("control: leaders killed and stopped, etcd members lost, and training goes on", "[control][process]") {
  const auto dir = std::filesystem::temp_directory_path() / ("swarm-control-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string metrics = (dir / "metrics.jsonl").string(), hits = (dir / "hits.jsonl").string();
  const pid_t cluster =
      spawn_swarm({"--role", "cluster", "--config", tiny, "--metrics", metrics, "--log-level", "warn",
                   "--control-replicas", "3", "--control-lease", "1", "--max-steps", "0", "--http-port", "-1"},
                  (dir / "cluster.log").string());
  // Training under way: a leader, rounds on both stages.
  REQUIRE(wait_for_metrics(
      metrics,
      [&](const std::vector<std::string>&) {
        return rounds_between(metrics, 0, 0, 1e12) >= 3 && rounds_between(metrics, 1, 0, 1e12) >= 3;
      },
      60));

  kill_leaders(metrics, hits, test_size(1, 3));  // 3 times with SWARM_TEST_FULL=1
  stop_leader_past_its_lease(metrics, hits);
  check_one_member_lost(metrics, hits);
  check_quorum_lost(metrics);

  ::kill(cluster, SIGTERM);
  CHECK(wait_exit(cluster, 60) == std::optional<int>{0});
  for (const auto& l : events(metrics, "trainer_exit"))
    CHECK(number(l, "dropped") == 0);
  std::string out;
  // Recovery from a kill is bounded loosely here (a loaded machine); the 2 s
  // goal is measured by scripts/bench_control.sh.
  const int rc = check_history({metrics, hits}, "--max-recovery 4", out);
  INFO(out);
  CHECK(rc == 0);
  if (!getenv("SWARM_TEST_KEEP"))
    std::filesystem::remove_all(dir);
}

TEST_CASE("control: a malformed --control is exit 2; an etcd nobody answers is exit 1 naming it",
          "[control][process]") {
  const std::string nowhere = "etcd://127.0.0.1:" + std::to_string(free_port());
  for (const char* bad : {"etcd://", "http://127.0.0.1:2379", "etcd://host", "etcd://h:1,"}) {
    auto [code, out] = run_swarm_output({"--role", "server", "--config", tiny, "--control", bad}, 30);
    INFO(bad << ": " << out);
    CHECK(code == 2);
    CHECK(out.find("--control") != std::string::npos);
  }
  for (const char* role : {"coordinator", "server", "trainer", "status"}) {
    auto [code, out] =
        run_swarm_output({"--role", role, "--config", tiny, "--control", nowhere, "--coordinator-wait", "1"}, 60);
    INFO(role << ": " << out);
    CHECK(code == 1);
    CHECK(out.find(nowhere) != std::string::npos);
  }
}
