// --role cluster: a whole local swarm as separate OS processes on 127.0.0.1,
// run by a small supervisor:
//
//   starting --(the coordinator's port file appears)--> running
//   running --(every trainer exited, a signal, or the coordinator died 5 times at once)--> stopping
//   starting --(no coordinator)--> stopping --> done (run summary and plot)
//
// While running, the coordinator is supervised: when it dies it is started
// again on the same port (servers and trainers join it again by themselves);
// --chaos hits servers and the coordinator. What to do in either case is a
// pure decision of policy/chaos.hpp; this file carries it out.
//
// --control-replicas N: no single coordinator. N etcd members on loopback
// (their data and logs in the run's folder, etcd/), two coordinator
// candidates elected through them, and every child with --control. A
// candidate or member that exits is started again (the same ports and data);
// --chaos-coordinator-every hits whichever candidate leads.
//
// Every child is this same binary with another --role and the full config as
// flags. Children inherit stdout/stderr, so their progress lines show here.

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apps/supervisor.hpp"
#include "policy/chaos.hpp"
#include "apps/children.hpp"
#include "apps/huge_pages.hpp"
#include "apps/node.hpp"
#include "apps/roles.hpp"
#include "apps/weight_roles.hpp"
#include "base/log.hpp"
#include "apps/control.hpp"
#include "base/metrics.hpp"
#include "observe/run_summary.hpp"

