#include "actors/rebalancer.hpp"
#include "base/clock.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <caf/all.hpp>

#include "base/log.hpp"
#include "messages/local.hpp"
#include "messages/wire.hpp"

namespace swarm::rebalancer_local {
struct tick {};  ///< its own timer: evaluate the placement (every rebalance period, at most 5 s)
}  // namespace swarm::rebalancer_local

SWARM_LOCAL_MESSAGE(swarm::rebalancer_local::tick)

namespace swarm {

namespace {

using self_ptr = rebalancer_actor::stateful_pointer<rebalancer_state>;

double now_s(self_ptr self) { return seconds_since(self->state.started); }

/// The moves' rule: the coordinator's, its cooldown two load periods.
policy::rebalance_config rule(const rebalancer_state& st) {
  return policy::periodic_rule(st.cfg.coordinator.moves, st.cfg.coordinator.rebalance_period_s);
}

/// A rate measured on stage `from`, as predicted on stage `to` (NaN stays NaN).
double rate_on(const rebalancer_settings& cfg, double rate, int from, int to) {
  return rate * cfg.stage_cost[static_cast<size_t>(from)] / cfg.stage_cost[static_cast<size_t>(to)];
}

/// The policy's view: a mover already on the stage it goes to, a placed server on its stage.
std::vector<policy::server_load> view(self_ptr self) {
  const auto& st = self->state;
  std::vector<policy::server_load> out;
  for (const auto& [id, s] : st.servers) {
    if (!s.moving_to) {
      out.push_back({id, s.stage, s.rate, s.settled_at});
      continue;
    }
    out.push_back({id, *s.moving_to, rate_on(st.cfg, s.rate, s.stage, *s.moving_to), s.move_sent});
  }
  for (const auto& [id, p] : st.placed)
    out.push_back({id, p.stage, std::nan(""), p.when});
  return out;
}

/// Records the cooldowns in etcd when they changed (elected only).
void record_cooldowns(self_ptr self) {
  auto& st = self->state;
  if (!st.cfg.leader)
    return;
  rebalancer_record now;
  if (std::isfinite(st.last_load_check))
    now.last_load_move = st.started_unix + st.last_load_check;
  for (const auto& [id, s] : st.servers)
    if (std::isfinite(s.settled_at))
      now.movers[id] = st.started_unix + s.settled_at;
  if (now.last_load_move == st.recorded.last_load_move && now.movers == st.recorded.movers)
    return;
  st.recorded = now;
  record(st.cfg.leader, rebalancer_key, encode_record(now));
}

void order_move(self_ptr self, const policy::move_plan& m) {
  if (!may_order(self->state.cfg.leader))
    return;
  auto& s = self->state.servers.at(m.server);
  s.moving_to = m.to;
  s.move_sent = now_s(self);
  get_logger("rebalancer")
      ->info("stage {} -> {}: moving {} ({}): slowest stage {:.1f} -> {:.1f} samples/s predicted", m.from, m.to,
             m.server, policy::to_string(m.reason), m.bottleneck_before, m.bottleneck_after);
  proto::move_order order;
  order.set_stage(static_cast<uint32_t>(m.from));
  order.set_to_stage(static_cast<uint32_t>(m.to));
  order.set_reason(policy::to_string(m.reason));
  order.set_predicted_gain(m.gain);
  order.set_term(term_of(self->state.cfg.leader));
  self->send(caf::actor_cast<stage_actor>(s.handle), move_atom::value, wrap(order));
}

/// Orders what the policy says now. `tick`: load moves are allowed if a period passed.
void evaluate(self_ptr self, bool tick) {
  auto& st = self->state;
  const double now = now_s(self);
  if (st.cfg.coordinator.rebalance != "on" || now < st.cfg.settle_s)
    return;
  // Each order changes the view; stop when the policy is content (bounded: each server moves once at most here).
  for (size_t i = 0; i <= st.servers.size(); ++i) {
    const bool busy =
        std::any_of(st.servers.begin(), st.servers.end(), [](const auto& s) { return s.second.moving_to.has_value(); });
    const bool periodic = tick && !busy && now - st.last_load_check >= st.cfg.coordinator.rebalance_period_s;
    if (periodic) {
      st.last_load_check = now;
      record_cooldowns(self);
    }
    const auto m = policy::plan_move(st.cfg.stage_cost, view(self), now, periodic, rule(st));
    // One move at a time, but an empty stage does not wait; a placed server that
    // has not registered yet cannot be told anything.
    if (!m || (busy && m->reason != policy::move_reason::empty) || st.servers.count(m->server) == 0)
      return;
    order_move(self, *m);
  }
}

/// Rates over the busy time since the last measurement, once it is long enough.
void measure(self_ptr self) {
  for (auto& [id, s] : self->state.servers) {
    const double busy = s.busy_s - s.window_busy_s;
    if (busy < self->state.cfg.min_busy_s)
      continue;
    s.rate = static_cast<double>(s.committed - s.window_committed) / busy;
    s.window_busy_s = s.busy_s;
    s.window_committed = s.committed;
  }
}

void forget_stale(self_ptr self) {
  auto& st = self->state;
  const double now = now_s(self);
  for (auto it = st.placed.begin(); it != st.placed.end();)
    it = now - it->second.when > st.cfg.move_timeout_s ? st.placed.erase(it) : std::next(it);
  for (auto& [id, s] : st.servers)
    if (s.moving_to && now - s.move_sent > st.cfg.move_timeout_s) {
      get_logger("rebalancer")
          ->warn("{} did not arrive on stage {} within {:.0f} s; counting it on stage {} again", id, *s.moving_to,
                 st.cfg.move_timeout_s, s.stage);
      s.moving_to.reset();
    }
}

void on_tick(self_ptr self) {
  auto& st = self->state;
  measure(self);
  forget_stale(self);
  const auto servers = view(self);
  const auto caps = policy::capacities(st.cfg.stage_cost, servers);
  for (size_t stage = 0; stage < caps.size(); ++stage) {
    const auto n = std::count_if(servers.begin(), servers.end(),
                                 [&](const policy::server_load& s) { return s.stage == static_cast<int>(stage); });
    st.metrics->emit("stage_load", {{"stage", static_cast<int64_t>(stage)},
                                    {"servers", static_cast<int64_t>(n)},
                                    {"capacity", caps[stage]},
                                    {"cost", st.cfg.stage_cost[stage]}});
  }
  evaluate(self, true);
}

void on_join(self_ptr self, const encoded<proto::register_server>& bytes, const caf::actor& handle) {
  auto& st = self->state;
  auto reg = decode(bytes);
  if (!reg || !handle || static_cast<int>(reg->stage()) >= st.cfg.num_stages)
    return;
  const int stage = static_cast<int>(reg->stage());
  const double now = now_s(self);
  st.placed.erase(reg->server_id());
  auto [it, fresh] = st.servers.try_emplace(reg->server_id());
  auto& s = it->second;
  if (fresh || s.handle != handle) {
    self->monitor(handle);
    s = {};
    s.handle = handle;
    s.settled_at = -std::numeric_limits<double>::infinity();  // a newcomer may move at once: only movers cool down
    if (st.cfg.resume)                                        // a mover of the predecessor's still cools down
      if (auto m = st.cfg.resume->movers.find(reg->server_id()); m != st.cfg.resume->movers.end())
        s.settled_at = m->second - st.started_unix;
  } else if (s.stage == stage && !s.moving_to) {
    return;  // registered again (its coordinator connection had dropped), same stage
  } else {
    // It arrived on another stage: what it did on the old one predicts its rate here.
    s.rate = rate_on(st.cfg, s.rate, s.stage, stage);
    s.moving_to.reset();
    s.busy_s = s.window_busy_s = 0;
    s.committed = s.window_committed = 0;
    s.settled_at = now;
  }
  s.stage = stage;
  record_cooldowns(self);
  evaluate(self, false);
}

void on_progress(self_ptr self, const encoded<proto::progress_report>& bytes) {
  auto rep = decode(bytes);
  if (!rep)
    return;
  auto it = self->state.servers.find(rep->server_id());
  if (it == self->state.servers.end() || it->second.stage != static_cast<int>(rep->stage()) ||
      !std::isfinite(rep->busy_seconds()) || rep->busy_seconds() < 0)
    return;
  auto& s = it->second;
  if (rep->busy_seconds() < s.window_busy_s || rep->committed_samples() < s.window_committed)
    s.window_busy_s = 0, s.window_committed = 0;  // it began its stage anew
  s.busy_s = rep->busy_seconds();
  s.committed = rep->committed_samples();
}

caf::result<encoded<proto::placement>> on_place(self_ptr self, const encoded<proto::placement_request>& bytes) {
  auto& st = self->state;
  auto req = decode(bytes);
  if (!req)
    return req.error();
  if (req->server_id().empty())
    return make_error(errc::BAD_REQUEST, "placement_request without a server id");
  if (!may_order(st.cfg.leader))
    return make_error(errc::PEER_GONE, "this coordinator's lease ran out: ask the new leader");
  // Delegated by the coordinator: the sender is the joining server's process.
  const auto node = self->current_sender() ? self->current_sender()->node() : caf::node_id{};
  for (auto it = st.placed.begin(); it != st.placed.end();)
    it = it->second.node == node ? st.placed.erase(it) : std::next(it);
  const auto p = policy::place_joiner(st.cfg.stage_cost, view(self), rule(st));
  if (st.placed.size() < rebalancer_state::max_placed)
    st.placed[req->server_id()] = {p.to, now_s(self), node};
  get_logger("rebalancer")
      ->info("placing new server {} on stage {}: slowest stage {:.1f} -> {:.1f} samples/s predicted", req->server_id(),
             p.to, p.bottleneck_before, p.bottleneck_after);
  proto::placement out;
  out.set_stage(static_cast<uint32_t>(p.to));
  out.set_predicted_gain(p.gain);
  out.set_term(term_of(st.cfg.leader));
  return wrap(out);
}

}  // namespace

rebalancer_actor::behavior_type rebalancer(self_ptr self, rebalancer_settings cfg,
                                           std::shared_ptr<metrics_sink> metrics) {
  auto& st = self->state;
  if (cfg.stage_cost.size() != static_cast<size_t>(cfg.num_stages) ||
      std::any_of(cfg.stage_cost.begin(), cfg.stage_cost.end(), [](double c) { return !(c > 0); }))
    cfg.stage_cost.assign(static_cast<size_t>(std::max(cfg.num_stages, 0)), 1.0);  // no model given: equal stages
  st.cfg = std::move(cfg);
  st.metrics = std::move(metrics);
  st.started = rebalancer_state::clock::now();
  st.started_unix = unix_seconds();
  if (st.cfg.resume) {
    if (st.cfg.resume->last_load_move > 0)
      st.last_load_check = st.cfg.resume->last_load_move - st.started_unix;
    st.recorded = *st.cfg.resume;
  }
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& servers = self->state.servers;
    for (auto it = servers.begin(); it != servers.end(); ++it)
      if (it->second.handle.address() == msg.source) {
        servers.erase(it);
        // A crash is answered at once; a server stopped on purpose at the next
        // tick, so a whole swarm shutting down does not shuffle its last servers.
        if (!stopped_on_purpose(msg.reason))
          evaluate(self, false);
        return;
      }
  });
  handle_local(self, [self](rebalancer_local::tick) {
    on_tick(self);
    send_later(self, seconds(std::min(self->state.cfg.coordinator.rebalance_period_s, 5.0)), rebalancer_local::tick{});
  });
  send_self(self, rebalancer_local::tick{});
  return {
      // From its coordinator and averager, in this process (they checked the sender).
      [self](join_atom, const encoded<proto::register_server>& bytes, const caf::actor& handle) {
        if (sent_from(self, self->node(), "rebalancer", "coordinator", "join"))
          on_join(self, bytes, handle);
      },
      [self](progress_atom, const encoded<proto::progress_report>& bytes) {
        if (sent_from(self, self->node(), "rebalancer", "averager", "progress report"))
          on_progress(self, bytes);
      },
      [self](place_atom, const encoded<proto::placement_request>& bytes) { return on_place(self, bytes); },
  };
}

}  // namespace swarm
