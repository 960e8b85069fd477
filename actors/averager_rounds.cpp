// The averager's rounds (actors/averager.hpp): when a stage's round starts,
// who is excluded, how it ends, and the reload orders that bring a server
// back to its stage's step and parameters. The messages that drive them are
// actors/averager.cpp's.
#include "actors/averager_rounds.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>

#include "actors/stage_server.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "messages/wire.hpp"

namespace swarm::averaging {

namespace {

/// Whether `stage` is untrained as far as anyone can tell: every server of it
/// reported step 0 (a fresh swarm, not a restart, where servers report the
/// steps they reached). Then there is no position to rebuild and no reason to
/// wait out the settle time: on a fast machine a short run ended inside it,
/// its first step taking every sample computed meanwhile.
bool fresh_stage(const averager_state& st, uint32_t stage) {
  if (st.stages[stage].position.step != 0)
    return false;
  bool any = false;
  for (const auto& [addr, s] : st.servers)
    if (s.stage == stage) {
      if (!s.view.reported || s.view.step != 0)
        return false;
      any = true;
    }
  return any;
}

/// Whether every server the predecessor recorded for `stage` has reported to
/// this averager: then it knows the stage as well as after settle_s.
bool resumed_all_reported(const averager_state& st, uint32_t stage) {
  const auto& ids = st.stages[stage].resumed_members;
  if (ids.empty())
    return false;
  for (const auto& id : ids) {
    const bool heard = std::any_of(st.servers.begin(), st.servers.end(), [&](const auto& s) {
      return s.second.stage == stage && s.second.view.id == id && s.second.view.reported;
    });
    if (!heard)
      return false;
  }
  return true;
}

/// Calls maybe_start again at `when` unless an earlier call is already due:
/// what it waits for may send nothing (a stopping server waits silently for
/// the round that takes its gradient).
void recheck_at(self_ptr self, uint32_t stage, averager_state::clock::time_point when) {
  auto& due = self->state.stages[stage].recheck_at;
  if (due && *due <= when)
    return;
  due = when;
  const auto delay = std::max(when - averager_state::clock::now(), averager_state::clock::duration::zero());
  send_later(self, delay + std::chrono::milliseconds(1), averager_local::recheck{stage});
}

/// The members' round_begin for round `r` of `stage`, members not yet listed.
proto::round_begin round_begin_of(const averager_state& st, uint32_t stage, const round_t& r) {
  proto::round_begin begin;
  begin.set_stage(stage);
  begin.set_round(r.id);
  begin.set_number(r.number);
  begin.set_step(r.step);
  begin.set_timeout_s(st.cfg.coordinator.averaging_timeout_s);
  begin.set_piece_elements(static_cast<uint64_t>(st.cfg.piece_elements));
  double others = 0;  // the other stages' squared gradient norms: the global clip's
  for (size_t k = 0; k < st.stages.size(); ++k)
    if (k != stage)
      others += st.stages[k].grad_norm_sq;
  begin.set_other_norm_sq(others);
  begin.set_term(term_of(st.cfg.leader));
  const auto& c = st.cfg.coordinator;
  begin.set_clip(c.aggregation == "centered-clip");
  begin.set_clip_radius(c.clip_radius);
  begin.set_clip_iterations(static_cast<uint32_t>(c.clip_iterations));
  return begin;
}

}  // namespace

std::optional<size_t> rank_of(const round_t& r, const caf::actor_addr& a) {
  for (size_t i = 0; i < r.members.size(); ++i)
    if (r.members[i] == a)
      return i;
  return std::nullopt;
}

void record_stage(self_ptr self, uint32_t stage) {
  auto& st = self->state;
  if (!st.cfg.leader)
    return;
  auto& sg = st.stages[stage];
  stage_record now{sg.position.step, sg.position.hash, {}};
  for (const auto& [addr, s] : st.servers)
    if (s.stage == stage)
      now.members.push_back(s.view.id);
  std::sort(now.members.begin(), now.members.end());
  if (sg.recorded && *sg.recorded == now)
    return;
  sg.recorded = now;
  record(st.cfg.leader, stage_key(stage), encode_record(now));
}

void order_reload(self_ptr self, averager_state::server& whom, const char* reason) {
  auto& st = self->state;
  const auto now = averager_state::clock::now();
  if (whom.reload_pending && now - whom.reload_sent < seconds(st.cfg.coordinator.averaging_timeout_s))
    return;
  // A server turns an order down while a round of its own runs (it may wait
  // up to the timeout for a frozen member) and says so at once; asking again
  // at once made a storm of thousands of orders a second. Once a second is enough.
  if (now - whom.reload_sent < std::chrono::seconds(1))
    return;
  if (!may_order(st.cfg.leader))
    return;
  const auto& pos = st.stages[whom.stage].position;
  std::vector<const averager_state::server*> sources;
  for (const auto& [addr, s] : st.servers)
    if (s.stage == whom.stage && s.view.reported && s.view.step == pos.step && s.view.hash == pos.hash)
      sources.push_back(&s);
  // The members whose round result made the majority first: a report alone may claim anything.
  std::stable_partition(sources.begin(), sources.end(), [](const auto* s) { return s->agreed; });
  for (const auto* source : sources) {
    const auto& s = *source;
    whom.reload_sent = now;
    whom.reload_pending = true;
    whom.reload_step = pos.step;
    proto::reload_order order;
    order.set_stage(whom.stage);
    order.set_from_server_id(s.view.id);
    order.set_step(pos.step);
    order.set_hash(pos.hash);
    order.set_from_endpoint(s.endpoint);
    order.set_term(term_of(st.cfg.leader));
    get_logger("averager")
        ->debug("stage {}: {} at step {} ({}) reloads from {} at step {}", whom.stage, whom.view.id, whom.view.step,
                reason, s.view.id, pos.step);
    st.metrics->emit("reload", {{"stage", int64_t{whom.stage}},
                                {"server", whom.view.id},
                                {"from", s.view.id},
                                {"step", static_cast<int64_t>(pos.step)},
                                {"reason", std::string{reason}},
                                {"term", term_of(st.cfg.leader)}});
    self->send(caf::actor_cast<stage_actor>(whom.handle), reload_atom::value, wrap(order), s.handle);
    return;
  }
}

void exclude(self_ptr self, uint32_t stage, round_t& r, size_t rank, const char* why) {
  if (!r.excluded.insert(r.members[rank]).second)
    return;
  get_logger("averager")->warn("stage {}: round {} excludes {} ({})", stage, r.number, r.ids[rank], why);
  proto::round_exclude ex;
  ex.set_stage(stage);
  ex.set_round(r.id);
  ex.set_rank(static_cast<uint32_t>(rank));
  const auto bytes = wrap(ex);
  for (const auto& m : r.members)
    if (auto it = self->state.servers.find(m); it != self->state.servers.end())
      self->send(caf::actor_cast<round_peer_actor>(it->second.peer), exclude_atom::value, bytes);
}

void maybe_finish(self_ptr self, uint32_t stage, bool force) {
  auto& st = self->state;
  auto& sg = st.stages[stage];
  if (!sg.running)
    return;
  auto& r = *sg.running;
  for (const auto& m : r.members)
    if (!force && r.finished.count(m) == 0 && r.excluded.count(m) == 0)
      return;
  std::vector<policy::stage_position> results;
  std::vector<caf::actor_addr> by;  // who gave each result
  int64_t applied = 0, taken = 0;
  for (const auto& m : r.members)  // rank order, for the tie-break
    if (auto it = r.results.find(m); it != r.results.end() && r.finished[m]) {
      results.push_back(it->second);
      by.push_back(m);
      ++applied;
      taken += r.taken[m];
    }
  const auto agreed = policy::majority(results, r.step);
  const int64_t agreeing = agreed ? std::count_if(results.begin(), results.end(),
                                                  [&](const policy::stage_position& p) {
                                                    return p.step == agreed->step && p.hash == agreed->hash;
                                                  })
                                  : 0;
  const double secs = seconds_since(r.started);
  get_logger("averager")
      ->debug("stage {}: round {} done in {:.2f} s: {} of {} applied, step {}", stage, r.number, secs, applied,
              r.members.size(), agreed ? agreed->step : r.step);
  st.metrics->emit("round_end", {{"stage", int64_t{stage}},
                                 {"round", static_cast<int64_t>(r.id)},
                                 {"step", static_cast<int64_t>(agreed ? agreed->step : r.step)},
                                 {"peers", static_cast<int64_t>(r.members.size())},
                                 {"applied", applied},
                                 {"agreeing", agreeing},
                                 {"excluded", static_cast<int64_t>(r.excluded.size())},
                                 {"seconds", secs}});
  if (agreed && agreed->step >= sg.position.step) {
    sg.position = *agreed;
    sg.voting_from.reset();  // from now on only rounds move the stage
  }
  const auto wrong = agreed ? policy::dissenters(results, *agreed) : std::vector<size_t>{};
  std::vector<caf::actor_addr> to_evict;
  for (size_t i = 0; i < by.size(); ++i)
    if (auto it = st.servers.find(by[i]); it != st.servers.end()) {
      const bool dissents = std::find(wrong.begin(), wrong.end(), i) != wrong.end();
      it->second.agreed = agreed && !dissents;
      it->second.dissents = dissents ? it->second.dissents + 1 : 0;
      if (it->second.dissents >= policy::evict_after_dissents)
        to_evict.push_back(by[i]);
    }
  // Centered-clip: a member a strict majority of the others that applied
  // named an outlier (actors/stage_server_averaging.cpp).
  std::vector<caf::actor_addr> outliers;
  for (const auto& [id, reporters] : r.named_by) {
    auto it = std::find_if(st.servers.begin(), st.servers.end(),
                           [&, id = id](const auto& s) { return s.second.view.id == id && s.second.stage == stage; });
    if (it == st.servers.end() || 2 * static_cast<int64_t>(reporters.size()) <= applied - 1)
      continue;
    auto& seen = it->second.outlier_rounds;
    seen.push_back(r.number);
    while (!seen.empty() && seen.front() + policy::outlier_window <= r.number)
      seen.pop_front();
    st.metrics->emit("clip_strike", {{"stage", int64_t{stage}},
                                     {"server", id},
                                     {"round", static_cast<int64_t>(r.id)},
                                     {"reporters", static_cast<int64_t>(reporters.size())},
                                     {"strikes", static_cast<int64_t>(seen.size())}});
    get_logger("averager")
        ->warn(
            "stage {}: round {}: {} of its members found server {}'s gradient outside the honest spread ({} in "
            "the last {} rounds; {} evict)",
            stage, r.number, reporters.size(), id, seen.size(), policy::outlier_window, policy::evict_after_outliers);
    if (static_cast<int>(seen.size()) >= policy::evict_after_outliers)
      outliers.push_back(it->first);
  }
  record_stage(self, stage);
  if (applied > 0)  // at most a batch is carried: a swarm slower than its rounds cannot pay back more
    sg.owed = std::clamp<int64_t>(sg.owed + taken - st.cfg.target_batch_size, 0, st.cfg.target_batch_size);
  sg.running.reset();
  for (const auto& who : to_evict)
    evict(self, who, stage);
  for (const auto& who : outliers)
    if (st.servers.count(who) > 0)
      evict(self, who, stage, true);
  for (auto& [addr, s] : st.servers)
    if (s.stage == stage && s.view.reported && (s.view.step != sg.position.step || s.view.hash != sg.position.hash))
      order_reload(self, s, s.view.step < sg.position.step ? "behind" : "parameters differ");
  maybe_start(self, stage);
}

void maybe_start(self_ptr self, uint32_t stage) {
  auto& st = self->state;
  auto& sg = st.stages[stage];
  if (sg.running)
    return;
  std::vector<averager_state::server*> of_stage;
  std::vector<policy::member_view> views;
  const auto now = averager_state::clock::now();
  const auto settle = std::chrono::duration_cast<averager_state::clock::duration>(seconds(st.cfg.settle_s));
  if (!sg.settled && now - st.started < settle && !resumed_all_reported(st, stage) && !fresh_stage(st, stage)) {
    recheck_at(self, stage, st.started + settle);  // reports usually call again first
    return;
  }
  sg.settled = true;
  bool catching_up = false;
  for (auto& [addr, s] : st.servers)
    if (s.stage == stage) {
      if (!s.view.reported && now - s.joined < settle) {
        recheck_at(self, stage, s.joined + settle);  // its report usually calls again first
        return;
      }
      of_stage.push_back(&s);
      views.push_back(s.view);
      views.back().catching_up = s.reload_pending && s.reload_step == sg.position.step &&
                                 now - s.reload_sent < seconds(policy::catch_up_wait_s);
      catching_up = catching_up || views.back().catching_up;
    }
  const auto plan = policy::plan_round(views, sg.position, std::max<int64_t>(1, st.cfg.target_batch_size - sg.owed));
  for (size_t i : plan.stale)
    order_reload(self, *of_stage[i], of_stage[i]->view.step < sg.position.step ? "behind" : "parameters differ");
  if (!plan.start || !may_order(st.cfg.leader)) {
    if (catching_up)  // its report after the reload calls again; this, if none comes
      recheck_at(self, stage,
                 now + std::chrono::duration_cast<averager_state::clock::duration>(seconds(policy::catch_up_wait_s)));
    return;
  }
  round_t r;
  r.id = ++st.next_round;
  r.number = ++sg.rounds_started;
  r.step = sg.position.step;
  r.started = averager_state::clock::now();
  auto begin = round_begin_of(st, stage, r);
  std::vector<caf::actor> servers, peers;
  for (size_t i : plan.members) {
    r.members.push_back(of_stage[i]->handle.address());
    r.ids.push_back(of_stage[i]->view.id);
    begin.add_members(of_stage[i]->view.id);
    begin.add_member_endpoints(of_stage[i]->endpoint);
    servers.push_back(of_stage[i]->handle);
    peers.push_back(of_stage[i]->peer);
    of_stage[i]->view.samples = 0;  // taken by the round; round_done reports what came since
  }
  get_logger("averager")
      ->debug("stage {}: round {} at step {} among {} servers, {} samples", stage, r.number, r.step, r.members.size(),
              plan.samples);
  st.metrics->emit("round_start", {{"stage", int64_t{stage}},
                                   {"round", static_cast<int64_t>(r.id)},
                                   {"step", static_cast<int64_t>(r.step)},
                                   {"peers", static_cast<int64_t>(r.members.size())},
                                   {"term", term_of(st.cfg.leader)}});
  const auto bytes = wrap(begin);
  // High priority: the hand-over waits for the request a server is computing,
  // not for every request queued behind it.
  for (const auto& h : servers)
    self->send<caf::message_priority::high>(caf::actor_cast<stage_actor>(h), round_atom::value, bytes, peers);
  send_later(self, seconds(policy::round_clock::exclude * st.cfg.coordinator.averaging_timeout_s),
             averager_local::exclude_due{stage, r.id});
  sg.running = std::move(r);
}

}  // namespace swarm::averaging
