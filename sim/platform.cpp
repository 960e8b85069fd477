// The simulated machines and network.
//   wan:   a Vivaldi zone: every host has its own up and down link (the peer's
//          access bandwidth); latency between two hosts is the distance of
//          their coordinates plus their heights. Regions sit on a circle so
//          neighbouring regions are region-latency apart; each host's height is
//          half the in-region latency.
//   local: the same zone with loopback links and ~0 latency, plus one host
//          of `cores` cores on which every server computes: the processes of a
//          `swarm --role cluster` on one machine share its cores.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/world.hpp"

namespace swarm::sim {

namespace {

s4u::Host* add_host(s4u::NetZone* zone, const std::string& name, double speed, double bytes_per_s,
                    const std::string& coords, int cores = 1, bool shared = true) {
  s4u::Host* h = zone->create_host(name, speed);
  h->set_core_count(cores);
  h->set_coordinates(coords);
  h->seal();
  if (!shared)
    return h;  // no access link: flows to and from it are limited by the other end only
  auto* up = zone->create_link(name + "_up", bytes_per_s)->seal();
  auto* down = zone->create_link(name + "_down", bytes_per_s)->seal();
  zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, {s4u::LinkInRoute(up)}, false);
  zone->add_route(nullptr, h->get_netpoint(), nullptr, nullptr, {s4u::LinkInRoute(down)}, false);
  return h;
}

/// One end of a machine's all-reduce flows: the machine's end sends up and
/// takes what comes down, the hub's end the reverse; both start both at once
/// (links are full duplex) and give up at the round's deadline.
void run_flows(const std::shared_ptr<flow_end>& end, s4u::Mailbox* out, s4u::Mailbox* in, bool near) {
  static char token;
  for (;;) {
    end->ready->acquire();
    const auto flow = end->rounds.front();
    end->rounds.pop_front();
    char* got = nullptr;
    if (s4u::Engine::get_clock() < flow->deadline) {
      try {
        auto recv = in->get_async<char>(&got);
        auto sent = out->put_async(&token, flow->bytes);
        recv->wait_for(std::max(flow->deadline - s4u::Engine::get_clock(), 0.0));
        sent->wait_for(std::max(flow->deadline - s4u::Engine::get_clock(), 0.0));
      } catch (const simgrid::Exception&) {  // cut at the deadline, or the other end was
      }
    }
    if (near)
      flow->done->release();
  }
}

/// Each machine's permanent actors (machines never go off in SimGrid here,
/// see peer_died): the two ends of its all-reduce flows and its receiver.
void start_machine_actors(world& w) {
  for (auto& p : w.peers) {
    auto* up = s4u::Mailbox::by_name("up" + std::to_string(p.index));
    auto* down = s4u::Mailbox::by_name("down" + std::to_string(p.index));
    s4u::Actor::create("flows" + std::to_string(p.index), p.host,
                       [end = p.near_end, up, down] { run_flows(end, up, down, true); });
    s4u::Actor::create("hub" + std::to_string(p.index), w.hub,
                       [end = p.hub_end, up, down] { run_flows(end, down, up, false); });
    // The receiver takes every request as its bytes arrive (so transfers to one
    // machine run side by side) and queues it for whichever server lives there.
    s4u::Actor::create("nic" + std::to_string(p.index), p.host, [pp = &p] {
      pp->inbox->set_receiver(s4u::Actor::self());
      for (;;) {
        try {
          deliver(*pp, pp->inbox->get<request>());
        } catch (const simgrid::Exception&) {  // its sender gave up on it mid-way (and deleted it)
        }
      }
    });
  }
}

}  // namespace

void build_platform(world& w) {
  const auto& c = w.cfg;
  const bool local = c.platform == "local";
  auto* zone = s4u::create_vivaldi_zone("swarm");
  const double pi = std::acos(-1.0);
  const double radius = c.regions > 1 ? c.region_latency_ms / (2 * std::sin(pi / c.regions)) : 0;
  const auto coords = [&](int region) {
    if (local)
      return std::string("0 0 0.01");
    const double a = 2 * pi * region / c.regions;
    return std::to_string(radius * std::cos(a)) + " " + std::to_string(radius * std::sin(a)) + " " +
           std::to_string(c.local_latency_ms / 2);
  };
  const double peer_bw = local ? c.loopback_gbps * 1e9 / 8 : c.bandwidth_mbps * 1e6 / 8;
  w.coordinator_host = add_host(zone, "coordinator", 1, peer_bw, coords(0), 1, local);
  s4u::Host* machine = nullptr;
  if (local) {
    machine = add_host(zone, "machine", 1, peer_bw, coords(0), c.cores);
  }
  w.coordinator_cpu = local ? machine : w.coordinator_host;
  w.hub = add_host(zone, "allreduce-hub", 1, peer_bw, local ? coords(0) : "0 0 0", 1, false);
  std::lognormal_distribution<double> spread(0.0, c.speed_spread);
  const auto slow = number_list(c.slowdowns).value_or(std::vector<double>{});
  for (int i = 0; i < c.peers; ++i) {
    peer p;
    p.index = i;
    p.region = i % c.regions;
    p.speed = c.speed * (c.speed_spread > 0 ? spread(w.rng) : 1.0);
    p.slowdown = slow.empty() ? 1.0 : slow[static_cast<size_t>(i) % slow.size()];
    p.host = add_host(zone, "peer" + std::to_string(i), local ? 1 : p.speed, peer_bw, coords(p.region));
    p.cpu = local ? machine : p.host;
    p.arrived = s4u::Semaphore::create(0);
    p.inbox = s4u::Mailbox::by_name("peer" + std::to_string(i));
    w.peers.push_back(p);
  }
  // --liars: that share of the peers, drawn under the seed, answers wrongly
  // (issue #47). Without liars the engine is left alone: runs stay as they were.
  if (c.liars > 0) {
    std::vector<size_t> order(w.peers.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), w.rng);
    const auto liars = static_cast<size_t>(std::llround(c.liars * static_cast<double>(w.peers.size())));
    for (size_t i = 0; i < liars && i < order.size(); ++i)
      w.peers[order[i]].liar = true;
  }
  for (int i = 0; i < c.cluster.trainers; ++i) {
    trainer_state t;
    t.index = i;
    t.name = "t" + std::to_string(i);
    // On wan, trainers (and the coordinator) have no access link: in SimGrid all flows through one
    // link form one sharing problem, and a trainer talks to every stage, so
    // trainer links made the whole swarm one problem re-solved at every
    // transfer (most of the run time at 1,000 peers). Trainers are assumed
    // well connected (datacenter machines); the peers' links limit the flows.
    t.host = add_host(zone, "trainer" + std::to_string(i), 1, peer_bw, coords(i % c.regions), 1, local);
    t.cpu = local ? machine : t.host;
    w.trainers.push_back(std::move(t));
  }
  zone->seal();
  start_machine_actors(w);
  // The one machine's load, averaged over about a second, for the load-dependent
  // CPU per request (calibration light-scale): sampled 10 times a second.
  if (local)
    s4u::Actor::create("load-meter", machine, [&w, machine] {
      const double every = 0.1, weight = 1 - std::exp(-every / 1.0);
      for (;;) {
        s4u::this_actor::sleep_for(every);
        w.machine_load += weight * (machine->get_load() / machine->get_core_count() - w.machine_load);
      }
    })->daemonize();
}

}  // namespace swarm::sim
