// Machines going down and coming back: swarm --chaos kill's schedule, an
// exponential rate, or a preemption trace (sim/trace) laid over the peers.
// One actor walks a time-ordered list of switches; a machine that goes off
// takes its server with it, and the trainers waiting on it hear `down` at once, as swarm's monitors do.
#include <queue>

#include "sim/trace.hpp"
#include "sim/world.hpp"

namespace swarm::sim {

void peer_died(peer& p, const char* reason) {
  static outbox out;  // the churn actor's: it is the one calling
  auto& w = the_world();
  if (p.state == peer::off)
    return;
  const int stage = p.move_to >= 0 ? p.move_to : p.stage;
  if (p.state == peer::serving || p.state == peer::moving)
    w.forget(p.stage, p.name);
  const auto waiters = std::move(p.waiters);
  p.waiters.clear();
  p.state = peer::off;
  w.books.set_phase(p, phase::off, w.now());
  w.yardstick(true);
  p.move_to = -1;
  ++p.epoch;
  // The machine's actor dies; its host stays on in SimGrid, because starting a
  // transfer or an actor on a host that goes off in the same instant aborts
  // SimGrid 3.32. Transfers from a dead peer are judged by its epoch instead.
  if (p.actor)
    p.actor->kill();
  p.actor = nullptr;
  clear_queue(p);
  for (const auto& [box, attempt] : waiters)
    send(out, box, new reply{attempt, reply::down}, 0);
  ++w.total.downs;
  w.emit("server_down", {{"stage", int64_t{stage}}, {"server", p.name}, {"reason", std::string(reason)}},
         "coordinator");
}

namespace {

struct event {
  double t;
  int peer;
  bool up;
  bool operator>(const event& o) const { return t != o.t ? t > o.t : peer > o.peer; }
};

void bring_up(world& w, peer& p) {
  if (p.state != peer::off)
    return;
  ++w.total.joins;
  start_server(p, -1);
}

}  // namespace

void churn_main() {
  auto& w = the_world();
  const auto& cfg = w.cfg;
  std::priority_queue<event, std::vector<event>, std::greater<>> q;
  std::mt19937_64 rng(cfg.seed * 7919 + 17);
  if (cfg.churn == "rate") {
    std::exponential_distribution<double> up(1.0 / cfg.mtbf);
    for (auto& p : w.peers)
      q.push({up(rng), p.index, false});
  } else if (cfg.churn == "trace") {
    std::string error;
    auto trace = read_trace(cfg.trace, &error);  // checked in main
    auto slots = replay(*trace, static_cast<int>(w.peers.size()), cfg.trace_speedup, cfg.trace_jitter, rng);
    for (size_t i = 0; i < slots.size(); ++i)
      for (const auto& l : slots[i].up) {
        if (l.start > 0)
          q.push({l.start, static_cast<int>(i), true});
        if (std::isfinite(l.end))
          q.push({l.end, static_cast<int>(i), false});
      }
  } else if (cfg.churn == "replay") {
    for (const auto& a : w.replayed)  // (first joins: start_initial)
      if (a.stage < cfg.stages && !a.join)
        q.push({a.t, -2 - (a.stage * 1000000 + a.index), !a.kill});
  } else if (cfg.churn == "kill") {
    for (double t = cfg.churn_every; t < cfg.duration; t += cfg.churn_every)
      q.push({t, -1, false});
  }
  while (!q.empty() && q.top().t < cfg.duration) {
    const event e = q.top();
    q.pop();
    if (e.t > w.now())
      s4u::this_actor::sleep_until(e.t);
    if (e.peer <= -2) {  // replay: "server S.I" of the recorded cluster is the I-th peer started on stage S
      const int code = -2 - e.peer, stage = code / 1000000, index = code % 1000000;
      for (auto& p : w.peers) {
        if (p.initial_stage != stage || p.initial_index != index)
          continue;
        if (e.up) {
          bring_up(w, p);
        } else {
          w.emit("chaos", {{"action", std::string("kill")}, {"process", p.name}, {"pid", int64_t{p.index}}}, "cluster");
          peer_died(p, "killed");
        }
      }
      continue;
    }
    if (e.peer < 0) {  // kill: a random serving peer, back after churn_down
      std::vector<peer*> live;
      for (auto& p : w.peers)
        if (p.state == peer::serving)
          live.push_back(&p);
      if (live.empty())
        continue;
      peer* victim = live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)];
      w.emit("chaos", {{"action", std::string("kill")}, {"process", victim->name}, {"pid", int64_t{victim->index}}},
             "cluster");
      peer_died(*victim, "killed");
      q.push({w.now() + cfg.churn_down, victim->index, true});
      continue;
    }
    peer& p = w.peers[static_cast<size_t>(e.peer)];
    if (e.up) {
      bring_up(w, p);
    } else {
      peer_died(p, cfg.churn == "trace" ? "preempted" : "failed");
      if (cfg.churn == "rate") {
        std::exponential_distribution<double> down(1.0 / cfg.churn_down), up(1.0 / cfg.mtbf);
        const double back = w.now() + down(rng);
        q.push({back, p.index, true});
        q.push({back + up(rng), p.index, false});
      }
    }
  }
}

}  // namespace swarm::sim
