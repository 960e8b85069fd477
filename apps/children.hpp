#pragma once
// The cluster's child processes: this same binary with another --role, started
// so that none outlives the launcher (PR_SET_PDEATHSIG) and stopped with
// SIGTERM, then SIGKILL for any that ignores it.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <spdlog/spdlog.h>

#include "config/config.hpp"

namespace swarm {

struct child {
  std::string name;  ///< "coordinator", "server 1.0", "trainer 0"
  role which = role::server;
  int stage = -1;     ///< servers: the stage it was started on (it may have moved since)
  bool etcd = false;  ///< an etcd member (--control-replicas), not this binary: stopped last
};
using children_map = std::map<pid_t, child>;

/// The path of this executable.
[[nodiscard]] std::string self_exe();

/// Starts `args` (args[0]: the executable) as a child that gets SIGTERM when
/// the launcher dies; its output appended to `output` when given, else the launcher's.
pid_t spawn_child(const std::vector<std::string>& args, const std::string& output = {});

/// Polls for the coordinator's port file; 0 when it does not appear in time or the coordinator ended.
[[nodiscard]] int wait_for_port(const std::string& file, pid_t coordinator);

/// Trainers first (their microbatches in flight finish while the servers still
/// serve), then servers and the rest, the coordinator last, so nobody sees the
/// registry vanish and tries to register again on the way out, etcd members
/// after them (a leader resigns on its way out): SIGTERM, and
/// SIGKILL to those alive 10 s later, per group. Stopped children are removed from `children`.
void stop_all(children_map& children, const std::shared_ptr<spdlog::logger>& log);

/// A TCP port free on `host` right now (0 when none could be had).
[[nodiscard]] int free_tcp_port(const std::string& host);

}  // namespace swarm
