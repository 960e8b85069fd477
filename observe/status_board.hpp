#pragma once
// What the coordinator knows of the swarm, for people: the status page, its
// /api/status JSON, Prometheus' /metrics and `swarm --role status`.
//
// It is fed the coordinator's own event stream (metrics_sink::observe): the
// events it writes to the metrics file (server_join, server_down, round_end,
// reload, stage_lost, stage_load, rebalance, leadership, server_banned) and three it only
// tells the board (server_progress from the averager, trainer_report from
// trainers, control from an elected candidate's watch of etcd). So the
// page shows what the metrics file says, and nothing on the data path waits
// for it: an event costs one short lock. Readers (HTTP threads, the
// coordinator actor) take the same lock to render.
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>  // declarations only: actors/coordinator.hpp includes this header, so keep it light

#include "policy/stage_lag.hpp"
#include "base/metrics.hpp"

namespace swarm {

class exposition;
class metrics_event;

class status_board {
public:
  /// `started`: unix seconds the coordinator started (for uptime).
  explicit status_board(double started);

  /// One event of the coordinator's stream; unknown events are ignored.
  void on_event(double t, const char* event, std::initializer_list<metrics_sink::field> fields);

  /// /api/status (schema in docs/operations.md, "Live status"), as of unix
  /// time `now` (observe/status_json.cpp).
  [[nodiscard]] std::string json(double now) const;
  /// Prometheus text exposition 0.0.4: counters, gauges and a summary with
  /// HELP and TYPE (observe/status_metrics.cpp, through prometheus-cpp).
  [[nodiscard]] std::string prometheus(double now) const;
  /// One terminal screen (swarm --role status).
  [[nodiscard]] std::string text(double now) const;
  /// One log line: each stage's servers, step and rounds, and what happened
  /// since the previous call (the coordinator logs it every 30 s instead of a
  /// line per round, join and reroute).
  [[nodiscard]] std::string summary_line();

  static constexpr size_t max_events = 50;
  static constexpr size_t max_trainers = 256;  ///< then the longest silent one makes room
  static constexpr size_t max_history = 1000;  ///< points per trainer; halved (every other dropped) when full

private:
  struct server {
    std::string id, host, state = "serving";
    int64_t port = 0, stage = 0, step = 0, committed = 0;
    uint64_t hash = 0;
    double samples_per_s = 0, last_report = 0, rate_t = 0;
    int64_t rate_committed = -1;  ///< committed samples at rate_t, for samples_per_s
  };
  struct stage {
    int64_t step = 0, applied = 0, failed = 0, servers = 0;
    double round_seconds_sum = 0, last_round_seconds = 0;
  };
  struct trainer {
    std::string id;
    int64_t step = 0, max_steps = 0, samples = 0, tokens = 0, dropped = 0, retries = 0, reroutes = 0, bans = 0,
            busy = 0, wire_bytes = 0;
    /// Verified work (issue #47): forwards re-sent, their samples, all forwards' samples, disagreements, strikes, bans.
    int64_t verify_requests = 0, verify_samples = 0, forward_samples = 0, verify_disagreed = 0, verify_strikes = 0,
            verify_bans = 0;
    double loss = 0, tokens_per_s = 0, elapsed_s = 0, last_report = 0;
    std::vector<std::array<double, 4>> history;  ///< t, step, loss, tokens_per_s
    bool has_eval = false;                       ///< a validation loss was measured
    int64_t eval_step = 0;
    double eval_loss = 0;
    std::vector<std::array<double, 2>> eval_history;  ///< step, validation loss
  };
  struct event {
    double t;
    std::string name, text;
  };
  /// A server banned on a trainer's verification evidence (server_banned).
  struct banned_server {
    int64_t stage = 0;
    double t = 0, until = 0;
    std::string why;
  };
  /// --control: the election and etcd, as this coordinator process last saw them.
  struct control_view {
    bool on = false;
    std::string role;        ///< "leader" or "standby"
    std::string leader;      ///< the leader's "host:port"; empty: none now
    std::string candidates;  ///< comma-separated, in campaign order
    std::string members;     ///< comma-separated "host:port=ok|down"
    int64_t term = 0, healthy = 0;
  };

  /// Down (a failure), stopped on purpose or banned: no longer serving, shown until it joins again.
  [[nodiscard]] static bool gone(const std::string& state) {
    return state == "down" || state == "stopped" || state == "banned";
  }
  /// A model hash as the page shows it: its first 8 hex digits.
  [[nodiscard]] static std::string hash_prefix(uint64_t h);

  stage& stage_at(int64_t s);
  [[nodiscard]] int64_t live_servers(int64_t stage) const;
  /// Steps another stage took since `stage` last stepped, when more than a
  /// healthy stage allows (policy/stage_lag.hpp); else 0.
  [[nodiscard]] int64_t stalled_by(int64_t stage) const;
  void note(double t, std::string name, std::string text);
  // on_event's cases (m_ held):
  void on_server_progress(const metrics_event& e);
  void on_trainer_report(const metrics_event& e);
  void on_server_join(const metrics_event& e);
  void on_server_gone(const metrics_event& e);  ///< server_down, server_stop
  void on_round_end(const metrics_event& e);
  void on_server_banned(const metrics_event& e);
  void on_control(const metrics_event& e);  ///< leadership, control
  // json()'s parts (m_ held):
  [[nodiscard]] nlohmann::ordered_json stages_json(double now) const;
  [[nodiscard]] nlohmann::ordered_json trainers_json(double now) const;
  [[nodiscard]] nlohmann::ordered_json control_json() const;
  [[nodiscard]] nlohmann::ordered_json banned_json(double now) const;
  // prometheus()'s trainer families (m_ held).
  void trainer_metrics(exposition& x) const;

  double started_;
  mutable std::mutex m_;
  std::map<std::string, server> servers_;  ///< by id; gone ones stay (state "down" or "stopped") until they join again
  std::map<int64_t, stage> stages_;
  stage_watch watch_{0};  ///< the stages' steps as their rounds end
  std::map<std::string, trainer> trainers_;
  std::deque<event> events_;
  std::map<std::string, banned_server> banned_;  ///< by server id, while its cool-down lasts (and a while after)
  control_view control_;
  int64_t leadership_changes_ = 0;
  int64_t joins_ = 0, downs_ = 0, reloads_ = 0, moves_ = 0;
  std::array<int64_t, 5> summarized_{};  ///< joins, downs, reloads, moves, rounds at the last summary_line
};

}  // namespace swarm
