#include "observe/status_board.hpp"

#include "base/json_line.hpp"
#include "base/metrics_reader.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace swarm {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, std::isfinite(x) ? x : 0.0);
  return buf;
}

}  // namespace

std::string status_board::hash_prefix(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return std::string{buf, 8};
}

status_board::status_board(double started) : started_(started) {}

status_board::stage& status_board::stage_at(int64_t s) { return stages_[s]; }

int64_t status_board::live_servers(int64_t stage) const {
  return std::count_if(servers_.begin(), servers_.end(),
                       [&](const auto& kv) { return kv.second.stage == stage && !gone(kv.second.state); });
}

int64_t status_board::stalled_by(int64_t stage) const {
  const int64_t gained = watch_.gained_on(static_cast<int>(stage)).first;
  return gained > stage_lag_allowed ? gained : 0;
}

void status_board::note(double t, std::string name, std::string text) {
  events_.push_back({t, std::move(name), std::move(text)});
  while (events_.size() > max_events)
    events_.pop_front();
}

void status_board::on_server_progress(const metrics_event& e) {
  auto it = servers_.find(e.get_string("server"));
  if (it == servers_.end())
    return;
  auto& s = it->second;
  s.step = e.get_int("step");
  s.hash = static_cast<uint64_t>(e.get_int("hash"));
  s.committed = e.get_int("committed_samples");
  if (s.state == "reloading" && s.step >= stage_at(s.stage).step)
    s.state = "serving";
  // Samples per second over the last few seconds of reports.
  const double t = e.t();
  if (s.rate_committed < 0 || s.committed < s.rate_committed) {
    s.rate_committed = s.committed, s.rate_t = t;
  } else if (t - s.rate_t >= 5) {
    s.samples_per_s = static_cast<double>(s.committed - s.rate_committed) / (t - s.rate_t);
    s.rate_committed = s.committed, s.rate_t = t;
  }
  s.last_report = t;
}

void status_board::on_trainer_report(const metrics_event& e) {
  const double t = e.t();
  if (trainers_.size() >= max_trainers && trainers_.count(e.get_string("trainer")) == 0) {
    // Full (trainers came and went, or someone made ids up): the longest silent one goes.
    auto oldest = std::min_element(trainers_.begin(), trainers_.end(), [](const auto& a, const auto& b) {
      return a.second.last_report < b.second.last_report;
    });
    trainers_.erase(oldest);
  }
  auto& tr = trainers_[e.get_string("trainer")];
  tr.id = e.get_string("trainer");
  const int64_t reroutes_before = tr.reroutes;
  tr.step = e.get_int("step");
  tr.max_steps = e.get_int("max_steps");
  tr.loss = e.get_double("loss");
  tr.tokens_per_s = e.get_double("tokens_per_s");
  tr.samples = e.get_int("samples");
  tr.tokens = e.get_int("tokens");
  tr.dropped = e.get_int("dropped");
  tr.retries = e.get_int("retries");
  tr.reroutes = e.get_int("reroutes");
  tr.bans = e.get_int("bans");
  tr.busy = e.get_int("busy");
  tr.verify_requests = e.get_int("verify_requests");
  tr.verify_samples = e.get_int("verify_samples");
  tr.forward_samples = e.get_int("forward_samples");
  tr.verify_disagreed = e.get_int("verify_disagreed");
  tr.verify_strikes = e.get_int("verify_strikes");
  tr.verify_bans = e.get_int("verify_bans");
  tr.wire_bytes = e.get_int("wire_bytes");
  tr.elapsed_s = e.get_double("elapsed_s");
  tr.last_report = t;
  if (e.get_int("has_eval") != 0) {
    tr.has_eval = true;
    tr.eval_step = e.get_int("eval_step");
    tr.eval_loss = e.get_double("eval_loss");
    if (tr.eval_history.empty() || tr.eval_history.back()[0] != static_cast<double>(tr.eval_step))
      tr.eval_history.push_back({static_cast<double>(tr.eval_step), tr.eval_loss});  // one per --eval-every steps
  }
  // Reports before the first step carry no loss: not a point of the curves.
  if (tr.step > 0 && (tr.history.empty() || tr.history.back()[1] != static_cast<double>(tr.step))) {
    if (tr.history.size() >= max_history) {  // keep the whole run, coarser
      std::vector<std::array<double, 4>> half;
      for (size_t i = 0; i < tr.history.size(); i += 2)
        half.push_back(tr.history[i]);
      tr.history = std::move(half);
    }
    tr.history.push_back({t, static_cast<double>(tr.step), tr.loss, tr.tokens_per_s});
  }
  if (tr.reroutes > reroutes_before && reroutes_before > 0)
    note(t, "reroute", "trainer " + tr.id + ": " + std::to_string(tr.reroutes - reroutes_before) + " reroutes");
}

