#include "observe/run_summary.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/metrics_reader.hpp"

namespace swarm {

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

/// What a run's events add up to (run_summary's input).
struct run_totals {
  struct trainer {
    double first_loss = NAN, last_loss = NAN, first_t = NAN, last_t = NAN;
    double steps = 0, samples = 0, tokens = 0, dropped = 0, retries = 0;
    double first_eval = NAN, last_eval = NAN, first_eval_step = 0, last_eval_step = 0;
    bool verified = false;  ///< a `verify` event: its latest counts
    double verify_requests = 0, verify_share = 0, verify_disagreed = 0, verify_strikes = 0, verify_bans = 0;
  };
  std::map<std::string, trainer> trainers;
  std::map<int, std::pair<int64_t, int64_t>> rounds;  // stage -> applied, failed
  int64_t reroutes = 0, moves = 0, downs = 0, chaos = 0, reloads = 0, checkpoint_loads = 0;
  std::vector<std::string> removed;  ///< servers banned or evicted for wrong work, and why
  double first_t = NAN, last_t = NAN;

  void add(const metrics_event& e);
};

void run_totals::add(const metrics_event& e) {
  const double t = e.t();
  if (std::isnan(first_t))
    first_t = t;
  last_t = t;
  // A number missing from its event is NaN: the summary prints "nan", not a made-up 0.
  const auto num = [&](const char* key) { return e.get_double(key, NAN); };
  const auto& event = e.name();
  if (event == "step") {
    auto& tr = trainers[e.get_string("trainer")];
    if (std::isnan(tr.first_loss))
      tr.first_loss = num("loss"), tr.first_t = t;
    tr.last_loss = num("loss");
    tr.last_t = t;
    tr.steps = num("step");
    tr.samples = num("samples");
    tr.tokens = num("tokens");
    tr.dropped = num("dropped");
    tr.retries = num("retries");
  } else if (event == "eval") {
    auto& tr = trainers[e.get_string("trainer")];
    if (std::isnan(tr.first_eval))
      tr.first_eval = num("loss"), tr.first_eval_step = num("step");
    tr.last_eval = num("loss");
    tr.last_eval_step = num("step");
  } else if (event == "round_end") {
    auto& r = rounds[static_cast<int>(e.get_int("stage"))];
    (num("applied") > 0 ? r.first : r.second) += 1;
  } else if (event == "reroute") {
    ++reroutes;
  } else if (event == "rebalance") {
    moves += num("from") >= 0;
  } else if (event == "server_down") {
    ++downs;  // failures only: a server stopped on purpose writes server_stop
  } else if (event == "chaos") {
    ++chaos;
  } else if (event == "reload") {
    ++reloads;
  } else if (event == "checkpoint_load") {
    ++checkpoint_loads;
  } else if (event == "verify") {
    auto& tr = trainers[e.get_string("trainer")];
    tr.verified = true;
    tr.verify_requests = num("requests");
    tr.verify_share = num("share");
    tr.verify_disagreed = num("disagreed");
    tr.verify_strikes = num("strikes");
    tr.verify_bans = num("bans");
  } else if (event == "server_banned" || event == "server_evicted") {
    removed.push_back(e.get_string("server") + " of stage " + std::to_string(e.get_int("stage")) + " " +
                      (event == "server_banned" ? "banned" : "evicted") + ": " + e.get_string("why"));
  }
}

}  // namespace

std::string run_summary(const std::string& metrics_path, double since) {
  std::ifstream in(metrics_path);
  if (!in)
    return "no summary: cannot read " + metrics_path + "\n";
  run_totals run;
  std::string line;
  while (std::getline(in, line)) {
    const auto e = metrics_event::parse(line);  // a torn or foreign line is no event
    if (e && e->t() >= since)
      run.add(*e);
  }
  const auto& [trainers, rounds, reroutes, moves, downs, chaos, reloads, checkpoint_loads, removed, first_t, last_t] =
      run;
  if (std::isnan(first_t))
    return "no summary: no events in " + metrics_path + "\n";
  std::string o = "run summary (" + metrics_path + ")\n";
  o += "  time " + fmt("%.0f", last_t - first_t) + " s\n";
  for (const auto& [id, tr] : trainers) {
    const double secs = tr.last_t - tr.first_t;
    o += "  trainer " + id + ": " + fmt("%.0f", tr.steps) + " steps, " + fmt("%.0f", tr.samples) + " samples, " +
         (secs > 0 ? fmt("%.0f", tr.tokens / (tr.last_t - first_t)) : std::string{"-"}) +
         " tokens/s on average, loss " + fmt("%.3f", tr.first_loss) + " -> " + fmt("%.3f", tr.last_loss) + ", " +
         fmt("%.0f", tr.dropped) + " dropped, " + fmt("%.0f", tr.retries) + " retries\n";
    if (!std::isnan(tr.first_eval))
      o += "    validation loss " + fmt("%.3f", tr.first_eval) + " at step " + fmt("%.0f", tr.first_eval_step) +
           " -> " + fmt("%.3f", tr.last_eval) + " at step " + fmt("%.0f", tr.last_eval_step) + "\n";
    if (tr.verified)
      o += "    verified " + fmt("%.0f", tr.verify_requests) + " forwards (" + fmt("%.1f", 100 * tr.verify_share) +
           "% extra forward samples), " + fmt("%.0f", tr.verify_disagreed) + " disagreed, " +
           fmt("%.0f", tr.verify_strikes) + " strikes, " + fmt("%.0f", tr.verify_bans) + " servers banned\n";
  }
  if (trainers.empty())
    o += "  no trainer made a step\n";
  o += "  rounds:";
  for (const auto& [stage, r] : rounds)
    o += " stage " + std::to_string(stage) + " " + std::to_string(r.first) + " applied" +
         (r.second > 0 ? " (" + std::to_string(r.second) + " failed)" : std::string{}) + ";";
  if (rounds.empty())
    o += " none;";
  o += " reroutes " + std::to_string(reroutes) + ", moves " + std::to_string(moves) + ", server downs " +
       std::to_string(downs) + ", reloads " + std::to_string(reloads) + ", checkpoint loads " +
       std::to_string(checkpoint_loads) + (chaos > 0 ? ", chaos actions " + std::to_string(chaos) : "") + "\n";
  for (const auto& r : removed)
    o += "  " + r + "\n";
  return o;
}

}  // namespace swarm
