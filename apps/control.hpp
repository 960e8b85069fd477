#pragma once
// --control etcd://...: the etcd side of standby coordinators (issue 27).
//
// Coordinators are candidates of one etcd election (`swarm/leader`); the
// leader's key holds its "host:port" and its creation revision is its term.
// Followers (servers, trainers, --role status) read the leader from there,
// and watch the election while they run, so a new leader is joined even when
// the old one's link has not dropped yet (apps/node.cpp). What a successor needs
// lives under `swarm/state/` (actors/control_records.hpp).
//
// Here: the client from the config, the leader lookup, the lease keeper and
// the recorder (each a thread of its own with its own client: the etcd
// client blocks and is not shared between threads), and loading what the
// predecessor recorded.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/control_records.hpp"
#include "actors/leadership.hpp"
#include "base/metrics.hpp"
#include "config/config.hpp"
#include "net/etcd.hpp"

namespace swarm::control {

inline const std::string election = "swarm/leader";
inline const std::string state_prefix = "swarm/";  ///< + a record's key (actors/control_records.hpp)

/// --control's members (validated with the config) and TLS settings: what
/// each thread here makes its own client from.
struct endpoints {
  std::vector<etcd_member> members;
  etcd_tls tls;
};
[[nodiscard]] endpoints endpoints_of(const app_config& cfg);
/// A client of --control's members, each call bounded by `timeout` per member.
[[nodiscard]] std::unique_ptr<etcd_client> client_of(const app_config& cfg, std::chrono::milliseconds timeout);

struct leader_info {
  std::string address;  ///< "host:port" of the leading coordinator
  int64_t term = 0;
};
/// The leader now; none while nobody leads (an election between leaders, or
/// no quorum is PEER_GONE).
[[nodiscard]] caf::expected<std::optional<leader_info>> find_leader(etcd_client& client);

/// The candidates' addresses in campaign order (the first leads).
[[nodiscard]] caf::expected<std::vector<std::string>> candidates(etcd_client& client);

struct resume_state {
  std::vector<std::optional<stage_record>> stages;
  std::optional<rebalancer_record> rebalancer;
};
/// What the predecessor recorded; a value of the wrong shape is logged and
/// skipped (that part starts from nothing).
[[nodiscard]] caf::expected<resume_state> load_resume(etcd_client& client, int stages);

/// Follows the election with etcd's watch, in a thread of its own that lives
/// as long as the process: the term of the leader etcd names now (0 until the
/// first answer; the last one while none leads), read again whenever the
/// election's keys change (and at least every 5 s, when the watch is quiet or
/// has to be made again).
[[nodiscard]] std::shared_ptr<const std::atomic<int64_t>> start_leader_watch(endpoints where);

/// A thread that every 2 s tells `metrics`' observers (the status board; not
/// the file) a `control` note: this process's role (it leads while
/// `*leading_term` > 0), etcd's leader and term, the candidates, and which
/// members answer. Runs until the process ends.
void start_watch(endpoints where, std::shared_ptr<metrics_sink> metrics,
                 std::shared_ptr<std::atomic<int64_t>> leading_term);

/// Keeps `lease` alive every ttl/8 and moves `leader->valid_until` to each
/// renewal's send time + ttl - margin; stops renewing when the lease is gone.
class lease_keeper {
public:
  lease_keeper(endpoints where, int64_t lease, int64_t ttl_s, std::shared_ptr<leadership> leader);
  ~lease_keeper();
  lease_keeper(const lease_keeper&) = delete;
  lease_keeper& operator=(const lease_keeper&) = delete;

  /// etcd said the lease is gone, or it was not renewed in time.
  [[nodiscard]] bool lost() const;
  /// Waits up to `wait` for the first renewal; whether the lease holds.
  [[nodiscard]] bool wait_renewed(std::chrono::milliseconds wait) const;
  /// From now on each renewal also checks that the won election's key still
  /// exists with its term: a leader whose key was deleted (by anyone) no
  /// longer leads, whatever its lease says.
  void watch(const etcd_leadership& won);
  /// How long before etcd's expiry this process stops ordering.
  [[nodiscard]] static std::chrono::milliseconds margin(int64_t ttl_s);

private:
  void run(endpoints where);
  int64_t lease_, ttl_s_;
  std::shared_ptr<leadership> leader_;
  std::atomic<bool> stop_{false}, gone_{false};
  std::mutex m_;
  std::optional<etcd_leadership> watched_;
  std::thread thread_;
};

/// Writes records for a leader, the newest value of each key, in a thread of
/// its own (put_if_leader: nothing once it no longer leads). A leader that
/// steps down flushes first: what it recorded last is what its successor
/// resumes from.
class recorder {
public:
  /// How long the destructor waits for queued records to be written.
  static constexpr std::chrono::milliseconds flush_wait{2000};

  recorder(endpoints where, etcd_leadership won);
  /// Flushes (at most flush_wait), then stops.
  ~recorder();
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;

  void put(const std::string& key, const std::string& value);
  /// Waits up to `wait` until every record put so far is written; whether
  /// they are (false too once etcd said this process no longer leads).
  [[nodiscard]] bool flush(std::chrono::milliseconds wait);

private:
  void run(endpoints where);
  etcd_leadership won_;
  std::mutex m_;
  std::condition_variable cv_, drained_;  ///< cv_: records to write; drained_: a batch written
  std::map<std::string, std::string> pending_;
  bool stop_ = false;
  bool writing_ = true;  ///< a batch taken from pending_ not written yet (and before the thread's first wait)
  bool gone_ = false;    ///< no longer leads: nothing more will be written
  std::thread thread_;
};

}  // namespace swarm::control
