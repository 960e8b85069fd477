#include "policy/rebalancing.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

namespace swarm::policy {

const char* to_string(move_reason r) {
  switch (r) {
    case move_reason::load: return "load";
    case move_reason::redundancy: return "redundancy";
    case move_reason::empty: return "empty";
    case move_reason::join: return "join";
  }
  return "?";
}

namespace {

/// The swarm as counts and capacities, with every server's speed (work/s) filled in.
struct swarm_model {
  std::vector<double> cost;
  std::vector<double> speed;  ///< per server, in input order
  std::vector<int> count;     ///< servers per stage
  std::vector<double> cap;    ///< samples/s per stage
  double median_speed = 1.0;  ///< what an unmeasured server counts as

  swarm_model(const std::vector<double>& c, const std::vector<server_load>& servers)
      : cost(c), count(c.size(), 0), cap(c.size(), 0.0) {
    std::vector<double> known;
    for (const auto& s : servers)
      if (std::isfinite(s.rate) && s.rate > 0)
        known.push_back(s.rate * cost[static_cast<size_t>(s.stage)]);
    if (!known.empty()) {
      std::sort(known.begin(), known.end());
      const size_t m = known.size() / 2;
      median_speed = known.size() % 2 == 1 ? known[m] : (known[m - 1] + known[m]) / 2;
    }
    for (const auto& s : servers) {
      const auto st = static_cast<size_t>(s.stage);
      speed.push_back(std::isfinite(s.rate) && s.rate > 0 ? s.rate * cost[st] : median_speed);
      ++count[st];
      cap[st] += speed.back() / cost[st];
    }
  }
};

/// How good a configuration is: fewer empty stages first, then a faster bottleneck.
struct score {
  int empty = 0;
  double bottleneck = 0;  ///< least capacity among non-empty stages; 0 when all are empty
  int under = 0;          ///< stages below min_replicas (a constraint, not compared)
};

score score_of(const std::vector<int>& count, const std::vector<double>& cap, int min_replicas) {
  score s;
  bool any = false;
  for (size_t i = 0; i < count.size(); ++i) {
    if (count[i] < min_replicas)
      ++s.under;
    if (count[i] == 0) {
      ++s.empty;
    } else if (!any || cap[i] < s.bottleneck) {
      s.bottleneck = cap[i];
      any = true;
    }
  }
  return s;
}

/// Strictly better; a relative tolerance keeps rounding from breaking ties.
bool better(const score& a, const score& b) {
  if (a.empty != b.empty)
    return a.empty < b.empty;
  return a.bottleneck > b.bottleneck * (1 + 1e-9) + 1e-12;
}

double gain_of(const score& before, const score& after) {
  if (before.empty > 0 || before.bottleneck <= 0)
    return std::numeric_limits<double>::infinity();
  return after.bottleneck / before.bottleneck - 1;
}

/// Servers in tie-break order: by stage, then id.
std::vector<size_t> tie_order(const std::vector<server_load>& servers) {
  std::vector<size_t> order(servers.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return servers[a].stage != servers[b].stage ? servers[a].stage < servers[b].stage : servers[a].id < servers[b].id;
  });
  return order;
}

/// The best move of server i to stage t among those `allowed`, in tie-break order.
std::optional<move_plan> best_move(const swarm_model& m, const std::vector<server_load>& servers, move_reason reason,
                                   int min_replicas, const std::function<bool(size_t, int, const score&)>& allowed) {
  const auto before = score_of(m.count, m.cap, min_replicas);
  std::optional<move_plan> best;
  score best_score;
  const auto order = tie_order(servers);
  // One scratch copy changed and restored per candidate: swarm-sim asks this of
  // thousands of servers, where a fresh copy per candidate cost most of the time.
  auto count = m.count;
  auto cap = m.cap;
  for (int t = 0; t < static_cast<int>(m.cost.size()); ++t)
    for (size_t i : order) {
      const auto from = static_cast<size_t>(servers[i].stage);
      const auto to = static_cast<size_t>(t);
      if (from == to || m.count[from] < 2)
        continue;  // never empty a stage
      --count[from];
      ++count[to];
      cap[from] -= m.speed[i] / m.cost[from];
      cap[to] += m.speed[i] / m.cost[to];
      const auto after = score_of(count, cap, min_replicas);
      count[from] = m.count[from], count[to] = m.count[to];
      cap[from] = m.cap[from], cap[to] = m.cap[to];
      if (!allowed(i, t, after) || (best && !better(after, best_score)))
        continue;
      best = move_plan{servers[i].id,    servers[i].stage,      t, reason, before.bottleneck,
                       after.bottleneck, gain_of(before, after)};
      best_score = after;
    }
  return best;
}

}  // namespace

