// /metrics: the board as Prometheus families (observe/exposition.hpp). The
// names, labels, help texts and types are the ones dashboards and alerts
// were written against: change one only with docs/operations.md.
#include <string>

#include "observe/exposition.hpp"
#include "observe/status_board.hpp"

#include <algorithm>

namespace swarm {

void status_board::trainer_metrics(exposition& x) const {
  struct trainer_metric {
    const char* name;
    bool counter;
    const char* help;
    double (*get)(const trainer&);
  };
  static const trainer_metric metrics[] = {
      {"swarm_trainer_steps_total", true, "Steps a trainer made.",
       [](const trainer& t) { return static_cast<double>(t.step); }},
      {"swarm_trainer_samples_total", true, "Samples a trainer completed.",
       [](const trainer& t) { return static_cast<double>(t.samples); }},
      {"swarm_trainer_tokens_total", true, "Tokens a trainer completed.",
       [](const trainer& t) { return static_cast<double>(t.tokens); }},
      {"swarm_trainer_loss", false, "Mean loss of a trainer's last step.", [](const trainer& t) { return t.loss; }},
      {"swarm_trainer_tokens_per_second", false, "Tokens per second of a trainer's last step.",
       [](const trainer& t) { return t.tokens_per_s; }},
      {"swarm_trainer_dropped_total", true, "Microbatches a trainer dropped.",
       [](const trainer& t) { return static_cast<double>(t.dropped); }},
      {"swarm_trainer_reroutes_total", true, "Stage requests a trainer sent again to another server.",
       [](const trainer& t) { return static_cast<double>(t.reroutes); }},
      {"swarm_trainer_bans_total", true, "Servers a trainer banned for a while after a failure.",
       [](const trainer& t) { return static_cast<double>(t.bans); }},
      {"swarm_trainer_busy_answers_total", true,
       "Busy answers a trainer got when it asked a server for room (it then chose another).",
       [](const trainer& t) { return static_cast<double>(t.busy); }},
      {"swarm_trainer_verify_requests_total", true,
       "Forwards a trainer sent again to a second or third server to compare (verified work).",
       [](const trainer& t) { return static_cast<double>(t.verify_requests); }},
      {"swarm_trainer_verify_samples_total", true, "Samples of those forwards: verification's extra compute.",
       [](const trainer& t) { return static_cast<double>(t.verify_samples); }},
      {"swarm_trainer_forward_samples_total", true, "Samples of every forward a trainer sent (first attempts).",
       [](const trainer& t) { return static_cast<double>(t.forward_samples); }},
      {"swarm_trainer_verify_strikes_total", true, "Charges a trainer's verification made against servers.",
       [](const trainer& t) { return static_cast<double>(t.verify_strikes); }},
      {"swarm_trainer_verify_bans_total", true, "Servers a trainer's verification banned.",
       [](const trainer& t) { return static_cast<double>(t.verify_bans); }},
      {"swarm_trainer_wire_bytes_total", true, "Request and reply payload bytes a trainer moved.",
       [](const trainer& t) { return static_cast<double>(t.wire_bytes); }},
  };
  for (const auto& m : metrics) {
    if (m.counter)
      x.counter(m.name, m.help);
    else
      x.gauge(m.name, m.help);
    for (const auto& [id, tr] : trainers_)
      x.add({{"trainer", id}}, m.get(tr));
  }
}

std::string status_board::prometheus(double now) const {
  std::lock_guard<std::mutex> lock(m_);
  exposition x;
  x.gauge("swarm_uptime_seconds", "Seconds since the coordinator started.");
  x.add({}, now - started_);
  const auto at = [](int64_t stage) { return prometheus::Labels{{"stage", std::to_string(stage)}}; };
  x.gauge("swarm_stage_servers", "Live servers of a stage.");
  for (const auto& [index, st] : stages_)
    x.add(at(index), static_cast<double>(live_servers(index)));
  x.gauge("swarm_stage_step", "Optimizer step the servers of a stage agreed on.");
  for (const auto& [index, st] : stages_)
    x.add(at(index), static_cast<double>(st.step));
  x.gauge("swarm_stage_stalled_steps",
          "Steps another stage took since this one last stepped, when more than 5 (it is not learning); else 0.");
  for (const auto& [index, st] : stages_)
    x.add(at(index), static_cast<double>(stalled_by(index)));
  x.counter("swarm_rounds_total", "Averaging rounds ended, by outcome.");
  for (const auto& [index, st] : stages_) {
    x.add({{"stage", std::to_string(index)}, {"outcome", "applied"}}, static_cast<double>(st.applied));
    x.add({{"stage", std::to_string(index)}, {"outcome", "failed"}}, static_cast<double>(st.failed));
  }
  x.summary("swarm_round_seconds", "Duration of averaging rounds.");
  for (const auto& [index, st] : stages_)
    x.add_summary(at(index), static_cast<uint64_t>(st.applied + st.failed), st.round_seconds_sum);
  x.gauge("swarm_server_samples_per_second", "Samples a server added to its gradient per second, lately.");
  for (const auto& [id, s] : servers_)
    if (!gone(s.state))
      x.add({{"stage", std::to_string(s.stage)}, {"server", id}}, s.samples_per_s);
  x.counter("swarm_server_events_total", "Server joins, downs, reloads and moves seen by the coordinator.");
  const std::pair<const char*, int64_t> server_events[] = {
      {"join", joins_}, {"down", downs_}, {"reload", reloads_}, {"move", moves_}};
  for (const auto& [kind, n] : server_events)
    x.add({{"kind", kind}}, static_cast<double>(n));
  x.gauge("swarm_banned_servers", "Servers of a stage banned on a trainer's verification evidence, cool-down running.");
  for (const auto& [index, st] : stages_)
    x.add(at(index), static_cast<double>(std::count_if(banned_.begin(), banned_.end(), [&, i = index](const auto& b) {
            return b.second.stage == i && b.second.until > now;
          })));
  trainer_metrics(x);
  if (control_.on) {
    x.gauge("swarm_control_term", "The election term this process last saw leading (--control).");
    x.add({}, static_cast<double>(control_.term));
    x.gauge("swarm_control_leading", "1 while this coordinator process leads, 0 while it stands by.");
    x.add({}, control_.role == "leader" ? 1.0 : 0.0);
    x.counter("swarm_control_leadership_changes_total", "Leadership won or lost by this process.");
    x.add({}, static_cast<double>(leadership_changes_));
    x.gauge("swarm_control_members_healthy", "etcd members answering this process's status call.");
    x.add({}, static_cast<double>(control_.healthy));
  }
  x.gauge("swarm_eval_loss", "Validation loss of a trainer's latest measurement (--eval-every).");
  for (const auto& [id, tr] : trainers_)
    if (tr.has_eval)
      x.add({{"trainer", id}}, tr.eval_loss);
  return x.text();
}

}  // namespace swarm
