#pragma once
// Helpers for tier (c) tests: start the real swarm binary as real processes,
// wait for them with a deadline, and read the metrics file they append to.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <csignal>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <optional>
#include <utility>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/clock.hpp"

namespace swarm::test {

/// Starts `args` (a command looked up in PATH, then its arguments) and returns
/// its pid; `output`: append its stdout and stderr to this file instead of the test's.
inline pid_t spawn_command(std::vector<std::string> args, const std::string& output = {}) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // A test that dies (a crash, a signal) takes its processes with it: a
    // cluster left training ate the CPU of every later test. Spawn only from
    // the thread that lives as long as the test (the signal follows the thread).
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)
      _exit(127);
    if (!output.empty()) {
      const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

/// Starts `swarm args...` and returns its pid (`output` as for spawn_command).
inline pid_t spawn_swarm(std::vector<std::string> args, const std::string& output = {}) {
  args.insert(args.begin(), SWARM_BINARY);
  return spawn_command(std::move(args), output);
}

using swarm::unix_seconds;  // the clock of the metrics' "t"

/// The size of a long case: `quick` in the README's test command, `full` with
/// SWARM_TEST_FULL=1 (scripts/test_full.sh), so the suite keeps to its time
/// and the full sizes still run.
inline int test_size(int quick, int full) {
  const char* v = std::getenv("SWARM_TEST_FULL");
  return v != nullptr && std::string{v} == "1" ? full : quick;
}

/// A TCP port free on loopback now (bound and released: a later bind may race
/// another process, which tests on one machine accept).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Exit code of `pid` once it ends, or nullopt (process left running) after `timeout_s`.
inline std::optional<int> wait_exit(pid_t pid, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// SIGTERM, then SIGKILL if it is still there 10 s later; returns its exit code.
inline int stop(pid_t pid) {
  kill(pid, SIGTERM);
  if (auto code = wait_exit(pid, 10))
    return *code;
  kill(pid, SIGKILL);
  return wait_exit(pid, 10).value_or(-1);
}

/// Runs the swarm binary with `args` to completion; -1 when it had to be killed after `timeout_s`.
inline int run_swarm(std::vector<std::string> args, double timeout_s) {
  const pid_t pid = spawn_swarm(std::move(args));
  if (auto code = wait_exit(pid, timeout_s))
    return *code;
  stop(pid);
  return -1;
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  return lines;
}

/// Runs the swarm binary with `args` to completion: its exit code (-1: killed
/// after `timeout_s`) and what it wrote to stdout and stderr.
inline std::pair<int, std::string> run_swarm_output(std::vector<std::string> args, double timeout_s) {
  const std::string out = "/tmp/swarm-test-output-" + std::to_string(getpid()) + ".txt";
  std::remove(out.c_str());
  const pid_t pid = spawn_swarm(std::move(args), out);
  auto code = wait_exit(pid, timeout_s);
  if (!code)
    stop(pid);
  std::string text;
  for (const auto& l : read_lines(out))
    text += l + "\n";
  std::remove(out.c_str());
  return {code.value_or(-1), text};
}

inline bool is_event(const std::string& line, const std::string& event) {
  return line.find("\"event\": \"" + event + "\"") != std::string::npos;
}

inline std::vector<std::string> events(const std::string& path, const std::string& event) {
  std::vector<std::string> out;
  for (auto& l : read_lines(path))
    if (is_event(l, event))
      out.push_back(std::move(l));
  return out;
}

/// A numeric field of a metrics line; NaN when absent.
inline double number(const std::string& line, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + key + "\": (-?[0-9.eE+-]+)")))
    return std::nan("");
  return std::stod(m[1]);
}

/// A string field of a metrics line; empty when absent.
inline std::string text(const std::string& line, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + key + "\": \"([^\"]*)\"")))
    return {};
  return m[1];
}

/// Polls the metrics file until `pred(lines)` holds or `timeout_s` passes.
template <class Pred>
bool wait_for_metrics(const std::string& path, Pred pred, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(read_lines(path)))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// Waits until `pred(lines)` holds on the metrics file (at most `timeout_s`),
/// then stops the swarm process `pid` with SIGTERM as a user would: whether
/// `pred` held, and its exit code (none if it did not exit within 60 s).
template <class Pred>
std::pair<bool, std::optional<int>> stop_when(pid_t pid, const std::string& metrics, Pred pred, double timeout_s) {
  const bool held = wait_for_metrics(metrics, pred, timeout_s);
  kill(pid, SIGTERM);
  return {held, wait_exit(pid, 60)};
}

/// Trainer `step` events among `lines` after unix time `t` (the metrics' "t").
inline int64_t steps_after(const std::vector<std::string>& lines, double t) {
  return std::count_if(lines.begin(), lines.end(),
                       [&](const std::string& l) { return is_event(l, "step") && number(l, "t") > t; });
}

