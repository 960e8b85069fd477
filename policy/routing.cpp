#include "policy/routing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

namespace swarm::policy {

namespace {

/// Virtual times this close (relative, at least 1e-12 absolute) count as a tie:
/// sums of the same increments in a different order differ in the last bits.
constexpr double k_tie_tolerance = 1e-12;

/// How far above `lo` a virtual time still ties with it.
double tie_tolerance(double lo) { return k_tie_tolerance * std::max(1.0, std::abs(lo)); }

/// Rate assumed for an unmeasured peer when no peer of the stage is measured,
/// in samples per second; only the ratio between peers matters, so any value
/// that is the same for all of them rotates work evenly.
constexpr double k_default_rate = 1.0;

bool listed(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

// --- throughput_ema --------------------------------------------------------------

void throughput_ema::update(double samples, double seconds) {
  if (!(samples > 0.0) || !(seconds > 0.0) || !std::isfinite(samples) || !std::isfinite(seconds))
    return;
  const double rate = samples / seconds;
  if (!std::isfinite(rate))  // tiny `seconds` can overflow; such a rate is no measurement
    return;
  // Same value as raw / (1 - (1 - alpha)^n), updated in corrected form
  // (m += alpha / c_n * (x - m), c_n = 1 - (1 - alpha)^n) so that the first
  // sample and a constant rate come out exact rather than off by rounding.
  weight_sum_ = (1.0 - alpha_) * weight_sum_ + alpha_;
  estimate_ += alpha_ / weight_sum_ * (rate - estimate_);
  ++updates_;
}

std::optional<double> throughput_ema::estimate() const {
  if (updates_ == 0)
    return std::nullopt;
  return estimate_;
}

// --- stage_router ----------------------------------------------------------------

stage_router::stage_router(const stage_router& other)
    : cfg_(other.cfg_), peers_(other.peers_), returning_(other.returning_), next_seq_(other.next_seq_),
      capped_(other.capped_), rate_sum_(other.rate_sum_), rated_(other.rated_) {
  for (auto& [id, p] : peers_) {
    by_seq_.emplace(p.seq, &p);
    if (!p.returning)
      steady_.insert({{p.vtime, p.seq}, &p});
  }
}

stage_router& stage_router::operator=(const stage_router& other) {
  if (this != &other)
    *this = stage_router(other);
  return *this;
}

const stage_router::peer* stage_router::find(const std::string& id) const {
  const auto it = peers_.find(id);
  return it == peers_.end() ? nullptr : &it->second;
}

stage_router::peer* stage_router::find(const std::string& id) {
  return const_cast<peer*>(std::as_const(*this).find(id));
}

void stage_router::unindex(const peer& p) {
  if (p.returning)
    returning_.erase(p.seq);
  else
    steady_.erase({p.vtime, p.seq});
}

void stage_router::place(peer& p, double vtime, bool returning) {
  unindex(p);
  p.vtime = vtime;
  p.returning = returning;
  if (returning)
    returning_.insert(p.seq);
  else
    steady_.insert({{vtime, p.seq}, &p});
}

void stage_router::measure(peer& p, double samples, double seconds) {
  const auto before = p.rate.estimate();
  p.rate.update(samples, seconds);
  const auto after = p.rate.estimate();
  if (!after)
    return;
  if (!before)
    recap(p);  // measured: no longer a probe
  rate_sum_ += *after - before.value_or(0.0);
  rated_ += before ? 0 : 1;
}

std::optional<double> stage_router::floor(double now, const std::vector<std::string>& exclude, const peer* skip) const {
  // Steady peers are never banned (a ban makes a peer returning), so the first
  // one not excluded is the floor.
  for (const auto& [key, q] : steady_) {
    const peer& p = *q;
    if (&p == skip || is_banned(p, now) || listed(exclude, p.id))
      continue;
    return key.first;
  }
  return std::nullopt;
}

double stage_router::speed(const peer& p) const {
  if (auto r = p.rate.estimate())
    return *r;
  // Unmeasured: assume an average peer so one probe costs about what it would
  // on any other, neither starving it nor flooding it before it is measured.
  return rated_ > 0 ? rate_sum_ / static_cast<double>(rated_) : k_default_rate;
}

void stage_router::add(const std::string& id, double now, std::mt19937_64* rng) {
  peer* p = find(id);
  if (p == nullptr) {
    const uint64_t seq = next_seq_++;
    p = &peers_.emplace(id, peer{id, seq, 0.0, throughput_ema(cfg_.alpha)}).first->second;
    by_seq_.emplace(seq, p);
    steady_.insert({{0.0, seq}, p});
  }
  // Enter (or come back) at the front of the steady peers. When none is in
  // service (all banned), use the smallest virtual time of the others, so the
  // banned ones do not come back far ahead of it; 0 for the very first peer.
  std::optional<double> entry = floor(now, {}, p);
  if (!entry)
    for (const auto& [other, q] : peers_)
      if (&q != p)
        entry = entry ? std::min(*entry, q.vtime) : q.vtime;
  // With an engine, at a uniformly random point of one task's advance past
  // the front instead: every trainer adds a joiner at the same instant, and at
  // the front each one's next request went to it, a wave of one request per
  // trainer (swarm-sim, 128 trainers: 20-60 queued at a joiner while the
  // stage's other servers idled).
  if (entry && rng != nullptr && steady_.size() > 1) {
    // In steady rotation the peers' virtual times spread evenly over one
    // task's advance, so twice the median's distance from the front is that
    // advance, whatever outliers (a timeout's charge) lie beyond it.
    const size_t own = steady_.order_of_key({p->vtime, p->seq}), half = (steady_.size() - 1) / 2;
    const auto median = steady_.find_by_order(half + (half >= own ? 1 : 0));  // among the others
    const double spread = 2 * std::max(0.0, median->first.first - *entry);
    entry = *entry + std::uniform_real_distribution<double>(0.0, 1.0)(*rng) * spread;
  }
  // A re-announcement means the peer is back: forget its ban and its run of
  // bans (the EMA stays: it still describes this machine).
  place(*p, entry ? std::max(p->vtime, *entry) : p->vtime, false);
  p->banned_until = 0.0;
  p->ban_count = 0;
}

void stage_router::remove(const std::string& id) {
  peer* p = find(id);
  if (p == nullptr)
    return;
  unindex(*p);
  capped_.erase(p->seq);
  if (const auto r = p->rate.estimate()) {
    rate_sum_ -= *r;
    if (--rated_ == 0)
      rate_sum_ = 0.0;  // no rounding left behind
  }
  by_seq_.erase(p->seq);
  peers_.erase(id);
}

std::optional<std::string> stage_router::choose(double task_size, bool backward, double now, std::mt19937_64& rng,
                                                const std::vector<std::string>& exclude) {
  // Unmeasured servers holding their probe are passed over while another is eligible.
  if (!capped_.empty()) {
    std::vector<std::string> more = exclude;
    for (uint64_t seq : capped_)
      more.push_back(at(seq).id);
    if (auto pick = pick_one(task_size, backward, now, rng, more))
      return pick;
  }
  return pick_one(task_size, backward, now, rng, exclude);
}

std::optional<std::string> stage_router::pick_one(double task_size, bool backward, double now, std::mt19937_64& rng,
                                                  const std::vector<std::string>& exclude) {
  const auto eligible = [&](const peer& p) { return !is_banned(p, now) && !listed(exclude, p.id); };
  // The steady peers' minimum; lifting returning peers to it (step 1) leaves it as it is.
  const auto lo = floor(now, exclude, nullptr);
  // 1. Peers back from a ban rejoin at the steady peers' minimum, not where
  //    they stopped: otherwise they would get all the work they "missed".
  if (lo && !returning_.empty()) {
    std::vector<uint64_t> back;
    for (uint64_t seq : returning_)
      if (eligible(at(seq)))
        back.push_back(seq);
    for (uint64_t seq : back)
      place(at(seq), std::max(at(seq).vtime, *lo), false);
  }

  // 2. The eligible peers with the smallest virtual time (within rounding):
  //    ties, drawn from uniformly at random so that trainers that start
  //    together do not all pick the same fresh server first, in the order of
  //    (virtual time, arrival) so that a seed gives the same pick.
  peer* pick = nullptr;
  if (lo) {
    // Every eligible peer is steady now (step 1), and steady peers are never
    // banned: the ties are a range of steady_ less the excluded in it.
    const double tol = tie_tolerance(*lo);
    const size_t first = steady_.order_of_key({*lo, 0});
    const size_t end = steady_.order_of_key({*lo + tol, std::numeric_limits<uint64_t>::max()});
    std::vector<size_t> skip;
    for (const auto& id : exclude)
      if (const peer* p = find(id); p && !p->returning && p->vtime >= *lo && p->vtime - *lo <= tol)
        skip.push_back(steady_.order_of_key({p->vtime, p->seq}));
    std::sort(skip.begin(), skip.end());
    skip.erase(std::unique(skip.begin(), skip.end()), skip.end());
    const size_t ties = end - first - skip.size();
    size_t at_rank = first + (ties > 1 ? std::uniform_int_distribution<size_t>(0, ties - 1)(rng) : 0);
    for (size_t s : skip)
      at_rank += s <= at_rank ? 1 : 0;
    pick = steady_.find_by_order(at_rank)->second;
  } else {
    // No steady peer left to choose: returning ones that are not lifted.
    std::vector<peer*> best;
    double low = std::numeric_limits<double>::infinity();
    for (uint64_t seq : returning_)
      if (eligible(at(seq)))
        low = std::min(low, at(seq).vtime);
    const double tol = tie_tolerance(low);
    for (uint64_t seq : returning_)
      if (eligible(at(seq)) && at(seq).vtime - low <= tol)
        best.push_back(&at(seq));
    if (best.empty())
      return std::nullopt;
    std::sort(best.begin(), best.end(),
              [](const peer* a, const peer* b) { return std::tie(a->vtime, a->seq) < std::tie(b->vtime, b->seq); });
    pick = best.size() > 1 ? best[std::uniform_int_distribution<size_t>(0, best.size() - 1)(rng)] : best.front();
  }

  // 3. Advance it by the seconds this task should take it; a backward
  //    recomputes the forward, so it costs more.
  const double cost = forward_samples(task_size, backward);
  place(*pick, pick->vtime + cost / speed(*pick), false);
  ++pick->in_flight;
  recap(*pick);
  return pick->id;
}

std::optional<std::string> stage_router::choose_backward(const std::string& preferred, double task_size, double now,
                                                         std::mt19937_64& rng,
                                                         const std::vector<std::string>& exclude) {
  const peer* p = find(preferred);
  if (p != nullptr && !p->returning && !is_banned(*p, now) && !listed(exclude, preferred) && !capped(*p)) {
    const auto lo = floor(now, exclude, nullptr);
    if (lo && p->vtime - *lo <= tie_tolerance(*lo))
      return choose_only(preferred, task_size, true, now);
  }
  return choose(task_size, true, now, rng, exclude);
}

double stage_router::forward_samples(double task_size, bool backward) const {
  return std::max(0.0, task_size) * (backward ? cfg_.backward_cost : 1.0);
}

bool stage_router::capped(const peer& p) const {
  return cfg_.probe_requests > 0 && !p.rate.estimate() && p.in_flight >= cfg_.probe_requests;
}

void stage_router::recap(peer& p) {
  if (capped(p)) {
    capped_.insert(p.seq);
    return;
  }
  // Passed over while capped, it fell behind the others' virtual times: it
  // rejoins at their pace (as add() has it) rather than taking every choice
  // until it caught up. Steady peers are never banned, hence any `now`.
  if (capped_.erase(p.seq) > 0 && !p.returning)
    if (const auto lo = floor(std::numeric_limits<double>::infinity(), {}, &p))
      place(p, std::max(p.vtime, *lo), false);
}

void stage_router::release(const std::string& id) {
  if (peer* p = find(id); p && p->in_flight > 0) {
    --p->in_flight;
    recap(*p);
  }
}

int64_t stage_router::in_flight(const std::string& id) const {
  const peer* p = find(id);
  return p ? p->in_flight : 0;
}

std::optional<std::string> stage_router::choose_only(const std::string& id, double task_size, bool backward,
                                                     double now) {
  // choose() with all others excluded: no other peer is lifted, `id` is the
  // only candidate; a returning `id` is not lifted either (its floor would be
  // taken over no steady peer).
  peer* p = find(id);
  if (p == nullptr || is_banned(*p, now))
    return std::nullopt;
  place(*p, p->vtime + forward_samples(task_size, backward) / speed(*p), false);
  ++p->in_flight;
  recap(*p);
  return p->id;
}

void stage_router::on_success(const std::string& id, double task_size, bool backward, double seconds,
                              double served_seconds) {
  if (peer* p = find(id)) {
    measure(*p, forward_samples(task_size, backward), served_seconds > 0 ? served_seconds : seconds);
    p->ban_count = 0;
  }
}

void stage_router::on_timeout(const std::string& id, double task_size, bool backward, double seconds) {
  if (peer* p = find(id)) {
    ++p->timeouts;
    if (std::isfinite(seconds) && seconds > 0) {
      place(*p, p->vtime + seconds, p->returning);
      measure(*p, forward_samples(task_size, backward), seconds);
    }
  }
}

int64_t stage_router::timeouts(const std::string& id) const {
  const peer* p = find(id);
  return p ? p->timeouts : 0;
}

double stage_router::ban(const std::string& id, double now) {
  peer* p = find(id);
  if (p == nullptr)
    return 0.0;
  p->ban_count = std::min(p->ban_count + 1, 1 << 20);  // bounded: no int overflow
  // ldexp instead of a shift: no overflow however many bans in a row.
  const double length = std::min(cfg_.ban_max_s, std::ldexp(cfg_.ban_base_s, std::min(p->ban_count - 1, 2048)));
  p->banned_until = std::max(p->banned_until, now + length);
  place(*p, p->vtime, true);
  return length;
}

bool stage_router::banned(const std::string& id, double now) const {
  const peer* p = find(id);
  return p != nullptr && is_banned(*p, now);
}

std::optional<double> stage_router::ema(const std::string& id) const {
  const peer* p = find(id);
  return p ? p->rate.estimate() : std::nullopt;
}

size_t stage_router::eligible(double now) const {
  return static_cast<size_t>(
      std::count_if(peers_.begin(), peers_.end(), [&](const auto& kv) { return !is_banned(kv.second, now); }));
}

std::optional<std::string> static_pin::pin(std::vector<std::string> candidates, std::mt19937_64& rng) {
  if (!pinned_.empty())
    return pinned_;
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                  [&](const std::string& id) { return retired_.count(id) > 0; }),
                   candidates.end());
  if (candidates.empty())
    return std::nullopt;
  std::sort(candidates.begin(), candidates.end());  // the caller's order does not change the draw
  pinned_ = candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
  return pinned_;
}

bool static_pin::gone(const std::string& id, const std::vector<std::string>& present) {
  if (pinned_.empty() || id != pinned_)
    return false;
  retired_.insert(id);
  retired_.insert(present.begin(), present.end());
  pinned_.clear();
  return true;
}

}  // namespace swarm::policy
