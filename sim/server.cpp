// A stage server's life on its machine (swarm's actors/stage_server*):
//   joining -> serving -> (moving -> serving)* ... until its machine goes off.
// Joining and moving copy the stage's state from a live peer of it over the
// network (the state's bytes), as swarm's join path does. Serving takes
// requests in arrival order, computes them on the host's cores (SimGrid shares
// a multi-core host between concurrent computations) and answers; requests for
// a stage it left are answered `leaving`, as swarm's LEAVING.
#include <cmath>
#include <limits>

#include "sim/world.hpp"

namespace swarm::sim {

namespace {

/// Copies `stage`'s state from a live peer; false when nobody holds it or `p`
/// left the life it started the copy in.
bool copy_state(world& w, peer& p, int stage) {
  const uint64_t own_life = p.epoch;
  for (int attempt = 0; attempt < 3 && p.epoch == own_life; ++attempt) {
    peer* from = w.state_source(stage, &p);
    if (!from)
      return false;
    const double bytes = w.costs[static_cast<size_t>(stage)].state_bytes;
    const uint64_t life = from->epoch;
    ++from->uploads;
    const bool arrived = transfer(from->host, p.host, bytes, 60 + bytes / 1e5);  // 100 kB/s at worst
    --from->uploads;
    if (arrived && from->epoch == life && p.epoch == own_life) {
      // Exported there and imported here: the importing side's cores are what it costs here.
      if (w.costs[static_cast<size_t>(stage)].state_s > 0)
        s4u::this_actor::exec_init(w.costs[static_cast<size_t>(stage)].state_s)->set_host(p.cpu)->wait();
      if (p.epoch != own_life)
        return false;
      p.step = w.stage_step[static_cast<size_t>(stage)];
      return true;
    }
    // The source died mid-copy: take another.
  }
  return false;
}

void answer(outbox& out, request* r, reply::status_t status, double bytes, double served_s = 0) {
  send(out, r->reply_to, new reply{r->attempt, status, served_s}, bytes);
}

/// Takes `stage`: state copied, routers told. `from` is -1 for a join.
void settle(world& w, peer& p, int from, int stage, policy::move_reason why, double since, double gain,
            bool initial = false) {
  w.books.set_phase(p, phase::copying, w.now());
  p.state = from < 0 ? peer::joining : peer::moving;
  p.stage = stage;
  p.in_round = 0;                                           // rounds of its old stage or life end without it
  p.admission = policy::admission(w.cfg.server.admission);  // grants of its old stage or life are void
  const bool copied = !initial && copy_state(w, p, stage);
  if (!copied)
    p.step = w.stage_step[static_cast<size_t>(stage)];
  p.state = peer::serving;
  w.books.set_phase(p, phase::idle, w.now());
  p.reloading = false;
  // As swarm's rebalancer: a newcomer may move at once; a mover's old rate,
  // scaled by the stages' costs, stands for it until it is measured here.
  p.settled_at = from < 0 ? -std::numeric_limits<double>::infinity() : w.now();
  p.carried_rate = from >= 0 ? moved_rate(w, p, from, stage) : std::nan("");
  p.busy_s = p.samples_done = 0;
  p.accumulated = 0;
  if (p.home_stage < 0)
    p.home_stage = stage;
  // (Static routing draws its pins from the same engine: its routers are kept but unused.)
  const bool draws = !w.cfg.trainer.attempts.pinned;
  for (auto& t : w.trainers)
    t.routers[static_cast<size_t>(stage)].add(p.name, w.now(), draws ? &t.rng : nullptr);
  w.server_joined[static_cast<size_t>(stage)]->notify_all();
  w.emit("server_join",
         {{"stage", int64_t{stage}}, {"server", p.name}, {"host", p.host->get_name()}, {"port", int64_t{0}}},
         "coordinator");
  if (since >= 0)
    w.emit("rebalance",
           {{"server", p.name},
            {"from", int64_t{from}},
            {"to", int64_t{stage}},
            {"reason", std::string(policy::to_string(why))},
            {"predicted_gain", gain},
            {"seconds", w.now() - since},
            {"state_copied", copied},
            {"state_from", std::string(copied ? "peer" : "initial")}},
           "server");
}

void leave_stage(world& w, peer& p, outbox& out) {
  w.forget(p.stage, p.name);
  ++p.epoch;
  // Anyone waiting on this life hears `leaving` now (swarm: the LEAVE to load balancers).
  for (auto& [box, attempt] : p.waiters)
    send(out, box, new reply{attempt, reply::leaving}, 0);
  p.waiters.clear();
}

/// The rebalancer's order that `p` waited for in its queue: to its new stage.
void move(world& w, peer& p, outbox& out) {
  const int from = p.stage, to = p.move_to;
  const double ordered = p.ordered_at, gain = p.predicted_gain;
  const auto reason = p.move_reason;
  if (to < 0 || to == from)
    return;
  w.emit("server_exit", {{"stage", int64_t{from}}, {"server", p.name}, {"served", p.served}, {"moved_to", int64_t{to}}},
         "server");
  leave_stage(w, p, out);
  p.move_to = -1;
  settle(w, p, from, to, reason, ordered, gain);
}

/// Computes request `r` at `p` (its books and counters kept); the seconds it took.
double compute(world& w, peer& p, request& r) {
  const auto& c = w.costs[static_cast<size_t>(p.stage)];
  const auto& cfg = w.cfg;
  // On the one machine a request costs what the real servers were measured
  // to spend per request (its stage's cluster-scale x model and codec, less
  // on a lightly loaded machine), sharing its cores.
  const bool local = cfg.platform == "local";
  const double work = (r.kind == request::forward ? c.forward_s : c.backward_s) *
                      (local ? cluster_scale(w.cal, p.stage, w.machine_load) : 1);
  const double t0 = w.now();
  w.books.set_phase(p, phase::busy, t0);
  // The cpu host's speed is this peer's speed in calibrated core-seconds per second.
  s4u::this_actor::exec_init(work)->set_host(p.cpu)->wait();
  if (p.slowdown > 1)
    s4u::this_actor::sleep_for((p.slowdown - 1) * (w.now() - t0));
  if (r.verify)
    w.books.verified(p, t0, w.now());
  else
    w.books.computed(p, t0, w.now(), r.books, r.attempt);
  p.admission.done(r.ticket);
  w.books.set_phase(p, phase::idle, w.now());
  if (local)
    w.coordinator_backlog_s += w.cal.coordinator_s_per_request;  // its report to the averager
  p.busy_s += w.now() - t0;
  ++p.served;
  const bool adds = !r.verify && (r.kind == request::backward || p.stage == cfg.stages - 1);
  // Its rate counts a forward as the share of a sample's work it is, so a
  // stage filling with forwards (whose backwards come later) is not taken
  // for a slow one.
  const double whole = c.forward_s + c.backward_s;
  p.samples_done += static_cast<double>(r.samples) *
                    (whole > 0 ? (r.kind == request::forward ? c.forward_s : c.backward_s) / whole : 1.0);
  if (adds)
    p.accumulated += r.samples;
  return w.now() - t0;
}

void serve(peer* pp, int stage) {
  auto& w = the_world();
  peer& p = *pp;
  clear_queue(p);  // what was sent to an earlier life
  const bool initial = stage >= 0;
  if (!initial) {  // a process starting: its start-up, then where the coordinator places it
    const double up = w.now();
    if (w.cfg.start_cpu_s > 0)
      s4u::this_actor::exec_init(w.cfg.start_cpu_s)->set_host(p.cpu)->wait();
    if (w.now() < up + w.cfg.start_s)
      s4u::this_actor::sleep_until(up + w.cfg.start_s);
    stage = place(p);
  }
  settle(w, p, -1, stage, policy::move_reason::join, initial ? -1 : w.now(), std::nan(""), initial);
  // A live server process's own CPU (CAF's scheduler, heartbeats), measured by
  // scripts/calibrate.sh; on the one machine it takes cores from the others.
  // Owned by this actor, so it stops when the server dies.
  s4u::ExecPtr idle;
  if (w.cfg.platform == "local" && w.cal.server_idle_cores > 0)
    idle = s4u::this_actor::exec_init(1e15)->set_host(p.cpu)->set_bound(w.cal.server_idle_cores)->start();
  const auto& cfg = w.cfg;
  outbox out;
  for (;;) {
    p.arrived->acquire();
    request* r = p.queue.front();
    p.queue.pop_front();
    unqueue(*r);
    if (r->epoch != p.epoch) {  // sent to an earlier life or before a move: that sender was told already
      delete r;
      continue;
    }
    if (r->kind == request::move) {
      delete r;
      move(w, p, out);
      continue;
    }
    // It would have arrived later, after its asks (request::delay_s).
    if (w.now() < r->ready_at)
      s4u::this_actor::sleep_until(r->ready_at);
    if (w.now() > r->commit_by) {  // its sender gives up on it before it could be committed: swarm refuses it
      p.admission.done(r->ticket);
      ++p.late;
      delete r;
      continue;
    }
    if (p.state != peer::serving || r->stage != p.stage) {
      p.admission.done(r->ticket);
      answer(out, r, reply::leaving, 64);
      delete r;
      continue;
    }
    const double served_s = compute(w, p, *r);
    answer(out, r, reply::ok, r->reply_bytes, served_s);
    delete r;
  }
}

}  // namespace

void start_reload(peer& p) {
  if (p.reloading)
    return;
  p.reloading = true;
  s4u::Actor::create("reload", p.host, [pp = &p, life = p.epoch, stage = p.stage] {
    auto& w = the_world();
    peer& p = *pp;
    // It goes on serving meanwhile (swarm does); what it adds is dropped with its old state.
    copy_state(w, p, stage);
    if (p.epoch != life)
      return;  // it died or moved meanwhile: that life's state is gone anyway
    p.step = w.stage_step[static_cast<size_t>(stage)];
    p.accumulated = 0;
    p.reloading = false;
    ++w.total.reloads;
  });
}

void start_server(peer& p, int stage) {
  ++p.life;
  ++p.epoch;
  p.banned = false;  // a new process: a new name, which no trainer has caught yet
  p.name = "s" + std::to_string(p.index) + "." + std::to_string(p.life);
  p.state = peer::joining;
  p.stage = stage;  // -1 until placed
  p.in_round = 0;
  the_world().books.set_phase(p, phase::starting, the_world().now());
  the_world().yardstick(true);
  p.actor = s4u::Actor::create(p.name, p.host, [pp = &p, stage] { serve(pp, stage); });
}

}  // namespace swarm::sim