/// Mean loss of the first and of the last `n` step events.
inline std::pair<double, double> loss_head_tail(const std::string& path, size_t n) {
  const auto steps = events(path, "step");
  double head = 0, tail = 0;
  if (steps.size() < n)
    return {std::nan(""), std::nan("")};
  for (size_t i = 0; i < n; ++i) {
    head += number(steps[i], "loss") / n;
    tail += number(steps[steps.size() - n + i], "loss") / n;
  }
  return {head, tail};
}

/// Samples the servers of each stage report having added (server_exit events).
inline std::map<int, int64_t> committed_per_stage(const std::string& metrics, const char* field = "committed_samples") {
  std::map<int, int64_t> sum;
  for (const auto& l : events(metrics, "server_exit"))
    sum[static_cast<int>(number(l, "stage"))] += static_cast<int64_t>(number(l, field));
  return sum;
}

/// The trainer's acked samples per stage (trainer_exit event).
inline std::vector<int64_t> acked_per_stage(const std::string& metrics) {
  std::vector<int64_t> out;
  const auto exits = events(metrics, "trainer_exit");
  if (exits.empty())
    return out;
  std::stringstream in(text(exits.back(), "acked"));
  for (std::string n; std::getline(in, n, ',');)
    out.push_back(std::stoll(n));
  return out;
}

/// Parameter hashes servers reported (params events): (stage, step) -> server -> hash.
inline std::map<std::pair<int, int64_t>, std::map<std::string, std::string>> params_by_step(
    const std::string& metrics) {
  std::map<std::pair<int, int64_t>, std::map<std::string, std::string>> out;
  for (const auto& l : events(metrics, "params"))
    out[{static_cast<int>(number(l, "stage")), static_cast<int64_t>(number(l, "step"))}][text(l, "server")] =
        text(l, "hash");
  return out;
}

/// (stage, step) pairs at which servers of one stage reported different parameters.
inline std::vector<std::pair<int, int64_t>> params_disagreements(const std::string& metrics) {
  std::vector<std::pair<int, int64_t>> bad;
  for (const auto& [key, hashes] : params_by_step(metrics)) {
    std::set<std::string> distinct;
    for (const auto& [server, hash] : hashes)
      distinct.insert(hash);
    if (distinct.size() > 1)
      bad.push_back(key);
  }
  return bad;
}

const std::string tiny = SWARM_SOURCE_DIR "/config/tiny";

