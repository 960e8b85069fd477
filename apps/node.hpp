#pragma once
// The one start-up path of every networked role (coordinator, server, trainer,
// status). A role reads as its own steps between these:
//
//   node n{cfg, tag, who, metrics_role};   logging as `tag`, the metrics sink
//   ... the role's own checks ...           a bad config fails before anything starts
//   n.start();                              one actor system, configured as every node's; the stop watchdog
//   n.connect(address) / n.bulk()           the coordinator, this process's bulk endpoint
//   n.publish(handle, port, reuse)          the public port, behind the guard
//   n.run_with_coordinator(whom, ...)       serve until done, joining a restarted coordinator
//   n.end(code)                             exit without CAF's destructor
//
// A step that cannot be done says why on stderr and ends the process with the
// roles' exit codes (1: a runtime failure; 2: bad config or input).

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "base/metrics.hpp"
#include "config/config.hpp"
#include "messages/protocol.hpp"
#include "models/checkpoint.hpp"
#include "net/basp_guard.hpp"
#include "net/bulk.hpp"
#include "net/etcd.hpp"

namespace swarm {

/// Set by SIGINT/SIGTERM; every role polls it and shuts down cleanly.
extern std::atomic<bool> stop_requested;
void install_signal_handlers();

/// Ends the process with `code` without running the actor system's destructor
/// (CAF 0.17.6 can wait there forever for a detached actor): logs flushed, no
/// half-written checkpoint left behind.
[[noreturn]] void end_process(int code);

/// 0 for an actor that finished or was asked to stop, 1 otherwise.
[[nodiscard]] int exit_code_of(const caf::error& reason);

/// --checkpoint-dir as the actors take it; nullopt (said on stderr) when the
/// folder holds a checkpoint of another model config or stage count.
[[nodiscard]] std::optional<checkpoint_settings> checkpoints_of(const app_config& cfg, const char* who);

class node {
public:
  /// Logging as `tag` ("server s-123"); metrics appended as `metrics_role`
  /// (dropped without --metrics; nullptr: a role that writes no events opens
  /// no file, as --role status); `who` names the process in its messages.
  node(const app_config& cfg, const std::string& tag, const char* who, const char* metrics_role);

  /// The actor system and the stop watchdog.
  caf::actor_system& start();
  [[nodiscard]] caf::actor_system& sys() { return *sys_; }
  [[nodiscard]] const std::shared_ptr<metrics_sink>& metrics() const { return metrics_; }

  /// What the process is doing now, for the stop watchdog's message.
  void phase(const char* what);

  /// The coordinator at `address` (with --control: the leader etcd names),
  /// retried while it starts up; ends the process with 1 when it cannot be
  /// reached within --coordinator-wait.
  coordinator_actor connect(const std::string& address);

  /// This process's end of the bulk data plane on --host; ends the process with
  /// 1 when it cannot listen.
  std::shared_ptr<bulk_endpoint> bulk();

  /// Publishes `handle` on loopback only, behind a guard listening on `port`
  /// (any interface) that passes peers' BASP frames one by one after checking
  /// them (net/basp_guard.hpp): CAF 0.17.6 itself can be crashed or stalled by
  /// a single header. The guard is the public port; null (said on stderr)
  /// when either cannot listen.
  /// (Typed: the handle's interface is what remote peers check.)
  template <class Handle>
  std::unique_ptr<basp_guard> publish(const Handle& handle, int port, bool reuse) {
    const bool tls = sys_->has_openssl_manager();
    auto local = tls ? caf::openssl::publish(handle, 0, "127.0.0.1", reuse)
                     : sys_->middleman().publish(handle, 0, "127.0.0.1", reuse);
    return guard(local, port, tls);
  }

  /// Waits until `whom` terminates and returns its exit reason; a signal asks
  /// it to exit. Whenever the coordinator goes down meanwhile (with
  /// --control: or etcd names another leader), connects to its
  /// successor at `address` (or etcd's leader) and calls `rejoin(new
  /// coordinator)` until that returns no error, waiting longer after each
  /// failure in a row (policy/backoff.hpp), said at most every
  /// retry_log_every; `coordinator_up`, if given, says whether one is joined.
  caf::error run_with_coordinator(const caf::actor& whom, coordinator_actor coord, const std::string& address,
                                  const std::function<caf::error(const coordinator_actor&)>& rejoin,
                                  std::atomic<bool>* coordinator_up = nullptr);

  /// Waits until `whom` terminates (a signal asks it to exit) and returns its exit reason.
  caf::error wait_for(const caf::actor& whom);

  /// --control: the term of the leader joined last (0 without --control).
  [[nodiscard]] int64_t term() const { return term_; }

  /// The `bulk` metrics event: what this process moved over its bulk connections.
  void emit_bulk(const std::string& process);

  [[noreturn]] void end(int code) { end_process(code); }

private:
  struct wait_result {
    bool watched_down = false;  ///< `watched` went down first; `whom` still runs
    caf::error reason;          ///< otherwise: `whom`'s exit reason
  };
  wait_result wait_for(const caf::actor& whom, const caf::actor& watched);
  caf::expected<coordinator_actor> dial_coordinator(const std::string& address, const caf::actor_addr& lost);
  /// --control: whether etcd names a leader other than the one joined (a lower
  /// term too: etcd's word is what a term means, even after a restore).
  bool leader_changed();
  /// Waits before try `failures` + 1 to join a lost coordinator (policy/backoff.hpp); logs `why` now and then.
  void sleep_before_retry(int failures, const caf::error& why);
  /// While joining keeps failing, one log line per this much time.
  static constexpr std::chrono::seconds retry_log_every{5};
  /// --control: the leader's address now (its term in found_term_); an error while none leads.
  caf::expected<std::string> leader_address();

  std::unique_ptr<basp_guard> guard(const caf::expected<uint16_t>& local, int port, bool tls);
  /// Warns that plain port `port` on `host` (not a loopback address) is open to whoever reaches it.
  void warn_if_open(const char* what, const std::string& host, uint16_t port) const;

  const app_config& cfg_;
  const char* who_;
  std::shared_ptr<metrics_sink> metrics_;
  caf::actor_system_config sys_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::shared_ptr<bulk_endpoint> bulk_;
  std::unique_ptr<etcd_client> etcd_;                        ///< --control only
  std::shared_ptr<const std::atomic<int64_t>> newest_term_;  ///< --control: the term of etcd's leader now (its watch)
  int64_t term_ = 0;                                         ///< --control: the joined leader's term
  int64_t found_term_ = 0;  ///< --control: the term of the leader leader_address found last
  std::chrono::steady_clock::time_point lower_checked_;  ///< leader_changed() last asked etcd
  std::chrono::steady_clock::time_point retry_logged_;   ///< sleep_before_retry() last logged
  std::mt19937_64 rng_{std::random_device{}()};          ///< the backoff's jitter
};

}  // namespace swarm
