// /api/status: the board as JSON (docs/operations.md, "Live status"),
// written through nlohmann-json. Each number keeps the precision the page
// has always been given (seconds to the millisecond, losses to 5 decimals):
// printed_number rounds it as that printf format did, so a reader sees the
// same values, integers where they were integers.
#include <algorithm>
#include <cmath>

#include "base/json_line.hpp"
#include "observe/status_board.hpp"

namespace swarm {

namespace {

/// `x` rounded as printf's `format` would print it; not finite as 0 (the
/// page draws a number, never a null).
ordered_json num(const char* format, double x) { return printed_number(format, std::isfinite(x) ? x : 0.0); }

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

}  // namespace

ordered_json status_board::stages_json(double now) const {
  auto out = ordered_json::array();
  for (const auto& [index, st] : stages_) {
    auto servers = ordered_json::array();
    for (const auto& [id, s] : servers_) {
      if (s.stage != index)
        continue;
      servers.push_back({{"id", id},
                         {"host", s.host},
                         {"port", s.port},
                         {"state", s.state},
                         {"step", s.step},
                         {"samples_per_s", num("%.2f", s.samples_per_s)},
                         {"hash", hash_prefix(s.hash)},
                         {"last_report_s", num("%.1f", now - s.last_report)}});
    }
    const int64_t rounds = st.applied + st.failed;
    const double mean = rounds > 0 ? st.round_seconds_sum / static_cast<double>(rounds) : 0.0;
    out.push_back({{"stage", index},
                   {"step", st.step},
                   {"stalled_by", stalled_by(index)},
                   {"servers", std::move(servers)},
                   {"rounds",
                    {{"applied", st.applied},
                     {"failed", st.failed},
                     {"last_seconds", num("%.3f", st.last_round_seconds)},
                     {"mean_seconds", num("%.3f", mean)}}}});
  }
  return out;
}

ordered_json status_board::trainers_json(double now) const {
  auto out = ordered_json::array();
  for (const auto& [id, tr] : trainers_) {
    ordered_json j = {{"id", id},
                      {"step", tr.step},
                      {"max_steps", tr.max_steps},
                      {"loss", num("%.5f", tr.loss)},
                      {"tokens_per_s", num("%.1f", tr.tokens_per_s)},
                      {"samples", tr.samples},
                      {"dropped", tr.dropped},
                      {"retries", tr.retries},
                      {"reroutes", tr.reroutes},
                      {"bans", tr.bans},
                      {"busy", tr.busy},
                      {"verify_requests", tr.verify_requests},
                      {"verify_samples", tr.verify_samples},
                      {"forward_samples", tr.forward_samples},
                      {"verify_disagreed", tr.verify_disagreed},
                      {"verify_strikes", tr.verify_strikes},
                      {"verify_bans", tr.verify_bans},
                      {"wire_bytes", tr.wire_bytes},
                      {"elapsed_s", num("%.1f", tr.elapsed_s)},
                      {"last_report_s", num("%.1f", now - tr.last_report)}};
    if (tr.has_eval) {
      j["eval_step"] = tr.eval_step;
      j["eval_loss"] = num("%.5f", tr.eval_loss);
    }
    auto evals = ordered_json::array();
    for (const auto& [step, loss] : tr.eval_history)
      evals.push_back({num("%.0f", step), num("%.5f", loss)});
    j["eval_history"] = std::move(evals);
    out.push_back(std::move(j));
  }
  return out;
}

ordered_json status_board::control_json() const {
  auto members = ordered_json::array();
  for (const auto& m : split_commas(control_.members)) {
    const auto eq = m.rfind('=');
    members.push_back(
        {{"endpoint", m.substr(0, eq)}, {"healthy", eq != std::string::npos && m.substr(eq + 1) == "ok"}});
  }
  return {{"role", control_.role},
          {"leader", control_.leader},
          {"term", control_.term},
          {"leadership_changes", leadership_changes_},
          {"candidates", split_commas(control_.candidates)},
          {"members", std::move(members)}};
}

ordered_json status_board::banned_json(double now) const {
  auto out = ordered_json::array();
  for (const auto& [id, b] : banned_)
    if (b.until > now)
      out.push_back({{"server", id},
                     {"stage", b.stage},
                     {"since_s", num("%.1f", now - b.t)},
                     {"left_s", num("%.1f", b.until - now)},
                     {"why", b.why}});
  return out;
}

std::string status_board::json(double now) const {
  std::lock_guard<std::mutex> lock(m_);
  ordered_json o = {{"time", num("%.3f", now)},
                    {"uptime_s", num("%.1f", now - started_)},
                    {"stages", stages_json(now)},
                    {"trainers", trainers_json(now)}};
  auto history = ordered_json::object();
  for (const auto& [id, tr] : trainers_) {
    auto points = ordered_json::array();
    for (const auto& [t, step, loss, tokens_per_s] : tr.history)
      points.push_back({num("%.3f", t), num("%.0f", step), num("%.5f", loss), num("%.1f", tokens_per_s)});
    history[id] = std::move(points);
  }
  o["history"] = std::move(history);
  if (control_.on)
    o["control"] = control_json();
  o["banned"] = banned_json(now);
  auto events = ordered_json::array();
  for (const auto& e : events_)
    events.push_back({{"t", num("%.3f", e.t)}, {"event", e.name}, {"text", e.text}});
  o["events"] = std::move(events);
  return one_line(o) + "\n";
}

}  // namespace swarm