namespace swarm {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

std::string join_list(const std::vector<int>& xs) {
  std::string out;
  for (int x : xs)
    out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
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

}  // namespace

namespace supervising {

supervisor::supervisor(app_config cfg)
    : cfg_(std::move(cfg)), mode_(policy::chaos_mode_of(cfg_.cluster.chaos)), rng_(cfg_.cluster.chaos_seed) {
  // A run always has a metrics file: its summary and plot are made from it.
  if (cfg_.metrics.empty()) {
    char run_template[] = "/tmp/swarm-run-XXXXXX";
    if (const char* run_dir = ::mkdtemp(run_template))
      cfg_.metrics = std::string{run_dir} + "/metrics.jsonl";
  }
  metrics_ = open_metrics(cfg_.metrics, "cluster");
  common_ = to_flags(cfg_);
  slowdowns_ = split_list(cfg_.cluster.server_slowdowns);
  next_hit_ = started_ + after_s(cfg_.cluster.chaos_every_s);
  next_coordinator_hit_ = started_ + after_s(cfg_.cluster.chaos_coordinator_every_s);
  wiped_ = cfg_.cluster.chaos_wipe_at_s <= 0;
}

std::vector<std::string> supervisor::args_for(role r, std::vector<std::string> extra) const {
  std::vector<std::string> args{exe_, "--role", to_string(r)};
  args.insert(args.end(), common_.begin(), common_.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> supervisor::coordinator_args(std::vector<std::string> extra) const {
  extra.insert(extra.end(), http_flags_.begin(), http_flags_.end());
  return args_for(role::coordinator, extra);
}

/// A restarted server goes where the swarm needs it, unless rebalancing is off:
/// then servers stay where they started, restarts included.
pid_t supervisor::start_server(const child& c, bool restart) {
  const bool auto_stage = restart && cfg_.coordinator.rebalance == "on";
  std::vector<std::string> extra{"--stage", auto_stage ? std::string{"auto"} : std::to_string(c.stage), "--threads",
                                 threads_};
  if (control_.empty())
    extra.insert(extra.end(), {"--coordinator", address_});
  if (const auto i = launch_index_.at(c.name); i < slowdowns_.size())
    extra.insert(extra.end(), {"--slowdown", slowdowns_[i]});
  const pid_t pid = spawn_child(args_for(role::server, extra));
  children_[pid] = c;
  return pid;
}

/// starting: the coordinator (until its port file appears), the servers, the trainers.
bool supervisor::start() {
  want_huge_pages();  // for the children: large transfer buffers in huge pages
  int http_port = cfg_.coordinator.http_port;
  if (http_port == 0 && (http_port = free_tcp_port(cfg_.coordinator.http_host)) == 0)
    log_->warn("no status page: no free port on --http-host {}", cfg_.coordinator.http_host);
  if (http_port > 0)
    http_flags_ = {"--http-port", std::to_string(http_port), "--http-host", cfg_.coordinator.http_host};
  if (http_port > 0 && !cfg_.coordinator.http_token.empty())
    http_flags_.insert(http_flags_.end(), {"--http-token", cfg_.coordinator.http_token});
  char dir_template[] = "/tmp/swarm-cluster-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  if (cfg_.cluster.control_replicas > 0) {
    const bool elected = start_control(dir);
    std::filesystem::remove_all(dir);
    if (!elected)
      return false;
  } else {
    coordinator_ = spawn_child(coordinator_args({"--port", "0", "--port-file", dir + "/coordinator.port"}));
    children_[coordinator_] = {"coordinator", role::coordinator, -1};
    port_ = wait_for_port(dir + "/coordinator.port", coordinator_);
    std::filesystem::remove_all(dir);
    if (port_ == 0) {
      log_->error("the coordinator did not start (see its message above)");
      return false;
    }
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  const auto per_stage = cfg_.cluster.servers_of_stages(cfg_.stages);
  threads_ = std::to_string(threads_per_server(cfg_, std::accumulate(per_stage.begin(), per_stage.end(), 0)));
  for (int s = 0; s < cfg_.stages; ++s)
    for (int i = 0; i < per_stage[static_cast<size_t>(s)]; ++i) {
      child c{"server " + std::to_string(s) + "." + std::to_string(i), role::server, s};
      launch_index_[c.name] = launch_index_.size();
      start_server(c, false);
    }
  trainers_left_ = cfg_.cluster.trainers;
  for (int i = 0; i < cfg_.cluster.trainers; ++i) {
    std::vector<std::string> extra{"--threads", "1", "--trainer-slot", std::to_string(i)};
    if (control_.empty())
      extra.insert(extra.end(), {"--coordinator", address_});
    children_[spawn_child(args_for(role::trainer, extra))] = {"trainer " + std::to_string(i), role::trainer, -1};
  }
  log_->info("coordinator on {}, {} stages with {} servers ({} torch threads each), {} trainer(s); Ctrl-C stops all",
             address_, cfg_.stages, join_list(per_stage), threads_, cfg_.cluster.trainers);
  if (http_port > 0)
    log_->info("status page: http://{}:{}/  (swarm --role status {} prints it here)",
               cfg_.coordinator.http_host == "0.0.0.0" ? "127.0.0.1" : cfg_.coordinator.http_host, http_port,
               control_.empty() ? "--coordinator " + address_ : "--control " + cfg_.net.control);
  metrics_->emit("cluster_start", {{"stages", int64_t{cfg_.stages}},
                                   {"stage_servers", join_list(per_stage)},
                                   {"trainers", int64_t{cfg_.cluster.trainers}},
                                   {"coordinator_port", int64_t{port_}}});
  return true;
}

void supervisor::start_coordinator_again() {
  coordinator_ = spawn_child(coordinator_args({"--port", std::to_string(port_)}));
  children_[coordinator_] = {"coordinator", role::coordinator, -1};
  coordinator_started_ = clock_type::now();
  log_->info("started the coordinator again on port {} (pid {})", port_, coordinator_);
  metrics_->emit("process_start", {{"process", std::string{"coordinator"}}, {"pid", int64_t{coordinator_}}});
}

void supervisor::hit(pid_t pid, bool kill, clock_type::time_point now) {
  const auto victim = children_.at(pid);
  ::kill(pid, kill ? SIGKILL : SIGSTOP);
  if (kill)
    chaos_killed_.insert(pid);
  log_->warn("chaos: {} {} (pid {}) for {} s", kill ? "killed" : "stopped", victim.name, pid,
             cfg_.cluster.chaos_down_s);
  metrics_->emit("chaos",
                 {{"action", std::string{kill ? "kill" : "stop"}}, {"process", victim.name}, {"pid", int64_t{pid}}});
  recoveries_.push_back({now + after_s(cfg_.cluster.chaos_down_s), pid, victim, kill});
}

/// running: --chaos, --chaos-wipe-at and --chaos-coordinator-every, when due.
void supervisor::chaos(clock_type::time_point now) {
  const auto& c = cfg_.cluster;
  std::vector<policy::chaos_target> servers;
  for (const auto& [pid, ch] : children_)
    if (ch.which == role::server)
      servers.push_back({pid, ch.stage});
  if (mode_ && *mode_ != policy::chaos_mode::none && now >= next_hit_) {
    next_hit_ = now + after_s(c.chaos_every_s);
    if (auto victim = policy::choose_victim(servers, c.chaos_stage, *mode_, rng_))
      hit(static_cast<pid_t>(victim->id), victim->kill, now);
  }
  if (!wiped_ && now >= started_ + after_s(c.chaos_wipe_at_s)) {
    wiped_ = true;
    const int stage = policy::choose_wipe_stage(c.chaos_stage, cfg_.stages, rng_);
    log_->warn("chaos: killing every server of stage {} at once", stage);
    metrics_->emit(
        "chaos", {{"action", std::string{"wipe"}}, {"process", "stage " + std::to_string(stage)}, {"pid", int64_t{0}}});
    for (const auto& s : servers)
      if (s.stage == stage)
        hit(static_cast<pid_t>(s.id), true, now);
  }
  if (c.chaos_coordinator_every_s > 0 && now >= next_coordinator_hit_ && !control_.empty()) {
    next_coordinator_hit_ = now + after_s(c.chaos_coordinator_every_s);
    if (const pid_t leader = leading_candidate(); leader > 0)
      hit(leader, c.chaos_coordinator_action == "kill", now);
    else
      log_->warn("chaos: no coordinator leads right now; none hit");
  }
  if (c.chaos_coordinator_every_s > 0 && now >= next_coordinator_hit_ && children_.count(coordinator_) &&
      c.chaos_coordinator_action == "stop") {
    next_coordinator_hit_ = now + after_s(c.chaos_coordinator_every_s);
    hit(coordinator_, false, now);  // continued after --chaos-down, like a stopped server
  }
  if (c.chaos_coordinator_every_s > 0 && now >= next_coordinator_hit_ && children_.count(coordinator_)) {
    next_coordinator_hit_ = now + after_s(c.chaos_coordinator_every_s);
    ::kill(coordinator_, SIGKILL);
    chaos_hit_coordinator_ = true;
    log_->warn("chaos: killed the coordinator (pid {})", coordinator_);
    metrics_->emit(
        "chaos",
        {{"action", std::string{"kill"}}, {"process", std::string{"coordinator"}}, {"pid", int64_t{coordinator_}}});
  }
}

/// running: servers hit by chaos come back when due; the coordinator when its restart is due.
void supervisor::recover(clock_type::time_point now) {
  for (auto& p : control_)
    if (p.restart_at && now >= *p.restart_at) {
      start_control_process(p);
      log_->info("started {} again (pid {})", p.name, p.pid);
    }
  if (restart_coordinator_at_ && now >= *restart_coordinator_at_) {
    restart_coordinator_at_.reset();
    start_coordinator_again();
  }
  for (auto it = recoveries_.begin(); it != recoveries_.end();) {
    if (now < it->at) {
      ++it;
      continue;
    }
    if (it->killed && it->victim.which != role::server) {  // a candidate: restarted when it exited
      it = recoveries_.erase(it);
      continue;
    }
    const pid_t pid = it->killed ? start_server(it->victim, true) : it->pid;
    if (it->killed)
      log_->info("chaos: restarted {} as pid {}", it->victim.name, pid);
    else
      ::kill(pid, SIGCONT);
    metrics_->emit("chaos", {{"action", std::string{it->killed ? "restart" : "continue"}},
                             {"process", it->victim.name},
                             {"pid", int64_t{pid}}});
    it = recoveries_.erase(it);
  }
}

bool supervisor::on_exit(pid_t pid, int status) {
  const auto c = children_[pid];
  children_.erase(pid);
  for (auto& p : control_)
    if (p.pid == pid) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (chaos_killed_.erase(pid) == 0)
        metrics_->emit("process_exit", {{"process", p.name}, {"pid", int64_t{pid}}, {"code", int64_t{code}}});
      log_->warn("{} (pid {}) exited with code {}; starting it again", p.name, pid, code);
      p.pid = 0;
      p.restart_at = clock_type::now() + std::chrono::milliseconds(p.etcd ? 1000 : 200);
      return true;
    }
  if (chaos_killed_.erase(pid) > 0)
    return true;  // our own doing, logged when it happened
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  metrics_->emit("process_exit", {{"process", c.name}, {"pid", int64_t{pid}}, {"code", int64_t{code}}});
  if (c.which == role::trainer) {
    --trainers_left_;
    if (code != 0) {
      log_->error("{} exited with code {}", c.name, code);
      exit_code_ = 1;
    }
  } else if (c.which == role::coordinator) {
    const auto verdict = policy::after_coordinator_death(
        supervision_, quick_deaths_, std::chrono::duration<double>(clock_type::now() - coordinator_started_).count(),
        chaos_hit_coordinator_);
    chaos_hit_coordinator_ = false;
    quick_deaths_ = verdict.quick_deaths;
    if (verdict.give_up) {
      log_->error(
          "the coordinator exited with code {}, the {}th time in a row within {} s of its start; stopping "
          "the cluster",
          code, quick_deaths_, supervision_.quick_s);
      exit_code_ = 1;
      return false;
    }
    log_->warn("the coordinator exited with code {}; starting it again on port {}", code, port_);
    restart_coordinator_at_ = clock_type::now() + after_s(verdict.restart_in_s);
  } else {
    log_->warn("{} (pid {}) exited with code {}", c.name, pid, code);
  }
  return true;
}

/// stopping: a stopped server must run again to exit; then every child.
void supervisor::stop() {
  bool continued = false;
  for (const auto& r : recoveries_)
    if (!r.killed)
      continued |= ::kill(r.pid, SIGCONT) == 0;
  // A server stopped until now reports to its averager before it is asked to
  // stop too: else a peer's hand-in round could start with it as a member just
  // as it exits empty-handed, and that peer's last gradient was dropped (CI,
  // once: 8 samples).
  if (continued)
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  log_->info("stopping {} processes", children_.size());
  stop_all(children_, log_);
}

int supervisor::run() {
  if (!start()) {
    stop();
    return 1;
  }
  while (!stop_requested && trainers_left_ > 0) {  // running
    const auto now = clock_type::now();
    chaos(now);
    recover(now);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    else if (!on_exit(pid, status))
      break;
  }
  stop();
  // done
  metrics_->emit("cluster_exit", {{"code", int64_t{exit_code_}}});
  if (!cfg_.metrics.empty()) {  // empty only when no temporary folder could be made
    std::cout << run_summary(cfg_.metrics, run_started_) << std::flush;
    plot_run(cfg_.metrics, log_);
  }
  return exit_code_;
}

}  // namespace supervising

int run_cluster(const app_config& cfg) {
  setup_logging("cluster", cfg.log_level);
  // Checked here once: every server would refuse a file that does not fit, again after every restart.
  if (auto initial = initial_weights(cfg); !initial) {
    std::cerr << "swarm: cluster: --init-from: " << initial.error().what() << "\n";
    return 2;
  }
  return supervising::supervisor{cfg}.run();
}

}  // namespace swarm
