// The coordinator's decisions (swarm's actors/rebalancer and actors/averager),
// made by the same pure policies: policy::place_joiner and policy::plan_move
// over the servers' measured rates, policy::plan_round over their reports,
// policy::partition_shards for what each member of a round sends. It also
// keeps the run's yardstick (the best assignment's throughput, sim/optimal)
// and writes the progress lines and periodic events.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <utility>

#include "policy/allreduce.hpp"
#include "policy/averaging.hpp"
#include "sim/optimal.hpp"
#include "sim/world.hpp"

namespace swarm::sim {

namespace {

policy::rebalance_config rebalance_cfg(const scenario& c) {
  return policy::periodic_rule(c.coordinator.moves, c.coordinator.rebalance_period_s);
}

/// One butterfly all-reduce of a stage's gradients among `members`. Every
/// member sends its part of each other shard to that shard's owner and the
/// reduced shard it owns to every other member, and receives as much: each
/// member's bytes go up its link and come down its link as two flows to and
/// from a hub without a link of its own, which loads every member's links
/// with exactly its butterfly bytes. (Flows from member to member would tie
/// all of a stage's links into one sharing problem that SimGrid re-solves at
/// every transfer: 625 members a stage made 10,000 peers crawl.)
void run_round(int stage, std::vector<peer*> members, int64_t round) {
  auto& w = the_world();
  const double t0 = w.now();
  const int n = static_cast<int>(members.size());
  std::vector<uint64_t> epochs;
  for (peer* m : members)
    epochs.push_back(m->epoch);
  const auto& c = w.costs[static_cast<size_t>(stage)];
  const auto shards = policy::partition_shards(c.parameters, n);
  const double vb = nominal_bytes_per_value(w.cfg.server.averaging_compression);
  // Each member's flows run on its machine's two flow ends (peer::near_end,
  // hub_end); they are cut at swarm's round deadline.
  const double deadline = t0 + policy::round_clock::end * w.cfg.coordinator.averaging_timeout_s;
  const auto done = s4u::Semaphore::create(0);
  const int flows = n > 1 ? n : 0;  // a lone member has nothing to exchange
  for (int i = 0; i < flows; ++i)
    w.books.round(*members[static_cast<size_t>(i)], +1, t0);
  for (int i = 0; i < flows; ++i) {
    peer* m = members[static_cast<size_t>(i)];
    const auto own = static_cast<double>(shards[static_cast<size_t>(i)].size());
    const auto bytes = static_cast<uint64_t>(vb * ((static_cast<double>(c.parameters) - own) + (n - 1) * own));
    const auto flow = std::make_shared<round_flow>(round_flow{bytes, deadline, done});
    for (const auto& end : {m->near_end, m->hub_end}) {
      end->rounds.push_back(flow);
      end->ready->release();
    }
  }
  for (int i = 0; i < flows; ++i)
    done->acquire();
  for (int i = 0; i < flows; ++i)
    if (members[static_cast<size_t>(i)]->epoch == epochs[static_cast<size_t>(i)])
      w.books.round(*members[static_cast<size_t>(i)], -1, w.now());
  // Members still serving this stage in the life they started the round in.
  std::vector<peer*> survivors;
  for (int i = 0; i < n; ++i) {
    peer* m = members[static_cast<size_t>(i)];
    if (m->epoch == epochs[static_cast<size_t>(i)] && m->state == peer::serving && m->stage == stage)
      survivors.push_back(m);
  }
  const int alive = static_cast<int>(survivors.size());
  auto& step = w.stage_step[static_cast<size_t>(stage)];
  if (alive > 0)
    ++step;
  for (peer* m : survivors)
    m->step = step;
  (alive > 0 ? w.total.rounds_applied : w.total.rounds_failed)++;
  w.emit("round_end",
         {{"stage", int64_t{stage}},
          {"round", round},
          {"step", static_cast<int64_t>(step)},
          {"peers", int64_t{n}},
          {"applied", alive > 0},
          {"agreeing", int64_t{alive}},
          {"excluded", int64_t{n - alive}},
          {"seconds", w.now() - t0}},
         "coordinator");
  w.round_running[static_cast<size_t>(stage)] = false;
}

void maybe_start_rounds(world& w, int64_t& rounds) {
  for (int s = 0; s < w.cfg.stages; ++s) {
    if (w.round_running[static_cast<size_t>(s)])
      continue;
    const uint64_t pos = w.stage_step[static_cast<size_t>(s)];
    std::vector<peer*> live;
    std::vector<policy::member_view> views;
    for (peer* p : w.serving(s)) {
      if (p->step < pos) {  // behind (joined during a round): swarm's averager has it reload
        start_reload(*p);
        continue;
      }
      if (p->reloading)
        continue;
      live.push_back(p);
      views.push_back({p->name, true, p->step, static_cast<uint64_t>(p->accumulated), p->step});
    }
    const auto plan = policy::plan_round(views, {pos, pos}, w.cfg.server.batch_size);
    if (!plan.start)
      continue;
    std::vector<peer*> members;
    for (size_t i : plan.members) {
      members.push_back(live[i]);
      live[i]->accumulated = 0;
    }
    w.round_running[static_cast<size_t>(s)] = true;
    const int64_t round = ++rounds;
    s4u::Actor::create("round", w.coordinator_host, [s, members, round] { run_round(s, members, round); });
  }
}

void maybe_move(world& w, bool periodic) {
  auto plan = policy::plan_move(w.rebalance_cost, server_loads(w), w.now(), periodic, rebalance_cfg(w.cfg));
  if (!plan)
    return;
  for (auto& p : w.peers) {
    if (p.name != plan->server || p.state != peer::serving)
      continue;
    p.move_to = plan->to;
    p.move_reason = plan->reason;
    p.predicted_gain = std::isfinite(plan->gain) ? plan->gain : std::nan("");
    p.ordered_at = w.now();
    deliver(p, new request{request::move, p.stage, p.epoch});
    auto& t = w.total;
    (plan->reason == policy::move_reason::load    ? t.moves_load
     : plan->reason == policy::move_reason::empty ? t.moves_empty
                                                  : t.moves_redundancy)++;
  }
}

}  // namespace

std::vector<policy::server_load> server_loads(world& w) {
  std::vector<policy::server_load> out;
  for (auto& p : w.peers) {
    if (p.state == peer::off || (p.stage < 0 && p.move_to < 0) || p.banned)
      continue;  // off, starting and not placed yet, or banned (out of membership, issue #47)
    policy::server_load l;
    l.id = p.name;
    const bool ordered = p.move_to >= 0;
    l.stage = ordered ? p.move_to : p.stage;
    if (ordered) {  // as swarm's rebalancer sees a mover: on its new stage, at the rate it should have there
      l.rate = p.state == peer::serving ? moved_rate(w, p, p.stage, p.move_to) : std::nan("");
      l.settled_at = p.ordered_at;
    } else if (p.state == peer::serving) {
      l.rate = rate_here(p);
      l.settled_at = p.settled_at;
    } else {  // placed, not registered yet
      l.rate = std::nan("");
      l.settled_at = w.now();
    }
    out.push_back(l);
  }
  return out;
}

double rate_here(const peer& p) {
  return p.busy_s > 0 && p.samples_done > 0 ? p.samples_done / p.busy_s : p.carried_rate;
}

double moved_rate(const world& w, const peer& p, int from, int to) {
  return rate_here(p) * w.rebalance_cost[static_cast<size_t>(from)] / w.rebalance_cost[static_cast<size_t>(to)];
}

int place(peer& p) {
  auto& w = the_world();
  // swarm --role cluster restarts a killed server on its stage when rebalancing is off.
  const bool cluster_churn = w.cfg.churn == "kill" || w.cfg.churn == "replay";
  if (w.cfg.coordinator.rebalance == "off" && cluster_churn && p.home_stage >= 0)
    return p.home_stage;
  if (w.cfg.join == "random")
    return std::uniform_int_distribution<int>(0, w.cfg.stages - 1)(w.rng);
  return policy::place_joiner(w.rebalance_cost, server_loads(w), rebalance_cfg(w.cfg)).to;
}

void coordinator_main() {
  auto& w = the_world();
  const auto& cfg = w.cfg;
  const double tick = 1.0, load_every = std::min(cfg.coordinator.rebalance_period_s, 5.0);
  double last_periodic = 0, last_load = 0, last_report = 0;
  int64_t rounds = 0, report_samples = 0;
  double report_optimal = 0;
  while (w.now() < cfg.duration) {
    s4u::this_actor::sleep_until(std::min(std::floor(w.now() / tick + 1e-9) * tick + tick, cfg.duration));
    const double now = w.now();
    w.yardstick(false);  // the best assignment's integrals, up to now
    const int alive = w.alive_now;
    if (now <= cfg.warmup) {
      w.total.warm_samples = w.samples();
      w.total.warm_optimal = w.total.optimal_samples;
      w.total.warm_fluid = w.total.fluid_samples;
    }
    // swarm's rebalancer is an actor of its own woken by a timer: it decides at
    // the tick, not after the averager's work below (a kill 0.2 s after a
    // periodic check is not seen by that check).
    if (cfg.coordinator.rebalance == "on" && now >= std::min(cfg.coordinator.rebalance_period_s, 10.0)) {
      const bool periodic =
          now - last_periodic >= cfg.coordinator.rebalance_period_s - 1e-9;  // ticks are sums of floats
      if (periodic)
        last_periodic = now;
      maybe_move(w, periodic);
    }
    if (w.coordinator_backlog_s > 0) {  // the servers' reports of the last tick (local platform only)
      const double owed = std::exchange(w.coordinator_backlog_s, 0.0);
      s4u::this_actor::exec_init(owed)->set_host(w.coordinator_cpu)->wait();
    }
    maybe_start_rounds(w, rounds);
    if (now - last_load >= load_every) {
      last_load = now;
      const auto loads = server_loads(w);
      const auto caps = policy::capacities(w.rebalance_cost, loads);
      std::vector<int64_t> count(static_cast<size_t>(cfg.stages), 0);
      for (const auto& l : loads)
        ++count[static_cast<size_t>(l.stage)];
      for (int s = 0; s < cfg.stages; ++s) {
        const int64_t servers = count[static_cast<size_t>(s)];
        w.emit("stage_load",
               {{"stage", int64_t{s}},
                {"servers", servers},
                {"capacity", caps[static_cast<size_t>(s)]},
                {"cost", w.rebalance_cost[static_cast<size_t>(s)]}},
               "coordinator");
      }
    }
    if (now - last_report >= cfg.report_every - 1e-9 || now >= cfg.duration) {
      const double span = std::max(now - last_report, 1e-9);
      const int64_t samples = w.samples();
      const double tps = static_cast<double>(samples - report_samples) * static_cast<double>(cfg.model.seq_len) / span;
      const double opt = (w.total.optimal_samples - report_optimal) * static_cast<double>(cfg.model.seq_len) / span;
      w.timeline.push_back({now, tps, opt});
      w.emit("sim_throughput",
             {{"tokens_per_s", tps},
              {"optimal_tokens_per_s", opt},
              {"share", opt > 0 ? tps / opt : std::nan("")},
              {"alive", int64_t{alive}},
              {"samples", samples}},
             "sim");
      if (!cfg.quiet)
        std::fprintf(stderr, "swarm-sim: %7.0f s simulated  %9.0f tokens/s  %5.1f%% of optimal  %d peers up\n", now,
                     tps, opt > 0 ? 100 * tps / opt : 0.0, alive);
      last_report = now;
      report_samples = samples;
      report_optimal = w.total.optimal_samples;
    }
  }
  finish(w);
}

}  // namespace swarm::sim
