// --role cluster --control-replicas N: no single coordinator (apps/cluster.cpp
// runs the rest). N etcd members on loopback, their data and logs in the
// run's folder, and two coordinator candidates elected through them.
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "apps/node.hpp"
#include "apps/roles.hpp"
#include "apps/supervisor.hpp"
#include "base/owned_folder.hpp"

namespace swarm::supervising {

namespace {

/// etcd member `name`'s command line: client URL `c`, peer URL `p`, the
/// whole cluster's peers `initial`. Heartbeat 25 ms, election 250 ms
/// (loopback): etcd's lease minimum becomes 1 s (1.5 election timeouts,
/// rounded up), so --control-lease 1 is honoured, and a lost etcd leader is
/// replaced well within that second. Pre-vote: a member back from a
/// partition does not depose a working leader (without it, the election it
/// forced stalled lease renewals for seconds and cost the coordinator its
/// lease: the regions test).
std::vector<std::string> etcd_member_args(const std::string& etcd_exe, const std::string& name, const std::string& data,
                                          const std::string& c, const std::string& p, const std::string& initial) {
  // One flag and its value a line.
  // clang-format off
  return {etcd_exe,
          "--name", name,
          "--data-dir", data + "/" + name,
          "--listen-client-urls", c,
          "--advertise-client-urls", c,
          "--listen-peer-urls", p,
          "--initial-advertise-peer-urls", p,
          "--initial-cluster", initial,
          "--initial-cluster-state", "new",
          "--initial-cluster-token", "swarm-" + std::to_string(::getpid()),
          "--heartbeat-interval", "25",
          "--election-timeout", "250",
          "--pre-vote",
          "--logger", "zap",
          "--log-outputs", "stderr"};
  // clang-format on
}

}  // namespace

void supervisor::start_control_process(control_process& p) {
  p.pid = spawn_child(p.args, p.output);
  p.restart_at.reset();
  children_[p.pid] = {p.name, role::coordinator, -1, p.etcd};
  metrics_->emit("process_start", {{"process", p.name}, {"pid", int64_t{p.pid}}});
}

/// --control-replicas: the etcd members, then two candidates; true once one
/// of them leads (its port file appeared), with address_ its address.
bool supervisor::start_control(const std::string& dir) {
  const int n = cfg_.cluster.control_replicas;
  std::string etcd_exe;
  for (const char* d : {"/usr/bin", "/usr/local/bin", "/usr/sbin"})
    if (::access((std::string{d} + "/etcd").c_str(), X_OK) == 0) {
      etcd_exe = std::string{d} + "/etcd";
      break;
    }
  if (etcd_exe.empty()) {
    log_->error(
        "--control-replicas needs etcd, which is not installed here (Debian's etcd-server; scripts/setup.sh "
        "installs it)");
    return false;
  }
  const std::string data = std::filesystem::path(cfg_.metrics).parent_path() / "etcd";
  // Afresh each run: members would rejoin an earlier run's cluster (its
  // ports, its quorum) and never elect anyone; and its records describe
  // servers that are gone. Only a folder an earlier run made, though.
  if (auto err = reset_owned_folder(data, ".swarm-etcd")) {
    log_->error("--control-replicas keeps etcd's data in {}: {}", data, err.what());
    return false;
  }
  std::vector<int> client(n), peer(n);
  std::string initial, endpoints;
  for (int i = 0; i < n; ++i) {
    client[i] = free_tcp_port("127.0.0.1");
    peer[i] = free_tcp_port("127.0.0.1");
    initial += (i ? "," : "") + ("m" + std::to_string(i)) + "=http://127.0.0.1:" + std::to_string(peer[i]);
    endpoints += (i ? "," : "") + ("127.0.0.1:" + std::to_string(client[i]));
  }
  for (int i = 0; i < n; ++i) {
    const std::string name = "m" + std::to_string(i), c = "http://127.0.0.1:" + std::to_string(client[i]),
                      p = "http://127.0.0.1:" + std::to_string(peer[i]);
    control_.push_back(
        {"etcd " + name, etcd_member_args(etcd_exe, name, data, c, p, initial), true, 0, data + "/" + name + ".log"});
  }
  cfg_.net.control = "etcd://" + endpoints;
  common_ = to_flags(cfg_);
  etcd_ = control::client_of(cfg_, std::chrono::milliseconds(500));
  for (int i = 0; i < 2; ++i) {
    const int port = free_tcp_port("127.0.0.1");
    std::vector<std::string> extra{"--port", std::to_string(port), "--port-file",
                                   dir + "/candidate" + std::to_string(i) + ".port"};
    if (i == 0)  // the status page of the first candidate; the other's on its own port
      extra.insert(extra.end(), http_flags_.begin(), http_flags_.end());
    else if (!http_flags_.empty())
      extra.insert(extra.end(), {"--http-port", std::to_string(free_tcp_port(cfg_.coordinator.http_host)),
                                 "--http-host", cfg_.coordinator.http_host});
    if (i == 1 && !http_flags_.empty() && !cfg_.coordinator.http_token.empty())
      extra.insert(extra.end(), {"--http-token", cfg_.coordinator.http_token});
    control_.push_back(
        {"coordinator " + std::string(1, static_cast<char>('A' + i)), args_for(role::coordinator, extra), false, port});
  }
  for (auto& p : control_)
    start_control_process(p);
  log_->info("etcd members on {} (data and logs in {}); coordinator candidates on ports {} and {}", endpoints, data,
             control_[static_cast<size_t>(n)].port, control_[static_cast<size_t>(n) + 1].port);
  // One of them leads once its port file appears (a standby writes none).
  const auto deadline = clock_type::now() + after_s(std::max(30.0, cfg_.net.coordinator_wait_s));
  while (clock_type::now() < deadline && !stop_requested) {
    for (int i = 0; i < 2; ++i) {
      std::ifstream in(dir + "/candidate" + std::to_string(i) + ".port");
      if (in >> port_ && port_ > 0) {
        address_ = "127.0.0.1:" + std::to_string(port_);
        return true;
      }
    }
    int status = 0;
    if (const pid_t pid = ::waitpid(-1, &status, WNOHANG); pid > 0) {
      log_->error("{} exited with code {} while starting", children_[pid].name,
                  WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
      children_.erase(pid);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  log_->error("no coordinator candidate was elected within {:.0f} s", std::max(30.0, cfg_.net.coordinator_wait_s));
  return false;
}

/// The pid of the candidate etcd names as leader; 0 when none leads or etcd does not answer.
pid_t supervisor::leading_candidate() {
  auto found = control::find_leader(*etcd_);
  if (!found || !*found)
    return 0;
  for (const auto& p : control_)
    if (!p.etcd && p.pid > 0 && (*found)->address == "127.0.0.1:" + std::to_string(p.port))
      return p.pid;
  return 0;
}

}  // namespace swarm::supervising