/// scripts/check_history.py over `files` (metrics files, and files of the
/// test's own chaos events) with `extra` flags: its exit code, its output in `out`.
inline int check_history(const std::vector<std::string>& files, const std::string& extra, std::string& out) {
  const std::string log = "/tmp/swarm-test-history-" + std::to_string(getpid()) + ".txt";
  std::string cmd = "python3 " SWARM_SOURCE_DIR "/scripts/check_history.py " + extra;
  for (const auto& f : files)
    cmd += " " + f;
  const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  out.clear();
  for (const auto& l : read_lines(log))
    out += l + "\n";
  std::remove(log.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/// Certificates made by scripts/make_certs.sh for one test: the cluster's CA,
/// a node of every role, a member that is a trainer only, and a second CA with
/// a node of its own (a stranger with a valid-looking certificate). Removed afterwards.
struct test_certs {
  std::string dir;
  std::string ca, cert, key;              ///< the cluster's, every role
  std::string trainer_cert, trainer_key;  ///< the cluster's, the trainer role alone
  std::string other_cert, other_key;      ///< signed by another CA
  std::string other_ca;

  test_certs() : dir("/tmp/swarm-test-certs-" + std::to_string(getpid())) {
    const std::string script = "bash " + std::string{SWARM_SOURCE_DIR} + "/scripts/make_certs.sh ";
    const std::string cmd = "rm -rf " + dir + " && " + script + "ca " + dir + " >/dev/null && " + script + "node " +
                            dir + " node all >/dev/null && " + script + "node " + dir +
                            " trainer trainer >/dev/null && " + script + "ca " + dir + "/other >/dev/null && " +
                            script + "node " + dir + "/other stranger all >/dev/null";
    if (std::system(cmd.c_str()) != 0)
      throw std::runtime_error("scripts/make_certs.sh failed: " + cmd);
    ca = dir + "/ca.crt", cert = dir + "/node.crt", key = dir + "/node.key";
    trainer_cert = dir + "/trainer.crt", trainer_key = dir + "/trainer.key";
    other_ca = dir + "/other/ca.crt", other_cert = dir + "/other/stranger.crt", other_key = dir + "/other/stranger.key";
  }
  ~test_certs() { std::system(("rm -rf " + dir).c_str()); }

  [[nodiscard]] std::vector<std::string> flags() const {
    return {"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key};
  }
};

/// A swarm started process by process, so a test can reach each one.
struct manual_swarm {
  std::string metrics;
  std::string address;
  int port = 0;  ///< the coordinator's
  pid_t coordinator = 0;
  std::vector<pid_t> servers;
  std::vector<std::string> common;  ///< flags every process gets
  std::string output;               ///< where every process writes stdout and stderr; empty: the test's

  manual_swarm(std::vector<std::string> flags, const char* tag = "faults", bool capture_output = false)
      : common(std::move(flags)) {
    metrics = "/tmp/swarm-test-" + std::string(tag) + "-" + std::to_string(getpid()) + ".jsonl";
    std::remove(metrics.c_str());
    if (capture_output) {
      output = metrics + ".log";
      std::remove(output.c_str());
    }
    // One torch thread each, as the cluster launcher gives its processes: 4-7
    // processes with two OpenMP threads each on 2 cores spin-wait on each other.
    common.insert(common.begin(), {"--config", tiny, "--metrics", metrics, "--log-level", "warn", "--threads", "1"});
    const std::string port_file = metrics + ".port";
    std::remove(port_file.c_str());
    coordinator = spawn({"--role", "coordinator", "--port", "0", "--port-file", port_file});
    for (int i = 0; i < 100 && address.empty(); ++i) {
      std::ifstream in(port_file);
      if (in >> port)
        address = "127.0.0.1:" + std::to_string(port);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::remove(port_file.c_str());
  }

  /// SIGKILLs the coordinator and starts a fresh one on the same port.
  void restart_coordinator() {
    kill(coordinator, SIGKILL);
    wait_exit(coordinator, 10);
    coordinator = spawn({"--role", "coordinator", "--port", std::to_string(port)});
  }

  pid_t spawn(std::vector<std::string> args) const {
    args.insert(args.end(), common.begin(), common.end());
    return spawn_swarm(args, output);
  }

  pid_t server(int stage, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--role", "server", "--coordinator", address, "--stage", std::to_string(stage)});
    servers.push_back(spawn(extra));
    return servers.back();
  }

  /// The public ports of the coordinator and of `servers` servers once all
  /// have registered (server_join), or just the coordinator's after `timeout_s`.
  std::vector<uint16_t> public_ports(size_t servers, double timeout_s = 60) const {
    std::vector<uint16_t> ports{static_cast<uint16_t>(port)};
    wait_for_metrics(
        metrics,
        [&](const std::vector<std::string>& lines) {
          ports.resize(1);
          for (const auto& l : lines)
            if (is_event(l, "server_join"))
              ports.push_back(static_cast<uint16_t>(number(l, "port")));
          return ports.size() == servers + 1;
        },
        timeout_s);
    if (ports.size() != servers + 1)
      ports.resize(1);
    return ports;
  }

  pid_t trainer(std::vector<std::string> extra) const {
    extra.insert(extra.begin(), {"--role", "trainer", "--coordinator", address});
    return spawn(extra);
  }

  /// Stops every server still running (they report server_exit), then the coordinator.
  void shutdown() {
    for (pid_t pid : servers)
      if (kill(pid, 0) == 0)
        stop(pid);
    servers.clear();
    if (coordinator)
      stop(coordinator);
    coordinator = 0;
  }

  ~manual_swarm() {
    for (pid_t pid : servers)
      kill(pid, SIGKILL);
    if (coordinator)
      kill(coordinator, SIGKILL);
    if (std::getenv("SWARM_TEST_KEEP") == nullptr)  // kept for a post-mortem of a failed run
      std::remove(metrics.c_str());
  }
};

/// `steps`: what the trainer was told to run, or -1 for one stopped by a signal
/// (then what was in flight when it stopped counts too).
inline void check_trainer_accounting(const std::string& metrics, int steps) {
  const auto exits = events(metrics, "trainer_exit");
  REQUIRE(exits.size() == 1);
  const auto& e = exits.front();
  std::printf("trainer: issued %.0f completed %.0f dropped %.0f retries %.0f acked %s\n", number(e, "issued"),
              number(e, "completed"), number(e, "dropped"), number(e, "retries"), text(e, "acked").c_str());
  if (steps >= 0)
    CHECK(number(e, "steps") == steps);
  CHECK(number(e, "issued") ==
        number(e, "completed") + number(e, "dropped") + (steps >= 0 ? 0 : number(e, "in_flight")));
  CHECK(number(e, "dropped") <= 2);
  const auto [head, tail] = loss_head_tail(metrics, 10);
  std::printf("loss: first 10 steps %.3f, last 10 steps %.3f\n", head, tail);
  CHECK(tail < head - 1.0);
}

/// Each of the two stages added exactly the samples the trainer saw acknowledged:
/// nothing lost, nothing twice (no server died holding any).
inline void check_committed_is_acked(const std::string& metrics) {
  const auto committed = committed_per_stage(metrics);
  const auto acked = acked_per_stage(metrics);
  REQUIRE(acked.size() == 2);
  for (int s = 0; s < 2; ++s)
    CHECK(committed.at(s) == acked[static_cast<size_t>(s)]);
}

}  // namespace swarm::test
