#include "sim/world.hpp"

#include "sim/optimal.hpp"

namespace swarm::sim {

world& the_world() {
  static world w;
  return w;
}

void world::emit(const char* event, std::initializer_list<metrics_sink::field> fields, const char* role) {
  if (metrics.is_open())
    metrics << metrics_sink::format(now(), role, event, fields);
}

void world::emit(const char* event, const std::vector<metrics_sink::field>& fields, const char* role) {
  if (metrics.is_open())
    metrics << metrics_sink::format(now(), role, event, fields);
}

int64_t world::samples() const {
  int64_t n = 0;
  for (const auto& t : trainers)
    n += t.samples;
  return n;
}

std::vector<peer*> world::serving(int stage) {
  std::vector<peer*> out;
  for (auto& p : peers)
    if (p.state == peer::serving && p.stage == stage && !p.banned)
      out.push_back(&p);
  return out;
}

void world::forget(int stage, const std::string& name) {
  std::vector<std::string> present;
  for (auto& t : trainers) {
    t.routers[static_cast<size_t>(stage)].remove(name);
    auto& pin = t.pins[static_cast<size_t>(stage)];
    if (pin.pinned() != name)
      continue;
    if (present.empty())
      for (peer* p : serving(stage))
        present.push_back(p->name);
    pin.gone(name, present);
  }
}

peer* world::state_source(int stage, const peer* except) {
  peer* best = nullptr;
  for (auto& p : peers)
    if (&p != except && p.state == peer::serving && p.stage == stage && (!best || p.uploads < best->uploads))
      best = &p;
  return best;
}

void world::yardstick(bool changed) {
  const double dt = now() - yardstick_at;
  total.optimal_samples += best_rate * dt;
  total.fluid_samples += fluid_rate * dt;
  total.alive_peer_seconds += alive_now * dt;
  yardstick_at = now();
  if (!changed)
    return;
  std::vector<double> speeds, per_sample;
  for (const auto& p : peers)
    if (p.state != peer::off)
      speeds.push_back(p.speed / p.slowdown);
  for (int s = 0; s < cfg.stages; ++s)
    per_sample.push_back(seconds_per_sample(s));
  const auto best = best_assignment(per_sample, speeds);
  best_rate = best.greedy;
  fluid_rate = best.fluid;
  alive_now = static_cast<int>(speeds.size());
}

double world::seconds_per_sample(int stage) const {
  const auto& c = costs[static_cast<size_t>(stage)];
  return (c.forward_s + c.backward_s) / static_cast<double>(cfg.model.microbatch);
}

void send(outbox& out, s4u::Mailbox* box, reply* r, double bytes) {
  // What arrived is waited for, not tested: SimGrid 3.32's test() leaves it
  // in the sender's list of activities, which then grew by one per message
  // and was scanned at every completion.
  // (A message is a byte at least, so one still on its way has some left.)
  while (!out.empty() && out.front()->get_remaining() <= 0) {
    try {
      out.front()->wait();
    } catch (const simgrid::Exception&) {
    }
    out.pop_front();
  }
  out.push_back(box->put_async(r, static_cast<uint64_t>(std::max(bytes, 1.0))));
}

void deliver(peer& p, request* r) {
  r->ready_at = the_world().now() + r->delay_s;
  if (r->kind != request::move && p.stage >= 0) {
    r->queued_on = p.stage;
    the_world().books.queued(p.stage, +1, the_world().now());
  }
  p.queue.push_back(r);
  p.arrived->release();
}

void unqueue(const request& r) {
  if (r.queued_on >= 0)
    the_world().books.queued(r.queued_on, -1, the_world().now());
}

void clear_queue(peer& p) {
  for (request* r : p.queue) {
    unqueue(*r);
    delete r;
  }
  p.queue.clear();
  p.arrived = s4u::Semaphore::create(0);
}

bool transfer(s4u::Host* from, s4u::Host* to, double bytes, double timeout) {
  try {
    s4u::Comm::sendto_async(from, to, static_cast<uint64_t>(bytes))->wait_for(timeout);
    return true;
  } catch (const simgrid::Exception&) {  // an end died mid-way, or it timed out
    return false;
  }
}

}  // namespace swarm::sim