void status_board::on_server_join(const metrics_event& e) {
  const auto id = e.get_string("server");
  auto& s = servers_[id];
  const bool moved = !s.id.empty() && !gone(s.state) && s.stage != e.get_int("stage");
  s.id = id;
  s.stage = e.get_int("stage");
  s.host = e.get_string("host");
  s.port = e.get_int("port");
  s.state = "serving";
  s.last_report = e.t();
  s.rate_committed = -1;
  ++joins_;
  moves_ += moved;
  note(e.t(), moved ? "move" : "server_join",
       "stage " + std::to_string(s.stage) + ": " + id + (moved ? " moved here" : " joined"));
}

void status_board::on_server_gone(const metrics_event& e) {
  const bool down = e.name() == "server_down";
  const auto id = e.get_string("server");
  if (auto it = servers_.find(id); it != servers_.end())
    it->second.state = down ? "down" : "stopped";
  downs_ += down;
  const auto where = "stage " + std::to_string(e.get_int("stage")) + ": " + id;
  note(e.t(), e.name(), down ? where + " down (" + e.get_string("reason") + ")" : where + " stopped");
}

void status_board::on_round_end(const metrics_event& e) {
  auto& st = stage_at(e.get_int("stage"));
  const double secs = e.get_double("seconds");
  if (e.get_int("applied") > 0) {
    ++st.applied;
    st.step = std::max(st.step, e.get_int("step"));
    watch_.observe(static_cast<int>(e.get_int("stage")), st.step);
  } else {
    ++st.failed;
    note(e.t(), "round_failed",
         "stage " + std::to_string(e.get_int("stage")) + ": a round failed after " + fmt("%.1f", secs) + " s");
  }
  st.round_seconds_sum += secs;
  st.last_round_seconds = secs;
}

void status_board::on_control(const metrics_event& e) {
  control_.on = true;
  if (e.name() == "control") {  // told, not written: the election and etcd as of now
    control_.role = e.get_string("role");
    control_.leader = e.get_string("leader");
    control_.term = e.get_int("term");
    control_.candidates = e.get_string("candidates");
    control_.members = e.get_string("members");
    control_.healthy = e.get_int("healthy");
    return;
  }
  ++leadership_changes_;
  const bool won = e.get_string("change") == "won";
  if (won) {
    control_.role = "leader";
    control_.term = e.get_int("term");
    control_.leader = e.get_string("address");
  }
  const auto term = std::to_string(e.get_int("term"));
  note(e.t(), "leadership",
       won ? "leads as term " + term + " at " + e.get_string("address") : "lost its etcd lease (term " + term + ")");
}

void status_board::on_event(double t, const char* event, std::initializer_list<metrics_sink::field> fields) {
  const metrics_event e(t, event, fields);  // built before the lock: the lock stays short
  const auto& name = e.name();
  std::lock_guard<std::mutex> lock(m_);
  if (name == "server_progress") {
    on_server_progress(e);
  } else if (name == "trainer_report") {
    on_trainer_report(e);
  } else if (name == "server_join") {
    on_server_join(e);
  } else if (name == "server_down" || name == "server_stop") {
    on_server_gone(e);
  } else if (name == "round_end") {
    on_round_end(e);
  } else if (name == "reload") {
    const auto id = e.get_string("server");
    if (auto it = servers_.find(id); it != servers_.end())
      it->second.state = "reloading";
    ++reloads_;
    note(t, "reload",
         "stage " + std::to_string(e.get_int("stage")) + ": " + id + " reloads from " + e.get_string("from") + " (" +
             e.get_string("reason") + ")");
  } else if (name == "stage_lost") {
    note(t, "stage_lost",
         "stage " + std::to_string(e.get_int("stage")) + ": state lost at step " + std::to_string(e.get_int("step")) +
             " (its next server loads a checkpoint)");
  } else if (name == "stage_load") {
    stage_at(e.get_int("stage")).servers = e.get_int("servers");
  } else if (name == "leadership" || name == "control") {
    on_control(e);
  } else if (name == "server_banned") {
    on_server_banned(e);
  }
}

void status_board::on_server_banned(const metrics_event& e) {
  const auto id = e.get_string("server");
  if (auto it = servers_.find(id); it != servers_.end())
    it->second.state = "banned";
  auto& b = banned_[id];
  b.stage = e.get_int("stage");
  b.t = e.t();
  b.until = e.t() + e.get_double("cooldown_s");
  b.why = e.get_string("why");
  note(e.t(), "server_banned",
       "stage " + std::to_string(b.stage) + ": " + id + " banned" +
           (e.get_int("last_of_stage") != 0 ? " (the stage's LAST server)" : "") + ": " + b.why);
  // Bans whose cool-down ended long ago make room (a stranger's reports cannot grow the board).
  while (banned_.size() > max_trainers) {
    auto oldest = std::min_element(banned_.begin(), banned_.end(),
                                   [](const auto& a, const auto& b) { return a.second.until < b.second.until; });
    banned_.erase(oldest);
  }
}

