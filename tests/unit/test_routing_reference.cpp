// SWARM routing policy: the indexed router against the linear one it replaced,
// pick for pick, over random joins, leaves, bans, timeouts and exclusions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "policy/routing.hpp"

using swarm::policy::routing_config;
using swarm::policy::stage_router;

namespace {

/// The router as it was before it was indexed for thousands of servers: linear
/// scans over a vector in order of arrival (ties then drawn in that order; now
/// in order of virtual time, then arrival). The reference the indexed router
/// must agree with, pick for pick.
class reference_router {
public:
  void add(const std::string& id, double now) {
    auto* p = find(id);
    if (p == nullptr) {
      peers_.push_back(peer{id, 0.0, swarm::policy::throughput_ema(0.1)});
      p = &peers_.back();
    }
    std::optional<double> entry = floor(now, {}, p);
    if (!entry)
      for (const auto& q : peers_)
        if (&q != p)
          entry = entry ? std::min(*entry, q.vtime) : q.vtime;
    if (entry)
      p->vtime = std::max(p->vtime, *entry);
    p->banned_until = 0.0;
    p->ban_count = 0;
    p->returning = false;
  }
  void remove(const std::string& id) {
    peers_.erase(std::remove_if(peers_.begin(), peers_.end(), [&](const peer& p) { return p.id == id; }), peers_.end());
  }
  std::optional<std::string> choose(double task, bool backward, double now, std::mt19937_64& rng,
                                    const std::vector<std::string>& exclude) {
    if (const auto lo = floor(now, exclude, nullptr))
      for (auto& p : peers_)
        if (p.returning && !banned(p, now) && !listed(exclude, p.id)) {
          p.vtime = std::max(p.vtime, *lo);
          p.returning = false;
        }
    double lo = std::numeric_limits<double>::infinity();
    for (const auto& p : peers_)
      if (!banned(p, now) && !listed(exclude, p.id))
        lo = std::min(lo, p.vtime);
    std::vector<peer*> best;
    const double tol = 1e-12 * std::max(1.0, std::abs(lo));
    for (auto& p : peers_)
      if (!banned(p, now) && !listed(exclude, p.id) && p.vtime - lo <= tol)
        best.push_back(&p);
    if (best.empty())
      return std::nullopt;
    // Ties in order of virtual time, then arrival (the vector's order).
    std::stable_sort(best.begin(), best.end(), [](const peer* a, const peer* b) { return a->vtime < b->vtime; });
    peer* pick = best.size() > 1 ? best[std::uniform_int_distribution<size_t>(0, best.size() - 1)(rng)] : best[0];
    pick->vtime += std::max(0.0, task) * (backward ? 2.5 : 1.0) / speed(*pick);
    pick->returning = false;
    return pick->id;
  }
  std::optional<std::string> choose_only(const std::string& id, double task, bool backward, double now) {
    auto* p = find(id);
    if (p == nullptr || banned(*p, now))
      return std::nullopt;
    p->vtime += std::max(0.0, task) * (backward ? 2.5 : 1.0) / speed(*p);
    p->returning = false;
    return p->id;
  }
  void on_success(const std::string& id, double samples, double seconds) {
    if (auto* p = find(id)) {
      p->rate.update(samples, seconds);
      p->ban_count = 0;
    }
  }
  void on_timeout(const std::string& id, double samples, double seconds) {
    if (auto* p = find(id)) {
      p->vtime += seconds;
      p->rate.update(samples, seconds);
    }
  }
  double ban(const std::string& id, double now) {
    auto* p = find(id);
    if (p == nullptr)
      return 0.0;
    ++p->ban_count;
    const double length = std::min(60.0, std::ldexp(1.0, p->ban_count - 1));
    p->banned_until = std::max(p->banned_until, now + length);
    p->returning = true;
    return length;
  }
  size_t size() const { return peers_.size(); }

private:
  struct peer {
    std::string id;
    double vtime = 0.0;
    swarm::policy::throughput_ema rate;
    double banned_until = 0.0;
    bool returning = false;
    int ban_count = 0;
  };
  static bool listed(const std::vector<std::string>& ids, const std::string& id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  }
  static bool banned(const peer& p, double now) { return now < p.banned_until; }
  peer* find(const std::string& id) {
    for (auto& p : peers_)
      if (p.id == id)
        return &p;
    return nullptr;
  }
  std::optional<double> floor(double now, const std::vector<std::string>& exclude, const peer* skip) const {
    std::optional<double> lo;
    for (const auto& p : peers_)
      if (&p != skip && !p.returning && !banned(p, now) && !listed(exclude, p.id))
        lo = lo ? std::min(*lo, p.vtime) : p.vtime;
    return lo;
  }
  double speed(const peer& p) const {
    if (auto r = p.rate.estimate())
      return *r;
    double sum = 0.0;
    int n = 0;
    for (const auto& q : peers_)
      if (auto r = q.rate.estimate()) {
        sum += *r;
        ++n;
      }
    return n > 0 ? sum / n : 1.0;
  }
  std::vector<peer> peers_;
};

}  // namespace

TEST_CASE(
    "router: the indexed router picks exactly as the linear one it replaced, over random joins, leaves, "
    "bans, timeouts, exclusions and a copy",
    "[routing]") {
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 ops(seed), ra(seed + 100), rb(seed + 100);
    routing_config uncapped;  // the reference predates the probe cap
    uncapped.probe_requests = 0;
    swarm::policy::stage_router indexed(uncapped);
    reference_router reference;
    double now = 0;
    const auto id = [&] { return "s" + std::to_string(std::uniform_int_distribution<int>(0, 39)(ops)); };
    int picks = 0;
    for (int i = 0; i < 20000; ++i) {
      INFO("seed " << seed << " operation " << i);
      if (i == 10000) {  // a copy is a router of its own: its indexes point at its own peers, not the original's
        stage_router original = std::move(indexed);
        indexed = original;
      }
      now += std::uniform_real_distribution<double>(0, 0.05)(ops);
      const int op = std::uniform_int_distribution<int>(0, 99)(ops);
      if (op < 6) {
        const auto who = id();
        indexed.add(who, now);
        reference.add(who, now);
      } else if (op < 8) {
        const auto who = id();
        indexed.remove(who);
        reference.remove(who);
      } else if (op < 10) {
        const auto who = id();
        REQUIRE(indexed.ban(who, now) == reference.ban(who, now));
      } else if (op < 12) {
        const auto who = id();
        indexed.on_timeout(who, 8, false, 3.0);
        reference.on_timeout(who, 8, 3.0);
      } else if (op < 20) {
        const auto who = id();
        const bool backward = op % 2 == 0;
        REQUIRE(indexed.choose_only(who, 8, backward, now) == reference.choose_only(who, 8, backward, now));
      } else {
        std::vector<std::string> exclude;
        for (int k = std::uniform_int_distribution<int>(0, 2)(ops); k > 0; --k)
          exclude.push_back(id());
        const bool backward = op % 3 == 0;
        const auto got = indexed.choose(8, backward, now, ra, exclude);
        REQUIRE(got == reference.choose(8, backward, now, rb, exclude));
        if (got) {
          ++picks;
          // Rates of a few values, so equal virtual times (ties) happen often.
          const double seconds = std::uniform_int_distribution<int>(1, 3)(ops);
          indexed.on_success(*got, 8, false, seconds);
          reference.on_success(*got, 8, seconds);
        }
      }
      REQUIRE(indexed.size() == reference.size());
    }
    CHECK(picks > 10000);
  }
}
