#include "observe/status_board.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <variant>

namespace swarm {

namespace {

/// Down (a failure) or stopped on purpose: no longer serving, shown until it joins again.
bool gone(const std::string& state) { return state == "down" || state == "stopped"; }

using fields_t = std::initializer_list<metrics_sink::field>;

const metrics_sink::value* find(fields_t fields, const char* key) {
  for (const auto& [k, v] : fields)
    if (std::string_view{k} == key)
      return &v;
  return nullptr;
}

int64_t get_int(fields_t fields, const char* key, int64_t fallback = 0) {
  const auto* v = find(fields, key);
  if (!v)
    return fallback;
  if (const auto* i = std::get_if<int64_t>(v))
    return *i;
  if (const auto* d = std::get_if<double>(v))
    return std::isfinite(*d) ? static_cast<int64_t>(*d) : fallback;
  if (const auto* b = std::get_if<bool>(v))
    return *b ? 1 : 0;
  return fallback;
}

double get_double(fields_t fields, const char* key) {
  const auto* v = find(fields, key);
  if (!v)
    return 0;
  if (const auto* d = std::get_if<double>(v))
    return std::isfinite(*d) ? *d : 0;
  if (const auto* i = std::get_if<int64_t>(v))
    return static_cast<double>(*i);
  return 0;
}

std::string get_string(fields_t fields, const char* key) {
  const auto* v = find(fields, key);
  if (!v)
    return {};
  if (const auto* s = std::get_if<std::string>(v))
    return *s;
  if (const auto* i = std::get_if<int64_t>(v))
    return std::to_string(*i);
  return {};
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, std::isfinite(x) ? x : 0.0);
  return buf;
}

std::string hash_prefix(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return std::string{buf, 8};
}

/// A Prometheus label value: backslash, quote and newline escaped.
std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

} // namespace

status_board::status_board(double started) : started_(started) {}

status_board::stage& status_board::stage_at(int64_t s) { return stages_[s]; }

int64_t status_board::live_servers(int64_t stage) const {
  return std::count_if(servers_.begin(), servers_.end(),
                       [&](const auto& kv) { return kv.second.stage == stage && !gone(kv.second.state); });
}

void status_board::note(double t, std::string name, std::string text) {
  events_.push_back({t, std::move(name), std::move(text)});
  while (events_.size() > max_events)
    events_.pop_front();
}

void status_board::on_server_progress(double t, fields_t f) {
  auto it = servers_.find(get_string(f, "server"));
  if (it == servers_.end())
    return;
  auto& s = it->second;
  s.step = get_int(f, "step");
  s.hash = static_cast<uint64_t>(get_int(f, "hash"));
  s.committed = get_int(f, "committed_samples");
  if (s.state == "reloading" && s.step >= stage_at(s.stage).step)
    s.state = "serving";
  // Samples per second over the last few seconds of reports.
  if (s.rate_committed < 0 || s.committed < s.rate_committed) {
    s.rate_committed = s.committed, s.rate_t = t;
  } else if (t - s.rate_t >= 5) {
    s.samples_per_s = static_cast<double>(s.committed - s.rate_committed) / (t - s.rate_t);
    s.rate_committed = s.committed, s.rate_t = t;
  }
  s.last_report = t;
}