std::string status_board::summary_line() {
  std::lock_guard<std::mutex> lock(m_);
  std::string o;
  int64_t rounds = 0, failed = 0;
  for (const auto& [index, st] : stages_) {
    o += (o.empty() ? "stage " : " | stage ") + std::to_string(index) + ": " + std::to_string(live_servers(index)) +
         " servers, step " + std::to_string(st.step);
    rounds += st.applied + st.failed;
    failed += st.failed;
  }
  const std::array<int64_t, 5> now_counts{joins_, downs_, reloads_, moves_, rounds};
  const auto since = [&](size_t i) { return std::to_string(now_counts[i] - summarized_[i]); };
  o += "; since the last line: " + since(4) + " rounds, " + since(0) + " joins, " + since(1) + " downs, " + since(2) +
       " reloads, " + since(3) + " moves" +
       (failed > 0 ? " (" + std::to_string(failed) + " rounds failed in all)" : "");
  summarized_ = now_counts;
  return o;
}

std::string status_board::text(double now) const {
  std::lock_guard<std::mutex> lock(m_);
  std::string o = "swarm: up " + fmt("%.0f", now - started_) + " s, " + std::to_string(stages_.size()) + " stages, " +
                  std::to_string(trainers_.size()) + " trainers\n\n";
  if (control_.on)
    o += "control: this process is the " + control_.role + "; leader " +
         (control_.leader.empty() ? std::string{"none now"} : control_.leader) + " (term " +
         std::to_string(control_.term) + "); candidates " + control_.candidates + "; etcd " + control_.members + "\n\n";
  for (const auto& [index, st] : stages_) {
    const int64_t rounds = st.applied + st.failed;
    const int64_t stalled = stalled_by(index);
    o += "stage " + std::to_string(index) + "  step " + std::to_string(st.step) +
         (stalled > 0 ? "  (NOT LEARNING: another stage took " + std::to_string(stalled) + " steps since its last)"
                      : "") +
         "  rounds " + std::to_string(st.applied) + " applied, " + std::to_string(st.failed) + " failed, mean " +
         fmt("%.2f", rounds > 0 ? st.round_seconds_sum / static_cast<double>(rounds) : 0.0) + " s\n";
    for (const auto& [id, s] : servers_)
      if (s.stage == index) {
        char line[200];
        std::snprintf(line, sizeof line, "  %-14s %-21s %-9s step %-6" PRId64 " %7.1f samples/s  %s  %4.0f s ago\n",
                      id.c_str(), (s.host + ":" + std::to_string(s.port)).c_str(), s.state.c_str(), s.step,
                      s.samples_per_s, hash_prefix(s.hash).c_str(), now - s.last_report);
        o += line;
      }
  }
  o += "\n";
  for (const auto& [id, tr] : trainers_) {
    char line[240];
    const std::string steps =
        tr.max_steps > 0 ? std::to_string(tr.step) + "/" + std::to_string(tr.max_steps) : std::to_string(tr.step);
    std::snprintf(line, sizeof line,
                  "trainer %-10s step %-11s loss %.3f  %8.0f tokens/s  dropped %" PRId64 "  reroutes %" PRId64
                  "  bans %" PRId64,
                  id.c_str(), steps.c_str(), tr.loss, tr.tokens_per_s, tr.dropped, tr.reroutes, tr.bans);
    o += line;
    if (tr.has_eval) {
      std::snprintf(line, sizeof line, "  validation %.3f at step %" PRId64, tr.eval_loss, tr.eval_step);
      o += line;
    }
    if (tr.verify_requests > 0) {
      std::snprintf(line, sizeof line,
                    "  verified %" PRId64 " (%.1f%% extra forward samples), %" PRId64 " disagreed, %" PRId64
                    " strikes, %" PRId64 " banned",
                    tr.verify_requests,
                    100.0 * static_cast<double>(tr.verify_samples) /
                        static_cast<double>(std::max<int64_t>(tr.forward_samples, 1)),
                    tr.verify_disagreed, tr.verify_strikes, tr.verify_bans);
      o += line;
    }
    o += "\n";
  }
  for (const auto& [id, b] : banned_)
    if (b.until > now)
      o += "banned: " + id + " (stage " + std::to_string(b.stage) + ", " + fmt("%.0f", b.until - now) +
           " s left): " + b.why + "\n";
  o += "\nlatest events:\n";
  const size_t from = events_.size() > 10 ? events_.size() - 10 : 0;
  for (size_t i = from; i < events_.size(); ++i)
    o += "  " + fmt("%5.0f", now - events_[i].t) + " s ago  " + events_[i].text + "\n";
  return o;
}

}  // namespace swarm
