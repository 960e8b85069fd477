// Tier (c): real processes of the real binary on loopback.
//
// A whole swarm (coordinator, 2 stages x 2 servers, 1 trainer) trains config/tiny
// through `swarm --role cluster`; the test reads the metrics file it wrote.
//
// Loss bound: an untrained model predicts ~uniform bytes, ln 256 = 5.55 nats. A
// model that learned only byte frequencies cannot go below the corpus's unigram
// entropy, which the test computes from the same corpus (3.32 nats for fortunes).
// Requiring the final loss to be 0.3 nats below that shows the swarm learned
// context, which neither an untrained nor a frequency-only model can do.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "models/corpus.hpp"

namespace {

/// Runs the swarm binary with `args`; SIGKILLs it after `timeout_s`. Returns the exit code (-1 on timeout).
int run_swarm(std::vector<std::string> args, double timeout_s) {
  args.insert(args.begin(), SWARM_BINARY);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(3));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  return lines;
}

bool is_event(const std::string& line, const std::string& event) {
  return line.find("\"event\": \"" + event + "\"") != std::string::npos;
}

double number(const std::string& line, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + key + "\": (-?[0-9.eE+-]+)")))
    return std::nan("");
  return std::stod(m[1]);
}

double unigram_entropy(const std::string& bytes) {
  std::map<unsigned char, double> counts;
  for (unsigned char c : bytes)
    counts[c] += 1;
  double h = 0;
  for (const auto& [c, n] : counts)
    h -= n / bytes.size() * std::log(n / bytes.size());
  return h;
}

} // namespace

TEST_CASE("a multi-process swarm trains config/tiny below the unigram entropy", "[cluster]") {
  const std::string metrics = "/tmp/swarm-test-cluster-" + std::to_string(getpid()) + ".jsonl";
  std::remove(metrics.c_str());
  const int steps = 300;
  const int code = run_swarm({"--role", "cluster", "--config", SWARM_SOURCE_DIR "/config/tiny", "--max-steps",
                              std::to_string(steps), "--metrics", metrics, "--log-level", "warn"},
                             240);
  REQUIRE(code == 0);

  const auto lines = read_lines(metrics);
  std::vector<double> losses;
  int joins = 0, exits = 0;
  for (const auto& l : lines) {
    if (is_event(l, "step"))
      losses.push_back(number(l, "loss"));
    joins += is_event(l, "server_join");
    exits += is_event(l, "process_exit");
  }
  CHECK(joins == 4);
  CHECK(exits >= 1);  // the trainer's own clean exit
  REQUIRE(static_cast<int>(losses.size()) == steps);
  const double bound = unigram_entropy(swarm::corpus::load("/usr/share/games/fortunes", 65).bytes()) - 0.3;
  // Average the last 5 steps: a single step's loss is noisy.
  double tail = 0;
  for (size_t i = losses.size() - 5; i < losses.size(); ++i)
    tail += losses[i] / 5;
  std::printf("cluster: first step loss %.3f, mean of last 5 %.3f, bound %.3f (unigram entropy - 0.3)\n",
              losses.front(), tail, bound);
  CHECK(losses.front() > 4.5);  // started untrained
  CHECK(tail < bound);
  std::remove(metrics.c_str());
}

TEST_CASE("bad flags and a bad config exit 2 with a message", "[cluster]") {
  CHECK(run_swarm({"--role", "cluster", "--stages", "0"}, 20) == 2);
  CHECK(run_swarm({"--role", "server", "--stage", "0"}, 20) == 2);  // no coordinator
  CHECK(run_swarm({"--role", "local", "--corpus", "/nonexistent", "--max-steps", "1"}, 60) == 2);
}
