// --role cluster: a whole local swarm as separate OS processes on 127.0.0.1.
//
//   starting --(coordinator's port file appears)--> running --(all trainers exited,
//   or a signal)--> stopping --> done
//
// The coordinator is supervised: when it dies while running, it is started
// again on the same port (servers and trainers join it again by themselves);
// only when it keeps dying at once (5 starts within 10 s of each other) does
// the cluster give up and stop.
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
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.hpp"
#include "base/metrics.hpp"
#include "observe/run_summary.hpp"
#include "apps/huge_pages.hpp"
#include "apps/roles.hpp"

namespace swarm {

namespace {

struct child {
  std::string name;  ///< "coordinator", "server 1.0", "trainer 0"
  role which;
  int stage = -1;    ///< servers: the stage it was started on (it may have moved since)
};

/// --chaos: one random server hit every chaos_every_s, back after chaos_down_s.
struct chaos_event {
  std::chrono::steady_clock::time_point at;
  pid_t pid = 0;        ///< stop: the stopped process; kill: the killed one
  child victim;
  bool killed = false;  ///< restart it (SIGKILLed) rather than continue it (SIGSTOPped)
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

/// SIGTERM to `which` children (all when nullopt), SIGKILL to those alive 10 s later.
void stop_children(std::map<pid_t, child>& children, std::optional<role> except,
                   const std::shared_ptr<spdlog::logger>& log) {
  std::set<pid_t> targets;
  for (const auto& [pid, c] : children)
    if (!except || c.which != *except)
      targets.insert(pid);
  for (pid_t pid : targets)
    ::kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!targets.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      targets.erase(pid);
      children.erase(pid);
      continue;
    }
    if (pid < 0)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t p : targets) {
        log->warn("{} (pid {}) ignored SIGTERM; killing it", children[p].name, p);
        ::kill(p, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// Stops trainers and servers first and the coordinator last, so nobody sees
/// the registry vanish and tries to register again on the way out.
void stop_all(std::map<pid_t, child>& children, const std::shared_ptr<spdlog::logger>& log) {
  stop_children(children, role::coordinator, log);
  stop_children(children, std::nullopt, log);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// A running server, of `stage` unless it is -1, chosen uniformly at random.
std::optional<std::pair<pid_t, child>> pick_victim(const std::map<pid_t, child>& children, int stage,
                                                   std::mt19937_64& rng) {
  std::vector<std::pair<pid_t, child>> servers;
  for (const auto& [pid, c] : children)
    if (c.which == role::server && (stage < 0 || c.stage == stage))
      servers.emplace_back(pid, c);
  if (servers.empty())
    return std::nullopt;
  return servers[std::uniform_int_distribution<size_t>(0, servers.size() - 1)(rng)];
}

int threads_per_server(const app_config& cfg, int servers) {
  if (cfg.threads > 0)
    return cfg.threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, servers));
}

/// Draws the run's picture next to its metrics file (scripts/plot_metrics.py;
/// matplotlib from Debian). A missing script or matplotlib costs only the plot.
void plot_run(const std::string& metrics_path, const std::shared_ptr<spdlog::logger>& log) {
  const std::string script = SWARM_SOURCE_DIR "/scripts/plot_metrics.py";
  auto base = metrics_path;
  if (base.size() > 6 && base.compare(base.size() - 6, 6, ".jsonl") == 0)
    base.resize(base.size() - 6);
  const auto png = base + ".png", out = base + ".plot.log";
  if (!std::filesystem::exists(script)) {
    log->info("no plot: {} is not here (the plot needs the source tree)", script);
    return;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execlp("python3", "python3", script.c_str(), metrics_path.c_str(), "-o", png.c_str(), nullptr);
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    log->warn("no plot: scripts/plot_metrics.py failed (its output: {})", out);
    return;
  }
  std::filesystem::remove(out);
  std::cout << "plot of the run: " << png << "\n" << std::flush;
}

/// A TCP port free on `host` right now (0 when none could be had).
int free_tcp_port(const std::string& host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  if (fd < 0 || ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0)
      ::close(fd);
    return 0;
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string join_list(const std::vector<int>& xs) {
  std::string out;
  for (int x : xs)
    out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

} // namespace

int run_cluster(const app_config& given) {
  setup_logging("cluster", given.log_level);
  auto log = get_logger("cluster");
  // A run always has a metrics file: its summary and plot are made from it.
  app_config cfg = given;
  if (cfg.metrics.empty()) {
    char run_template[] = "/tmp/swarm-run-XXXXXX";
    if (const char* run_dir = ::mkdtemp(run_template))
      cfg.metrics = std::string{run_dir} + "/metrics.jsonl";
  }
  const double run_started = unix_seconds();
  auto metrics = open_metrics(cfg.metrics, "cluster");
  const auto exe = self_exe();
  want_huge_pages();  // for the children: large transfer buffers in huge pages
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

  // The status page keeps its port across coordinator restarts: chosen here once.
  std::vector<std::string> http_flags;
  int http_port = cfg.coordinator.http_port;
  if (http_port == 0 && (http_port = free_tcp_port(cfg.coordinator.http_host)) == 0)
    log->warn("no status page: no free port on --http-host {}", cfg.coordinator.http_host);
  if (http_port > 0)
    http_flags = {"--http-port", std::to_string(http_port), "--http-host", cfg.coordinator.http_host};
  auto coordinator_flags = [&](std::vector<std::string> flags) {
    flags.insert(flags.end(), http_flags.begin(), http_flags.end());
    return args_for(role::coordinator, flags);
  };

  std::map<pid_t, child> children;
  const pid_t coord_pid = spawn_child(coordinator_flags({"--port", "0", "--port-file", port_file}));
  children[coord_pid] = {"coordinator", role::coordinator, -1};
  const int port = wait_for_port(port_file, coord_pid);
  std::filesystem::remove_all(dir);
  if (port == 0) {
    log->error("the coordinator did not start (see its message above)");
    stop_all(children, log);
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const auto per_stage = cfg.cluster.servers_of_stages(cfg.stages);
  const int total_servers = std::accumulate(per_stage.begin(), per_stage.end(), 0);
  const auto threads = std::to_string(threads_per_server(cfg, total_servers));
  const auto slowdowns = split_list(cfg.cluster.server_slowdowns);
  // A restarted server goes where the swarm needs it, unless rebalancing is off:
  // then servers stay where they started, restarts included.
  const bool restart_auto = cfg.coordinator.rebalance == "on";
  auto start_server = [&](const child& c, size_t launch_index, bool restart) {
    const auto stage = restart && restart_auto ? std::string{"auto"} : std::to_string(c.stage);
    std::vector<std::string> extra{"--coordinator", address, "--stage", stage, "--threads", threads};
    if (launch_index < slowdowns.size())
      extra.insert(extra.end(), {"--slowdown", slowdowns[launch_index]});
    const pid_t pid = spawn_child(args_for(role::server, extra));
    children[pid] = c;
    return pid;
  };
  std::map<std::string, size_t> launch_index;  ///< server name -> position in --server-slowdowns
  for (int s = 0; s < cfg.stages; ++s)
    for (int i = 0; i < per_stage[static_cast<size_t>(s)]; ++i) {
      child c{"server " + std::to_string(s) + "." + std::to_string(i), role::server, s};
      launch_index[c.name] = launch_index.size();
      start_server(c, launch_index[c.name], false);
    }
  int trainers_left = cfg.cluster.trainers;
  for (int i = 0; i < cfg.cluster.trainers; ++i)
    children[spawn_child(args_for(role::trainer, {"--coordinator", address, "--threads", "1"}))] = {
        "trainer " + std::to_string(i), role::trainer, -1};
  log->info("coordinator on {}, {} stages with {} servers ({} torch threads each), {} trainer(s); Ctrl-C stops all",
            address, cfg.stages, join_list(per_stage), threads, cfg.cluster.trainers);
  if (http_port > 0)
    log->info("status page: http://{}:{}/  (swarm --role status --coordinator {} prints it here)",
              cfg.coordinator.http_host == "0.0.0.0" ? "127.0.0.1" : cfg.coordinator.http_host, http_port, address);
  metrics->emit("cluster_start", {{"stages", int64_t{cfg.stages}},
                                  {"stage_servers", join_list(per_stage)},
                                  {"trainers", int64_t{cfg.cluster.trainers}},
                                  {"coordinator_port", int64_t{port}}});

  // Supervision of the coordinator: started again on its port when it dies.
  pid_t coordinator_pid = coord_pid;
  int quick_deaths = 0;  ///< coordinator deaths in a row within 10 s of their start
  bool chaos_hit_coordinator = false;  ///< its death is our own doing: never counted as quick
  auto coordinator_started = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> restart_coordinator_at;
  auto start_coordinator = [&] {
    coordinator_pid = spawn_child(coordinator_flags({"--port", std::to_string(port)}));
    children[coordinator_pid] = {"coordinator", role::coordinator, -1};
    coordinator_started = std::chrono::steady_clock::now();
    log->info("started the coordinator again on port {} (pid {})", port, coordinator_pid);
    metrics->emit("process_start", {{"process", std::string{"coordinator"}}, {"pid", int64_t{coordinator_pid}}});
  };

  int exit_code = 0;
  std::mt19937_64 chaos_rng(cfg.cluster.chaos_seed);
  const auto every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(cfg.cluster.chaos_every_s));
  const auto down_for = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(cfg.cluster.chaos_down_s));
  auto seconds_from_start = [](double s) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  };
  const auto started = std::chrono::steady_clock::now();
  auto next_hit = started + every;
  auto next_coordinator_hit = started + seconds_from_start(cfg.cluster.chaos_coordinator_every_s);
  bool wiped = cfg.cluster.chaos_wipe_at_s <= 0;
  std::vector<chaos_event> recoveries;
  std::set<pid_t> chaos_killed;
  auto hit_server = [&](std::pair<pid_t, child> victim, bool kill, std::chrono::steady_clock::time_point now) {
    ::kill(victim.first, kill ? SIGKILL : SIGSTOP);
    if (kill)
      chaos_killed.insert(victim.first);
    log->warn("chaos: {} {} (pid {}) for {} s", kill ? "killed" : "stopped", victim.second.name, victim.first,
              cfg.cluster.chaos_down_s);
    metrics->emit("chaos", {{"action", std::string{kill ? "kill" : "stop"}},
                            {"process", victim.second.name},
                            {"pid", int64_t{victim.first}}});
    recoveries.push_back({now + down_for, victim.first, victim.second, kill});
  };
  while (!stop_requested && trainers_left > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (cfg.cluster.chaos != "none" && now >= next_hit) {
      next_hit = now + every;
      if (auto hit = pick_victim(children, cfg.cluster.chaos_stage, chaos_rng)) {
        const bool kill = cfg.cluster.chaos == "kill" ||
                          (cfg.cluster.chaos == "mixed" && std::bernoulli_distribution(0.5)(chaos_rng));
        hit_server(*hit, kill, now);
      }
    }
    if (!wiped && now >= started + seconds_from_start(cfg.cluster.chaos_wipe_at_s)) {
      wiped = true;
      const int stage = cfg.cluster.chaos_stage >= 0
                            ? cfg.cluster.chaos_stage
                            : std::uniform_int_distribution<int>(0, cfg.stages - 1)(chaos_rng);
      log->warn("chaos: killing every server of stage {} at once", stage);
      metrics->emit("chaos", {{"action", std::string{"wipe"}}, {"process", "stage " + std::to_string(stage)},
                              {"pid", int64_t{0}}});
      std::vector<std::pair<pid_t, child>> victims;
      for (const auto& [pid, c] : children)
        if (c.which == role::server && c.stage == stage)
          victims.emplace_back(pid, c);
      for (const auto& v : victims)
        hit_server(v, true, now);
    }
    if (cfg.cluster.chaos_coordinator_every_s > 0 && now >= next_coordinator_hit && children.count(coordinator_pid)) {
      next_coordinator_hit = now + seconds_from_start(cfg.cluster.chaos_coordinator_every_s);
      ::kill(coordinator_pid, SIGKILL);
      chaos_hit_coordinator = true;
      log->warn("chaos: killed the coordinator (pid {})", coordinator_pid);
      metrics->emit("chaos", {{"action", std::string{"kill"}},
                              {"process", std::string{"coordinator"}},
                              {"pid", int64_t{coordinator_pid}}});
    }
    if (restart_coordinator_at && now >= *restart_coordinator_at) {
      restart_coordinator_at.reset();
      start_coordinator();
    }
    for (auto it = recoveries.begin(); it != recoveries.end();) {
      if (now < it->at) {
        ++it;
        continue;
      }
      if (it->killed) {
        const pid_t pid = start_server(it->victim, launch_index[it->victim.name], true);
        log->info("chaos: restarted {} as pid {}", it->victim.name, pid);
        metrics->emit("chaos", {{"action", std::string{"restart"}},
                                {"process", it->victim.name},
                                {"pid", int64_t{pid}}});
      } else {
        ::kill(it->pid, SIGCONT);
        metrics->emit("chaos", {{"action", std::string{"continue"}},
                                {"process", it->victim.name},
                                {"pid", int64_t{it->pid}}});
      }
      it = recoveries.erase(it);
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto c = children[pid];
    children.erase(pid);
    if (chaos_killed.erase(pid) > 0)
      continue;  // our own doing, logged when it happened
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    metrics->emit("process_exit", {{"process", c.name}, {"pid", int64_t{pid}}, {"code", int64_t{code}}});
    if (c.which == role::trainer) {
      --trainers_left;
      if (code != 0) {
        log->error("{} exited with code {}", c.name, code);
        exit_code = 1;
      }
    } else if (c.which == role::coordinator) {
      const bool quick = !chaos_hit_coordinator &&
                         std::chrono::steady_clock::now() - coordinator_started < std::chrono::seconds(10);
      chaos_hit_coordinator = false;
      quick_deaths = quick ? quick_deaths + 1 : 0;
      if (quick_deaths >= 5) {
        log->error("the coordinator exited with code {}, the 5th time in a row within 10 s of its start; stopping "
                   "the cluster", code);
        exit_code = 1;
        break;
      }
      // At once after a crash; after a second when it keeps dying (a port not yet free, say).
      log->warn("the coordinator exited with code {}; starting it again on port {}", code, port);
      restart_coordinator_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(quick ? 1000 : 0);
    } else {
      log->warn("{} (pid {}) exited with code {}", c.name, pid, code);
    }
  }
  for (const auto& r : recoveries)  // a stopped server must run again to exit
    if (!r.killed)
      ::kill(r.pid, SIGCONT);
  log->info("stopping {} processes", children.size());
  stop_all(children, log);
  metrics->emit("cluster_exit", {{"code", int64_t{exit_code}}});
  if (!cfg.metrics.empty()) {
    std::cout << run_summary(cfg.metrics, run_started) << std::flush;
    plot_run(cfg.metrics, log);
  }
  return exit_code;
}

} // namespace swarm