rebalance_config periodic_rule(rebalance_config moves, double period_s) {
  moves.cooldown_s = 2 * period_s;
  return moves;
}

std::vector<double> capacities(const std::vector<double>& cost, const std::vector<server_load>& servers) {
  return swarm_model(cost, servers).cap;
}

std::optional<move_plan> plan_move(const std::vector<double>& cost, const std::vector<server_load>& servers, double now,
                                   bool periodic, const rebalance_config& cfg) {
  const swarm_model m(cost, servers);
  const int stages = static_cast<int>(cost.size());
  const auto settled = [&](size_t i) { return now - servers[i].settled_at >= cfg.cooldown_s; };
  // Empty: the first empty stage, from any stage that can spare a server.
  for (int t = 0; t < stages; ++t)
    if (m.count[static_cast<size_t>(t)] == 0)
      return best_move(m, servers, move_reason::empty, cfg.min_replicas,
                       [t](size_t, int to, const score&) { return to == t; });
  // Redundancy: from stages with spare servers to those below min_replicas.
  const bool thin = std::any_of(m.count.begin(), m.count.end(), [&](int c) { return c < cfg.min_replicas; });
  if (!thin && !periodic)
    return std::nullopt;  // nothing to fix and no load move due: skip the search
  std::optional<move_plan> fix;
  if (thin)
    fix = best_move(m, servers, move_reason::redundancy, cfg.min_replicas, [&](size_t i, int to, const score&) {
      return m.count[static_cast<size_t>(to)] < cfg.min_replicas &&
             m.count[static_cast<size_t>(servers[i].stage)] > cfg.min_replicas && settled(i);
    });
  if (fix || !periodic)
    return fix;
  // Load: the best move, if it is worth it.
  const auto under = score_of(m.count, m.cap, cfg.min_replicas).under;
  auto load = best_move(m, servers, move_reason::load, cfg.min_replicas,
                        [&](size_t i, int, const score& after) { return settled(i) && after.under <= under; });
  if (load && load->gain > cfg.min_gain)
    return load;
  return std::nullopt;
}

move_plan place_joiner(const std::vector<double>& cost, const std::vector<server_load>& servers,
                       const rebalance_config& cfg) {
  move_plan p;
  p.from = -1;
  p.to = -1;
  p.reason = move_reason::join;
  if (cost.empty())
    return p;
  const swarm_model m(cost, servers);
  // The least-served stage, preferring empty, then under-replicated ones.
  auto rank = [&](size_t s) { return std::make_tuple(m.count[s] > 0, m.count[s] >= cfg.min_replicas, m.cap[s]); };
  size_t to = 0;
  for (size_t s = 1; s < cost.size(); ++s)
    if (rank(s) < rank(to))
      to = s;
  const auto before = score_of(m.count, m.cap, cfg.min_replicas);
  auto count = m.count;
  auto cap = m.cap;
  ++count[to];
  cap[to] += m.median_speed / cost[to];
  const auto after = score_of(count, cap, cfg.min_replicas);
  p.to = static_cast<int>(to);
  p.bottleneck_before = before.bottleneck;
  p.bottleneck_after = after.bottleneck;
  p.gain = gain_of(before, after);
  return p;
}

}  // namespace swarm::policy
