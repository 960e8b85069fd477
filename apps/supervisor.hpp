#pragma once
// --role cluster's supervisor (apps/cluster.cpp: starting, chaos, recovery,
// stopping; apps/cluster_control.cpp: --control-replicas' etcd members and
// coordinator candidates). One class, two files; nothing outside apps/ sees it.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <sys/types.h>

#include "apps/children.hpp"
#include "apps/control.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "base/metrics.hpp"
#include "config/config.hpp"
#include "policy/chaos.hpp"

namespace swarm::supervising {

using clock_type = std::chrono::steady_clock;

inline clock_type::duration after_s(double s) {
  return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(s));
}

/// A server hit by chaos, due back (restarted or continued) at `at`.
struct recovery {
  clock_type::time_point at;
  pid_t pid = 0;
  child victim;
  bool killed = false;  ///< restart it (SIGKILLed) rather than continue it (SIGSTOPped)
};

/// --control-replicas: an etcd member or a coordinator candidate, started
/// again with the same arguments whenever it exits.
struct control_process {
  std::string name;
  std::vector<std::string> args;
  bool etcd = false;
  int port = 0;        ///< candidates: the port they publish on (how the leader's address names one)
  std::string output;  ///< etcd: its log file (grpc writes to stderr past --log-outputs)
  pid_t pid = 0;
  std::optional<clock_type::time_point> restart_at;
};

class supervisor {
public:
  explicit supervisor(app_config cfg);
  int run();

private:
  // starting
  bool start();
  std::vector<std::string> args_for(role r, std::vector<std::string> extra) const;
  std::vector<std::string> coordinator_args(std::vector<std::string> extra) const;
  pid_t start_server(const child& c, bool restart);
  void start_coordinator_again();
  bool start_control(const std::string& dir);
  void start_control_process(control_process& p);
  pid_t leading_candidate();
  // running
  void chaos(clock_type::time_point now);
  void hit(pid_t pid, bool kill, clock_type::time_point now);
  void recover(clock_type::time_point now);
  bool on_exit(pid_t pid, int status);  ///< false: stop the cluster
  // stopping, done
  void stop();

  app_config cfg_;
  std::shared_ptr<spdlog::logger> log_ = get_logger("cluster");
  std::shared_ptr<metrics_sink> metrics_;
  double run_started_ = unix_seconds();
  std::string exe_ = self_exe();
  std::vector<std::string> common_;      ///< every child's flags: the config
  std::vector<std::string> http_flags_;  ///< the status page keeps its port across coordinator restarts
  children_map children_;
  std::map<std::string, size_t> launch_index_;  ///< server name -> position in --server-slowdowns
  std::vector<std::string> slowdowns_;
  std::string threads_;
  int port_ = 0;
  std::string address_;
  int trainers_left_ = 0;
  int exit_code_ = 0;
  // The coordinator's supervision.
  const policy::coordinator_supervision supervision_;
  pid_t coordinator_ = 0;
  clock_type::time_point coordinator_started_ = clock_type::now();
  int quick_deaths_ = 0;
  bool chaos_hit_coordinator_ = false;  ///< its death is our own doing
  std::optional<clock_type::time_point> restart_coordinator_at_;
  // Chaos.
  std::optional<policy::chaos_mode> mode_;
  std::mt19937_64 rng_;
  clock_type::time_point started_ = clock_type::now();
  clock_type::time_point next_hit_, next_coordinator_hit_;
  bool wiped_ = false;
  std::vector<recovery> recoveries_;
  std::set<pid_t> chaos_killed_;
  // --control-replicas.
  std::vector<control_process> control_;
  std::unique_ptr<etcd_client> etcd_;
};

}  // namespace swarm::supervising