void status_board::on_trainer_report(double t, fields_t f) {
  auto& tr = trainers_[get_string(f, "trainer")];
  tr.id = get_string(f, "trainer");
  const int64_t reroutes_before = tr.reroutes;
  tr.step = get_int(f, "step");
  tr.max_steps = get_int(f, "max_steps");
  tr.loss = get_double(f, "loss");
  tr.tokens_per_s = get_double(f, "tokens_per_s");
  tr.samples = get_int(f, "samples");
  tr.tokens = get_int(f, "tokens");
  tr.dropped = get_int(f, "dropped");
  tr.retries = get_int(f, "retries");
  tr.reroutes = get_int(f, "reroutes");
  tr.bans = get_int(f, "bans");
  tr.busy = get_int(f, "busy");
  tr.wire_bytes = get_int(f, "wire_bytes");
  tr.elapsed_s = get_double(f, "elapsed_s");
  tr.last_report = t;
  if (get_int(f, "has_eval") != 0) {
    tr.has_eval = true;
    tr.eval_step = get_int(f, "eval_step");
    tr.eval_loss = get_double(f, "eval_loss");
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

void status_board::on_server_join(double t, fields_t f) {
  const auto id = get_string(f, "server");
  auto& s = servers_[id];
  const bool moved = !s.id.empty() && !gone(s.state) && s.stage != get_int(f, "stage");
  s.id = id;
  s.stage = get_int(f, "stage");
  s.host = get_string(f, "host");
  s.port = get_int(f, "port");
  s.state = "serving";
  s.last_report = t;
  s.rate_committed = -1;
  ++joins_;
  moves_ += moved;
  note(t, moved ? "move" : "server_join",
       "stage " + std::to_string(s.stage) + ": " + id + (moved ? " moved here" : " joined"));
}

void status_board::on_event(double t, const char* event, fields_t f) {
  const std::string_view e{event};
  std::lock_guard<std::mutex> lock(m_);
  if (e == "server_progress") {
    on_server_progress(t, f);
  } else if (e == "trainer_report") {
    on_trainer_report(t, f);
  } else if (e == "server_join") {
    on_server_join(t, f);
  } else if (e == "server_down") {
    const auto id = get_string(f, "server");
    if (auto it = servers_.find(id); it != servers_.end())
      it->second.state = "down";
    ++downs_;
    note(t, "server_down",
         "stage " + std::to_string(get_int(f, "stage")) + ": " + id + " down (" + get_string(f, "reason") + ")");
  } else if (e == "server_stop") {
    const auto id = get_string(f, "server");
    if (auto it = servers_.find(id); it != servers_.end())
      it->second.state = "stopped";
    note(t, "server_stop", "stage " + std::to_string(get_int(f, "stage")) + ": " + id + " stopped");
  } else if (e == "round_end") {
    auto& st = stage_at(get_int(f, "stage"));
    const double secs = get_double(f, "seconds");
    if (get_int(f, "applied") > 0) {
      ++st.applied;
      st.step = std::max(st.step, get_int(f, "step"));
      watch_.observe(static_cast<int>(get_int(f, "stage")), st.step);
    } else {
      ++st.failed;
      note(t, "round_failed",
           "stage " + std::to_string(get_int(f, "stage")) + ": a round failed after " + fmt("%.1f", secs) + " s");
    }
    st.round_seconds_sum += secs;
    st.last_round_seconds = secs;
  } else if (e == "reload") {
    const auto id = get_string(f, "server");
    if (auto it = servers_.find(id); it != servers_.end())
      it->second.state = "reloading";
    ++reloads_;
    note(t, "reload", "stage " + std::to_string(get_int(f, "stage")) + ": " + id + " reloads from " +
                          get_string(f, "from") + " (" + get_string(f, "reason") + ")");
  } else if (e == "stage_lost") {
    note(t, "stage_lost", "stage " + std::to_string(get_int(f, "stage")) + ": state lost at step " +
                              std::to_string(get_int(f, "step")) + " (its next server loads a checkpoint)");
  } else if (e == "stage_load") {
    stage_at(get_int(f, "stage")).servers = get_int(f, "servers");
  } else if (e == "leadership") {
    ++leadership_changes_;
    control_.on = true;
    const bool won = get_string(f, "change") == "won";
    if (won) {
      control_.role = "leader";
      control_.term = get_int(f, "term");
      control_.leader = get_string(f, "address");
    }
    note(t, "leadership", won ? "leads as term " + std::to_string(get_int(f, "term")) + " at " + get_string(f, "address")
                              : "lost its etcd lease (term " + std::to_string(get_int(f, "term")) + ")");
  } else if (e == "control") {
    control_.on = true;
    control_.role = get_string(f, "role");
    control_.leader = get_string(f, "leader");
    control_.term = get_int(f, "term");
    control_.candidates = get_string(f, "candidates");
    control_.members = get_string(f, "members");
    control_.healthy = get_int(f, "healthy");
  }
}

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = std::min(s.find(',', at), s.size());
    if (end > at)
      out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

} // namespace

int64_t status_board::stalled_by(int64_t stage) const {
  const int64_t gained = watch_.gained_on(static_cast<int>(stage)).first;
  return gained > stage_lag_allowed ? gained : 0;
}

std::string status_board::json(double now) const {
  std::lock_guard<std::mutex> lock(m_);
  std::string o = "{\"time\": " + fmt("%.3f", now) + ", \"uptime_s\": " + fmt("%.1f", now - started_);
  o += ", \"stages\": [";
  bool first_stage = true;
  for (const auto& [index, st] : stages_) {
    o += std::string{first_stage ? "" : ", "} + "{\"stage\": " + std::to_string(index) +
         ", \"step\": " + std::to_string(st.step) + ", \"stalled_by\": " + std::to_string(stalled_by(index)) +
         ", \"servers\": [";
    first_stage = false;
    bool first = true;
    for (const auto& [id, s] : servers_) {
      if (s.stage != index)
        continue;
      o += first ? "{\"id\": " : ", {\"id\": ";
      first = false;
      append_json_string(o, id);
      o += ", \"host\": ";
      append_json_string(o, s.host);
      o += ", \"port\": " + std::to_string(s.port) + ", \"state\": ";
      append_json_string(o, s.state);
      o += ", \"step\": " + std::to_string(s.step) + ", \"samples_per_s\": " + fmt("%.2f", s.samples_per_s) +
           ", \"hash\": \"" + hash_prefix(s.hash) + "\", \"last_report_s\": " + fmt("%.1f", now - s.last_report) +
           "}";
    }
    const int64_t rounds = st.applied + st.failed;
    o += "], \"rounds\": {\"applied\": " + std::to_string(st.applied) + ", \"failed\": " + std::to_string(st.failed) +
         ", \"last_seconds\": " + fmt("%.3f", st.last_round_seconds) + ", \"mean_seconds\": " +
         fmt("%.3f", rounds > 0 ? st.round_seconds_sum / static_cast<double>(rounds) : 0.0) + "}}";
  }
  o += "], \"trainers\": [";
  bool first = true;
  for (const auto& [id, tr] : trainers_) {
    o += first ? "{\"id\": " : ", {\"id\": ";
    first = false;
    append_json_string(o, id);
    o += ", \"step\": " + std::to_string(tr.step) + ", \"max_steps\": " + std::to_string(tr.max_steps) +
         ", \"loss\": " + fmt("%.5f", tr.loss) + ", \"tokens_per_s\": " + fmt("%.1f", tr.tokens_per_s) +
         ", \"samples\": " + std::to_string(tr.samples) + ", \"dropped\": " + std::to_string(tr.dropped) +
         ", \"retries\": " + std::to_string(tr.retries) + ", \"reroutes\": " + std::to_string(tr.reroutes) +
         ", \"bans\": " + std::to_string(tr.bans) + ", \"busy\": " + std::to_string(tr.busy) +
         ", \"wire_bytes\": " + std::to_string(tr.wire_bytes) +
         ", \"elapsed_s\": " + fmt("%.1f", tr.elapsed_s) + ", \"last_report_s\": " +
         fmt("%.1f", now - tr.last_report);
    if (tr.has_eval)
      o += ", \"eval_step\": " + std::to_string(tr.eval_step) + ", \"eval_loss\": " + fmt("%.5f", tr.eval_loss);
    o += ", \"eval_history\": [";
    for (size_t i = 0; i < tr.eval_history.size(); ++i)
      o += (i ? ", [" : "[") + fmt("%.0f", tr.eval_history[i][0]) + ", " + fmt("%.5f", tr.eval_history[i][1]) + "]";
    o += "]}";
  }
  o += "], \"history\": {";
  first = true;
  for (const auto& [id, tr] : trainers_) {
    o += first ? "" : ", ";
    first = false;
    append_json_string(o, id);
    o += ": [";
    for (size_t i = 0; i < tr.history.size(); ++i) {
      const auto& p = tr.history[i];
      o += (i ? ", [" : "[") + fmt("%.3f", p[0]) + ", " + fmt("%.0f", p[1]) + ", " + fmt("%.5f", p[2]) + ", " +
           fmt("%.1f", p[3]) + "]";
    }
    o += "]";
  }
  o += "}";
  if (control_.on) {
    o += ", \"control\": {\"role\": ";
    append_json_string(o, control_.role);
    o += ", \"leader\": ";
    append_json_string(o, control_.leader);
    o += ", \"term\": " + std::to_string(control_.term) + ", \"leadership_changes\": " +
         std::to_string(leadership_changes_) + ", \"candidates\": [";
    const auto cands = split_commas(control_.candidates);
    for (size_t i = 0; i < cands.size(); ++i) {
      o += i ? ", " : "";
      append_json_string(o, cands[i]);
    }
    o += "], \"members\": [";
    const auto members = split_commas(control_.members);
    for (size_t i = 0; i < members.size(); ++i) {
      const auto eq = members[i].rfind('=');
      o += i ? ", {\"endpoint\": " : "{\"endpoint\": ";
      append_json_string(o, members[i].substr(0, eq));
      o += std::string{", \"healthy\": "} + (eq != std::string::npos && members[i].substr(eq + 1) == "ok" ? "true" : "false") +
           "}";
    }
    o += "]}";
  }
  o += ", \"events\": [";
  for (size_t i = 0; i < events_.size(); ++i) {
    o += (i ? ", {\"t\": " : "{\"t\": ") + fmt("%.3f", events_[i].t) + ", \"event\": ";
    append_json_string(o, events_[i].name);
    o += ", \"text\": ";
    append_json_string(o, events_[i].text);
    o += "}";
  }
  return o + "]}\n";
}

std::string status_board::prometheus(double now) const {
  std::lock_guard<std::mutex> lock(m_);
  std::string o;
  const auto family = [&](const char* name, const char* type, const char* help) {
    o += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  const auto sample = [&](const char* name, const std::string& labels, double v) {
    o += std::string{name} + (labels.empty() ? "" : "{" + labels + "}") + " " + fmt("%.17g", v) + "\n";
  };
  family("swarm_uptime_seconds", "gauge", "Seconds since the coordinator started.");
  sample("swarm_uptime_seconds", "", now - started_);
  family("swarm_stage_servers", "gauge", "Live servers of a stage.");
  for (const auto& [index, st] : stages_)
    sample("swarm_stage_servers", "stage=\"" + std::to_string(index) + "\"", static_cast<double>(live_servers(index)));
  family("swarm_stage_step", "gauge", "Optimizer step the servers of a stage agreed on.");
  for (const auto& [index, st] : stages_)
    sample("swarm_stage_step", "stage=\"" + std::to_string(index) + "\"", static_cast<double>(st.step));
  family("swarm_stage_stalled_steps", "gauge",
         "Steps another stage took since this one last stepped, when more than 5 (it is not learning); else 0.");
  for (const auto& [index, st] : stages_)
    sample("swarm_stage_stalled_steps", "stage=\"" + std::to_string(index) + "\"",
           static_cast<double>(stalled_by(index)));
  family("swarm_rounds_total", "counter", "Averaging rounds ended, by outcome.");
  for (const auto& [index, st] : stages_) {
    const auto s = "stage=\"" + std::to_string(index) + "\"";
    sample("swarm_rounds_total", s + ",outcome=\"applied\"", static_cast<double>(st.applied));
    sample("swarm_rounds_total", s + ",outcome=\"failed\"", static_cast<double>(st.failed));
  }
  family("swarm_round_seconds", "summary", "Duration of averaging rounds.");
  for (const auto& [index, st] : stages_) {
    const auto s = "stage=\"" + std::to_string(index) + "\"";
    sample("swarm_round_seconds_sum", s, st.round_seconds_sum);
    sample("swarm_round_seconds_count", s, static_cast<double>(st.applied + st.failed));
  }
  family("swarm_server_samples_per_second", "gauge", "Samples a server added to its gradient per second, lately.");
  for (const auto& [id, s] : servers_)
    if (!gone(s.state))
      sample("swarm_server_samples_per_second",
             "stage=\"" + std::to_string(s.stage) + "\",server=\"" + label(id) + "\"", s.samples_per_s);
  family("swarm_server_events_total", "counter", "Server joins, downs, reloads and moves seen by the coordinator.");
  sample("swarm_server_events_total", "kind=\"join\"", static_cast<double>(joins_));
  sample("swarm_server_events_total", "kind=\"down\"", static_cast<double>(downs_));
  sample("swarm_server_events_total", "kind=\"reload\"", static_cast<double>(reloads_));
  sample("swarm_server_events_total", "kind=\"move\"", static_cast<double>(moves_));
  struct trainer_metric {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const trainer&);
  };
  static const trainer_metric metrics[] = {
      {"swarm_trainer_steps_total", "counter", "Steps a trainer made.",
       [](const trainer& t) { return static_cast<double>(t.step); }},
      {"swarm_trainer_samples_total", "counter", "Samples a trainer completed.",
       [](const trainer& t) { return static_cast<double>(t.samples); }},
      {"swarm_trainer_tokens_total", "counter", "Tokens a trainer completed.",
       [](const trainer& t) { return static_cast<double>(t.tokens); }},
      {"swarm_trainer_loss", "gauge", "Mean loss of a trainer's last step.", [](const trainer& t) { return t.loss; }},
      {"swarm_trainer_tokens_per_second", "gauge", "Tokens per second of a trainer's last step.",
       [](const trainer& t) { return t.tokens_per_s; }},
      {"swarm_trainer_dropped_total", "counter", "Microbatches a trainer dropped.",
       [](const trainer& t) { return static_cast<double>(t.dropped); }},
      {"swarm_trainer_reroutes_total", "counter", "Stage requests a trainer sent again to another server.",
       [](const trainer& t) { return static_cast<double>(t.reroutes); }},
      {"swarm_trainer_bans_total", "counter", "Servers a trainer banned for a while after a failure.",
       [](const trainer& t) { return static_cast<double>(t.bans); }},
      {"swarm_trainer_busy_answers_total", "counter",
       "Busy answers a trainer got when it asked a server for room (it then chose another).",
       [](const trainer& t) { return static_cast<double>(t.busy); }},
      {"swarm_trainer_wire_bytes_total", "counter", "Request and reply payload bytes a trainer moved.",
       [](const trainer& t) { return static_cast<double>(t.wire_bytes); }},
  };
  for (const auto& m : metrics) {
    family(m.name, m.type, m.help);
    for (const auto& [id, tr] : trainers_)
      sample(m.name, "trainer=\"" + label(id) + "\"", m.get(tr));
  }
  if (control_.on) {
    family("swarm_control_term", "gauge", "The election term this process last saw leading (--control).");
    sample("swarm_control_term", "", static_cast<double>(control_.term));
    family("swarm_control_leading", "gauge", "1 while this coordinator process leads, 0 while it stands by.");
    sample("swarm_control_leading", "", control_.role == "leader" ? 1.0 : 0.0);
    family("swarm_control_leadership_changes_total", "counter", "Leadership won or lost by this process.");
    sample("swarm_control_leadership_changes_total", "", static_cast<double>(leadership_changes_));
    family("swarm_control_members_healthy", "gauge", "etcd members answering this process's status call.");
    sample("swarm_control_members_healthy", "", static_cast<double>(control_.healthy));
  }
  family("swarm_eval_loss", "gauge", "Validation loss of a trainer's latest measurement (--eval-every).");
  for (const auto& [id, tr] : trainers_)
    if (tr.has_eval)
      sample("swarm_eval_loss", "trainer=\"" + label(id) + "\"", tr.eval_loss);
  return o;
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
       " reloads, " + since(3) + " moves" + (failed > 0 ? " (" + std::to_string(failed) + " rounds failed in all)" : "");
  summarized_ = now_counts;
  return o;
}

std::string status_board::text(double now) const {
  std::lock_guard<std::mutex> lock(m_);
  std::string o = "swarm: up " + fmt("%.0f", now - started_) + " s, " + std::to_string(stages_.size()) +
                  " stages, " + std::to_string(trainers_.size()) + " trainers\n\n";
  if (control_.on)
    o += "control: this process is the " + control_.role + "; leader " +
         (control_.leader.empty() ? std::string{"none now"} : control_.leader) + " (term " +
         std::to_string(control_.term) + "); candidates " + control_.candidates + "; etcd " + control_.members +
         "\n\n";
  for (const auto& [index, st] : stages_) {
    const int64_t rounds = st.applied + st.failed;
    const int64_t stalled = stalled_by(index);
    o += "stage " + std::to_string(index) + "  step " + std::to_string(st.step) +
         (stalled > 0 ? "  (NOT LEARNING: another stage took " + std::to_string(stalled) + " steps since its last)"
                      : "") +
         "  rounds " +
         std::to_string(st.applied) + " applied, " + std::to_string(st.failed) + " failed, mean " +
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
    o += "\n";
  }
  o += "\nlatest events:\n";
  const size_t from = events_.size() > 10 ? events_.size() - 10 : 0;
  for (size_t i = from; i < events_.size(); ++i)
    o += "  " + fmt("%5.0f", now - events_[i].t) + " s ago  " + events_[i].text + "\n";
  return o;
}

} // namespace swarm
