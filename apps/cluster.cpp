// --role cluster: a whole local swarm as separate OS processes on 127.0.0.1.
//
//   starting --(coordinator's port file appears)--> running --(all trainers exited,
//   or a signal, or the coordinator died)--> stopping --> done
//
// Every child is this same binary with another --role and the full config as
// flags. Children inherit stdout/stderr, so their progress lines show here; each
// child also gets PR_SET_PDEATHSIG so none outlives a killed launcher.

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/log.hpp"
#include "actors/metrics.hpp"
#include "apps/roles.hpp"

namespace swarm {

namespace {

struct child {
  std::string name;  ///< "coordinator", "server 1.0", "trainer 0"
  role which;
};

std::string self_exe() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

pid_t spawn_child(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent)  // the launcher died between fork and prctl
      std::_Exit(1);
    ::execv(argv[0], argv.data());
    std::perror("swarm: exec");
    std::_Exit(127);
  }
  return pid;
}

/// Polls for the coordinator's port file; 0 when it does not appear in time.
int wait_for_port(const std::string& file, pid_t coordinator) {
  for (int i = 0; i < 300 && !stop_requested; ++i) {
    std::ifstream in(file);
    int port = 0;
    if (in >> port && port > 0)
      return port;
    int status = 0;
    if (::waitpid(coordinator, &status, WNOHANG) == coordinator)
      return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

/// SIGTERM to every child still running, SIGKILL to those alive 10 s later.
void stop_all(std::map<pid_t, child>& children, const std::shared_ptr<spdlog::logger>& log) {
  for (const auto& [pid, c] : children)
    ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!children.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      children.erase(pid);
      continue;
    }
    if (pid < 0)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (const auto& [p, c] : children) {
        log->warn("{} (pid {}) ignored SIGTERM; killing it", c.name, p);
        ::kill(p, SIGKILL);
      }
      ::waitpid(-1, &status, 0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int threads_per_server(const app_config& cfg) {
  if (cfg.threads > 0)
    return cfg.threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / (cfg.stages * cfg.cluster.servers_per_stage));
}

} // namespace

int run_cluster(const app_config& cfg) {
  setup_logging("cluster", cfg.log_level);
  auto log = get_logger("cluster");
  auto metrics = open_metrics(cfg.metrics, "cluster");
  const auto exe = self_exe();
  char dir_template[] = "/tmp/swarm-cluster-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string port_file = dir + "/coordinator.port";

  auto common = to_flags(cfg);
  auto args_for = [&](role r, std::vector<std::string> extra) {
    std::vector<std::string> args{exe, "--role", to_string(r)};
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };

  std::map<pid_t, child> children;
  const pid_t coord_pid = spawn_child(args_for(role::coordinator, {"--port", "0", "--port-file", port_file}));
  children[coord_pid] = {"coordinator", role::coordinator};
  const int port = wait_for_port(port_file, coord_pid);
  std::filesystem::remove_all(dir);
  if (port == 0) {
    log->error("the coordinator did not start (see its message above)");
    stop_all(children, log);
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const auto threads = std::to_string(threads_per_server(cfg));
  for (int s = 0; s < cfg.stages; ++s)
    for (int i = 0; i < cfg.cluster.servers_per_stage; ++i) {
      auto args = args_for(role::server, {"--coordinator", address, "--stage", std::to_string(s), "--threads", threads});
      children[spawn_child(args)] = {"server " + std::to_string(s) + "." + std::to_string(i), role::server};
    }
  int trainers_left = cfg.cluster.trainers;
  for (int i = 0; i < cfg.cluster.trainers; ++i)
    children[spawn_child(args_for(role::trainer, {"--coordinator", address, "--threads", "1"}))] = {
        "trainer " + std::to_string(i), role::trainer};
  log->info("coordinator on {}, {} stages x {} servers ({} torch threads each), {} trainer(s); Ctrl-C stops all",
            address, cfg.stages, cfg.cluster.servers_per_stage, threads, cfg.cluster.trainers);
  metrics->emit("cluster_start", {{"stages", int64_t{cfg.stages}},
                                  {"servers_per_stage", int64_t{cfg.cluster.servers_per_stage}},
                                  {"trainers", int64_t{cfg.cluster.trainers}},
                                  {"coordinator_port", int64_t{port}}});

  int exit_code = 0;
  while (!stop_requested && trainers_left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const auto c = children[pid];
    children.erase(pid);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    metrics->emit("process_exit", {{"process", c.name}, {"pid", int64_t{pid}}, {"code", int64_t{code}}});
    if (c.which == role::trainer) {
      --trainers_left;
      if (code != 0) {
        log->error("{} exited with code {}", c.name, code);
        exit_code = 1;
      }
    } else if (c.which == role::coordinator) {
      log->error("the coordinator exited with code {}; stopping the cluster", code);
      exit_code = 1;
      break;
    } else {
      log->warn("{} (pid {}) exited with code {}", c.name, pid, code);
    }
  }
  log->info("stopping {} processes", children.size());
  stop_all(children, log);
  metrics->emit("cluster_exit", {{"code", int64_t{exit_code}}});
  return exit_code;
}

} // namespace swarm
