#include "sim/trace.hpp"

#include "base/metrics_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace swarm::sim {

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string f; std::getline(ss, f, ',');) {
    const auto a = f.find_first_not_of(" \t\r");
    const auto b = f.find_last_not_of(" \t\r");
    out.push_back(a == std::string::npos ? std::string() : f.substr(a, b - a + 1));
  }
  return out;
}

bool to_number(const std::string& s, double& v) {
  try {
    size_t used = 0;
    v = std::stod(s, &used);
    return used == s.size() && v >= 0 && v < 1e15;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::optional<std::vector<lifetime>> parse_trace(const std::string& text, const std::string& name, std::string* error) {
  const auto fail = [&](int line, const std::string& why) -> std::optional<std::vector<lifetime>> {
    if (error)
      *error = name + ":" + std::to_string(line) + ": " + why;
    return std::nullopt;
  };
  std::vector<lifetime> out;
  std::map<std::string, size_t> open;  // node -> index in out (events format)
  std::vector<size_t> alive;           // counts format: open lifetimes, oldest first
  int columns = 0, last_count = 0;
  double last_t = 0;
  std::stringstream in(text);
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    const auto f = split(line);
    if (columns == 0)
      columns = static_cast<int>(f.size());
    if (columns != 2 && columns != 3)
      return fail(no, "expected `t,n` or `ms,event,node`, got: " + line);
    if (static_cast<int>(f.size()) != columns)
      return fail(no, "expected " + std::to_string(columns) + " columns");
    double t = 0;
    if (!to_number(f[0], t))
      return fail(no, "bad time: " + f[0]);
    if (columns == 3)
      t /= 1000.0;  // milliseconds
    if (t < last_t)
      return fail(no, "time goes back");
    last_t = t;
    if (columns == 3) {
      if (f[1] == "add") {
        if (open.count(f[2]))
          return fail(no, "node " + f[2] + " added twice");
        open[f[2]] = out.size();
        out.push_back({t, std::numeric_limits<double>::infinity()});
      } else if (f[1] == "remove") {
        auto it = open.find(f[2]);
        if (it == open.end())
          return fail(no, "node " + f[2] + " removed but never added");
        out[it->second].end = t;
        open.erase(it);
      } else {
        return fail(no, "event must be add or remove: " + f[1]);
      }
    } else {
      double n = 0;
      if (!to_number(f[1], n) || n != static_cast<int>(n))
        return fail(no, "bad count: " + f[1]);
      const int count = static_cast<int>(n);
      for (; last_count < count; ++last_count) {
        alive.push_back(out.size());
        out.push_back({t, std::numeric_limits<double>::infinity()});
      }
      for (; last_count > count; --last_count) {
        out[alive.back()].end = t;
        alive.pop_back();
      }
    }
  }
  if (out.empty())
    return fail(no, "no machine ever comes up");
  // Zero-length lifetimes (a count that rose and fell at one instant) say nothing.
  out.erase(std::remove_if(out.begin(), out.end(), [](const lifetime& l) { return l.end <= l.start; }), out.end());
  std::stable_sort(out.begin(), out.end(), [](const lifetime& a, const lifetime& b) { return a.start < b.start; });
  return out;
}

std::optional<std::vector<lifetime>> read_trace(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    if (error)
      *error = path + ": cannot read the trace";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_trace(ss.str(), path, error);
}

std::vector<slot_plan> replay(const std::vector<lifetime>& trace, int peers, double speedup, double jitter_s,
                              std::mt19937_64& rng) {
  std::vector<slot_plan> slots(static_cast<size_t>(std::max(peers, 0)));
  if (slots.empty() || trace.empty() || speedup <= 0)
    return slots;
  const int copies = (peers + std::max(peak_alive(trace), 1) - 1) / std::max(peak_alive(trace), 1);
  std::vector<lifetime> all;
  std::uniform_real_distribution<double> shift(-jitter_s, jitter_s);
  for (int c = 0; c < copies; ++c)
    for (const auto& l : trace) {
      const double d = jitter_s > 0 ? shift(rng) : 0.0;
      all.push_back({std::max(0.0, l.start / speedup + d), std::max(0.0, l.end / speedup + d)});
    }
  std::stable_sort(all.begin(), all.end(), [](const lifetime& a, const lifetime& b) { return a.start < b.start; });
  std::vector<double> free_at(slots.size(), 0.0);
  for (const auto& l : all) {
    if (l.end <= l.start)
      continue;
    for (size_t s = 0; s < slots.size(); ++s)
      if (free_at[s] <= l.start) {
        slots[s].up.push_back(l);
        free_at[s] = l.end;
        break;
      }
  }
  return slots;
}

std::optional<std::vector<chaos_action>> read_chaos_log(const std::string& path, int* skipped, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    if (error)
      *error = path + ": cannot read the churn log";
    return std::nullopt;
  }
  std::vector<chaos_action> out;
  std::optional<double> t0;
  int skip = 0;
  std::set<long> restarted;                           // PIDs of restarted servers
  std::map<long, std::pair<double, int>> first_join;  // PID -> its first join: time, stage
  std::string line;
  while (std::getline(in, line)) {
    const auto e = metrics_event::parse(line);
    if (!e)
      continue;  // not an event line
    const double t = e->t();
    if (!t0)
      t0 = t;
    if (e->name() == "server_join") {
      long pid = -1;
      const auto id = e->get_string("server");
      const double stage = e->get_double("stage", std::nan(""));
      if (std::sscanf(id.c_str(), "s-%ld", &pid) == 1 && !std::isnan(stage))
        first_join.emplace(pid, std::pair{t - *t0, static_cast<int>(stage)});
      continue;
    }
    if (e->name() != "chaos")
      continue;
    const auto action = e->get_string("action");
    const auto process = e->get_string("process");
    int stage = -1, index = -1;
    if ((action == "kill" || action == "restart") &&
        std::sscanf(process.c_str(), "server %d.%d", &stage, &index) == 2 && stage >= 0 && index >= 0) {
      out.push_back({t - *t0, action == "kill", stage, index});
      if (const double pid = e->get_double("pid", std::nan("")); action == "restart" && !std::isnan(pid))
        restarted.insert(static_cast<long>(pid));
    } else {
      ++skip;
    }
  }
  std::map<int, int> launched;  // stage -> servers of it named so far, in PID order
  for (const auto& [pid, join] : first_join)
    if (restarted.count(pid) == 0)
      out.push_back({join.first, false, join.second, launched[join.second]++, true});
  std::stable_sort(out.begin(), out.end(), [](const chaos_action& a, const chaos_action& b) { return a.t < b.t; });
  if (skipped)
    *skipped = skip;
  if (!t0) {
    if (error)
      *error = path + ": no metrics event in it";
    return std::nullopt;
  }
  return out;
}

int peak_alive(const std::vector<lifetime>& trace) {
  std::vector<std::pair<double, int>> ev;
  for (const auto& l : trace)
    ev.push_back({l.start, 1}), ev.push_back({l.end, -1});
  std::sort(ev.begin(), ev.end());  // at equal times the -1 comes first
  int now = 0, peak = 0;
  for (const auto& [t, d] : ev)
    peak = std::max(peak, now += d);
  return peak;
}

}  // namespace swarm::sim
