#include "actors/averager.hpp"
#include "base/clock.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>

#include "base/log.hpp"
#include "actors/stage_server.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

using self_ptr = averager_actor::stateful_pointer<averager_state>;
using round_t = averager_state::round;

std::optional<size_t> rank_of(const round_t& r, const caf::actor_addr& a) {
  for (size_t i = 0; i < r.members.size(); ++i)
    if (r.members[i] == a)
      return i;
  return std::nullopt;
}

void maybe_start(self_ptr self, uint32_t stage);

/// Records the stage's position and servers in etcd when they changed (elected only).
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

/// Orders `whom` to copy the state of an up-to-date server of its stage.
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
  for (const auto& [addr, s] : st.servers) {
    if (s.stage != whom.stage || !s.view.reported || s.view.step != pos.step || s.view.hash != pos.hash)
      continue;
    whom.reload_sent = now;
    whom.reload_pending = true;
    whom.reload_step = pos.step;
    proto::reload_order order;
    order.set_stage(whom.stage);
    order.set_from_server_id(s.view.id);
    order.set_step(pos.step);
    order.set_from_endpoint(s.endpoint);
    order.set_term(term_of(st.cfg.leader));
    get_logger("averager")->debug("stage {}: {} at step {} ({}) reloads from {} at step {}", whom.stage, whom.view.id,
                                 whom.view.step, reason, s.view.id, pos.step);
    st.metrics->emit("reload", {{"stage", int64_t{whom.stage}},
                                {"server", whom.view.id},
                                {"from", s.view.id},
                                {"step", static_cast<int64_t>(pos.step)},
                                {"reason", std::string{reason}},
                                {"term", term_of(st.cfg.leader)}});
    self->send(caf::actor_cast<stage_actor>(whom.handle), reload_atom::value, encode(order), s.handle);
    return;
  }
}

/// Tells every member of the running round that rank `rank` is out.
void exclude(self_ptr self, uint32_t stage, round_t& r, size_t rank, const char* why) {
  if (!r.excluded.insert(r.members[rank]).second)
    return;
  get_logger("averager")->warn("stage {}: round {} excludes {} ({})", stage, r.number, r.ids[rank], why);
  proto::round_exclude ex;
  ex.set_stage(stage);
  ex.set_round(r.id);
  ex.set_rank(static_cast<uint32_t>(rank));
  const auto bytes = encode(ex);
  for (const auto& m : r.members)
    if (auto it = self->state.servers.find(m); it != self->state.servers.end())
      self->send(caf::actor_cast<round_peer_actor>(it->second.peer), exclude_atom::value, bytes);
}

/// Ends the running round once every member finished or was excluded (or `force`).
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
  int64_t applied = 0, taken = 0;
  for (const auto& m : r.members)  // rank order, for the tie-break
    if (auto it = r.results.find(m); it != r.results.end() && r.finished[m]) {
      results.push_back(it->second);
      ++applied;
      taken += r.taken[m];
    }
  const auto agreed = policy::majority(results);
  const int64_t agreeing = std::count_if(results.begin(), results.end(), [&](const policy::stage_position& p) {
    return p.step == agreed.step && p.hash == agreed.hash;
  });
  const double secs = seconds_since(r.started);
  get_logger("averager")->debug("stage {}: round {} done in {:.2f} s: {} of {} applied, step {}", stage, r.number, secs,
                               applied, r.members.size(), agreed.step);
  st.metrics->emit("round_end", {{"stage", int64_t{stage}},
                                 {"round", static_cast<int64_t>(r.id)},
                                 {"step", static_cast<int64_t>(agreed.step)},
                                 {"peers", static_cast<int64_t>(r.members.size())},
                                 {"applied", applied},
                                 {"agreeing", agreeing},
                                 {"excluded", static_cast<int64_t>(r.excluded.size())},
                                 {"seconds", secs}});
  if (applied > 0 && agreed.step >= sg.position.step)
    sg.position = agreed;
  record_stage(self, stage);
  if (applied > 0)  // at most a batch is carried: a swarm slower than its rounds cannot pay back more
    sg.owed = std::clamp<int64_t>(sg.owed + taken - st.cfg.target_batch_size, 0, st.cfg.target_batch_size);
  sg.running.reset();
  for (auto& [addr, s] : st.servers)
    if (s.stage == stage && s.view.reported && (s.view.step != sg.position.step || s.view.hash != sg.position.hash))
      order_reload(self, s, s.view.step < sg.position.step ? "behind" : "parameters differ");
  maybe_start(self, stage);
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
  self->delayed_send(self, delay + std::chrono::milliseconds(1), deadline_atom::value, stage, uint64_t{0}, int32_t{0});
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
  const auto plan =
      policy::plan_round(views, sg.position, std::max<int64_t>(1, st.cfg.target_batch_size - sg.owed));
  for (size_t i : plan.stale)
    order_reload(self, *of_stage[i], of_stage[i]->view.step < sg.position.step ? "behind" : "parameters differ");
  if (!plan.start || !may_order(st.cfg.leader)) {
    if (catching_up)  // its report after the reload calls again; this, if none comes
      recheck_at(self, stage, now + std::chrono::duration_cast<averager_state::clock::duration>(
                                         seconds(policy::catch_up_wait_s)));
    return;
  }
  round_t r;
  r.id = ++st.next_round;
  r.number = ++sg.rounds_started;
  r.step = sg.position.step;
  r.started = averager_state::clock::now();
  proto::round_begin begin;
  begin.set_stage(stage);
  begin.set_round(r.id);
  begin.set_number(r.number);
  begin.set_step(r.step);
  begin.set_timeout_s(st.cfg.coordinator.averaging_timeout_s);
  begin.set_piece_elements(static_cast<uint64_t>(st.cfg.piece_elements));
  double others = 0;
  for (size_t k = 0; k < st.stages.size(); ++k)
    if (k != stage)
      others += st.stages[k].grad_norm_sq;
  begin.set_other_norm_sq(others);
  begin.set_term(term_of(st.cfg.leader));
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
  get_logger("averager")->debug("stage {}: round {} at step {} among {} servers, {} samples", stage, r.number, r.step,
                                r.members.size(), plan.samples);
  st.metrics->emit("round_start", {{"stage", int64_t{stage}},
                                   {"round", static_cast<int64_t>(r.id)},
                                   {"step", static_cast<int64_t>(r.step)},
                                   {"peers", static_cast<int64_t>(r.members.size())},
                                   {"term", term_of(st.cfg.leader)}});
  const auto bytes = encode(begin);
  // High priority: the hand-over waits for the request a server is computing,
  // not for every request queued behind it.
  for (const auto& h : servers)
    self->send<caf::message_priority::high>(caf::actor_cast<stage_actor>(h), round_atom::value, bytes, peers);
  self->delayed_send(self, seconds(policy::round_clock::exclude * st.cfg.coordinator.averaging_timeout_s),
                     deadline_atom::value, stage, r.id, int32_t{1});
  sg.running = std::move(r);
}

/// A server's message and its sender; nullopt when malformed, from a server
/// that never joined, or about a stage not the sender's (so always a valid one).
template <class Msg>
std::optional<std::pair<Msg, averager_state::server*>> from_server(self_ptr self, const std::string& bytes,
                                                                   const char* what) {
  auto msg = decode<Msg>(bytes, what);
  if (!msg)
    return std::nullopt;
  const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto it = self->state.servers.find(sender);
  if (it == self->state.servers.end())  // round_waiting comes from a server's round peer
    it = std::find_if(self->state.servers.begin(), self->state.servers.end(),
                      [&](const auto& s) { return s.second.peer.address() == sender; });
  if (it == self->state.servers.end() || it->second.stage != msg->stage())
    return std::nullopt;
  return std::make_pair(std::move(*msg), &it->second);
}

void on_progress(self_ptr self, const std::string& bytes) {
  auto& st = self->state;
  auto got = from_server<proto::progress_report>(self, bytes, "progress_report");
  if (!got)
    return;
  const auto* rep = &got->first;
  auto* s = got->second;
  auto& sg = st.stages[rep->stage()];
  self->send(st.rebalancing, progress_atom::value, bytes);
  st.metrics->note("server_progress", {{"stage", int64_t{rep->stage()}},
                                       {"server", s->view.id},
                                       {"step", static_cast<int64_t>(rep->step())},
                                       {"hash", static_cast<int64_t>(rep->parameter_hash())},
                                       {"committed_samples", static_cast<int64_t>(rep->committed_samples())}});
  // A member's reports during its round may predate the gradient it handed in;
  // its round_done carries what came after.
  if (sg.running && rank_of(*sg.running, s->handle.address()) && sg.running->finished.count(s->handle.address()) == 0)
    return;
  s->view = {s->view.id, true, rep->step(), rep->samples(), rep->parameter_hash(), rep->leaving()};
  if (rep->reloads() != s->reloads)
    s->reload_pending = false;
  s->reloads = rep->reloads();
  if (rep->step() > sg.position.step || (sg.position.hash == 0 && rep->step() == sg.position.step))
    sg.position = {rep->step(), rep->parameter_hash()};  // a restarted averager learns where the stage is
  record_stage(self, rep->stage());
  maybe_start(self, rep->stage());
}

void on_done(self_ptr self, const std::string& bytes) {
  auto& st = self->state;
  auto got = from_server<proto::round_done>(self, bytes, "round_done");
  if (!got)
    return;
  const auto* done = &got->first;
  auto* s = got->second;
  s->view = {s->view.id, true, done->step(), done->samples(), done->parameter_hash(), s->view.leaving};
  auto& sg = st.stages[done->stage()];
  if (!sg.running || sg.running->id != done->round())
    return;
  auto& r = *sg.running;
  const auto rank = rank_of(r, s->handle.address());
  if (!rank)
    return;
  r.finished[s->handle.address()] = done->applied();
  r.results[s->handle.address()] = {done->step(), done->parameter_hash()};
  r.taken[s->handle.address()] = static_cast<int64_t>(std::min<uint64_t>(done->taken(), uint64_t{1} << 40));
  if (done->applied() && std::isfinite(done->grad_norm()) && done->grad_norm() >= 0)
    sg.grad_norm_sq = done->grad_norm() * done->grad_norm();
  if (!done->applied())
    exclude(self, done->stage(), r, *rank, "gave up");
  maybe_finish(self, done->stage(), false);
}

void on_waiting(self_ptr self, const std::string& bytes) {
  auto got = from_server<proto::round_waiting>(self, bytes, "round_waiting");
  if (!got)
    return;
  auto& sg = self->state.stages[got->first.stage()];
  if (sg.running && sg.running->id == got->first.round())
    sg.running->answered.insert(got->second->handle.address());
}

/// A server died or stopped (`why` "down", with `reason`) or left its stage
/// ("left"): out of its stage and its round.
void forget(self_ptr self, const caf::actor_addr& who, const char* why, const caf::error& reason = {}) {
  auto& st = self->state;
  auto it = st.servers.find(who);
  if (it == st.servers.end())
    return;
  const auto stage = it->second.stage;
  st.servers.erase(it);
  auto& sg = st.stages[stage];
  record_stage(self, stage);
  if (sg.running)
    if (auto rank = rank_of(*sg.running, who); rank && sg.running->finished.count(who) == 0)
      exclude(self, stage, *sg.running, *rank, why);
  maybe_finish(self, stage, false);
  std::vector<policy::member_view> live;
  std::vector<bool> awaited;
  for (const auto& [addr, s] : st.servers)
    if (s.stage == stage) {
      live.push_back(s.view);
      awaited.push_back(sg.running && rank_of(*sg.running, addr) && sg.running->finished.count(addr) == 0 &&
                        sg.running->excluded.count(addr) == 0);
    }
  if (policy::state_held(live, awaited, sg.position))
    return;
  if (sg.position.step == 0) {  // untrained: the seed rebuilds the same parameters
    sg.position = {};
    return;
  }
  // A failure when a server died; the last one stopped on purpose (the end of a
  // run) is a clean stop: its state is where its checkpoints are.
  if (reason && stopped_on_purpose(reason)) {
    get_logger("averager")->info("stage {}: its last server stopped at optimizer step {}", stage, sg.position.step);
  } else {
    const auto cause = reason ? caf::to_string(reason) : std::string{why};
    get_logger("averager")->error("stage {}: its last server is gone ({}): no live server holds its state at optimizer "
                                  "step {}; the next server of the stage loads its newest checkpoint (if there is one)",
                                  stage, cause, sg.position.step);
    st.metrics->emit("stage_lost", {{"stage", int64_t{stage}},
                                    {"step", static_cast<int64_t>(sg.position.step)},
                                    {"hash", std::to_string(sg.position.hash)},
                                    {"reason", cause}});
  }
  sg.position = {};
  sg.owed = 0;
  // Servers left behind on the stage (stopped, or turned reloads down) may be
  // further back than its newest checkpoint: a reload order without a peer
  // tells them to load it if it is ahead of them.
  record_stage(self, stage);
  if (!may_order(st.cfg.leader))
    return;
  proto::reload_order from_disk;
  from_disk.set_stage(stage);
  from_disk.set_term(term_of(st.cfg.leader));
  for (const auto& [addr, s] : st.servers)
    if (s.stage == stage)
      self->send(caf::actor_cast<stage_actor>(s.handle), reload_atom::value, encode(from_disk), caf::actor{});
}

void on_deadline(self_ptr self, uint32_t stage, uint64_t round, int32_t phase) {
  if (round == 0) {  // maybe_start's own timer (recheck_at)
    auto& due = self->state.stages[stage].recheck_at;
    if (due && averager_state::clock::now() >= *due)
      due.reset();
    maybe_start(self, stage);
    return;
  }
  auto& sg = self->state.stages[stage];
  if (!sg.running || sg.running->id != round)
    return;
  auto& r = *sg.running;
  if (phase == 1) {
    // Blame the members too stuck to say whom they wait for. Naming the waited
    // for is not enough: waits chain (an owner short of a part holds back
    // everyone waiting for its shard), and responsive members only wait.
    std::set<size_t> blamed;
    for (size_t i = 0; i < r.members.size(); ++i) {
      const auto& m = r.members[i];
      if (r.finished.count(m) == 0 && r.excluded.count(m) == 0 && r.answered.count(m) == 0)
        blamed.insert(i);
    }
    for (size_t i : blamed) {
      exclude(self, stage, r, i, "missed the deadline");
      if (auto it = self->state.servers.find(r.members[i]); it != self->state.servers.end())
        it->second.view.reported = false;  // not chosen again until it reports
    }
    using clock = policy::round_clock;
    self->delayed_send(self, seconds((clock::end - clock::exclude) * self->state.cfg.coordinator.averaging_timeout_s),
                       deadline_atom::value, stage, round, int32_t{2});
    maybe_finish(self, stage, false);
  } else {
    maybe_finish(self, stage, true);
  }
}

} // namespace

averager_actor::behavior_type averager(self_ptr self, averager_settings cfg, std::shared_ptr<metrics_sink> metrics,
                                       rebalancer_actor rebalancing) {
  auto& st = self->state;
  st.cfg = cfg;
  st.metrics = std::move(metrics);
  st.rebalancing = std::move(rebalancing);
  st.stages.resize(static_cast<size_t>(cfg.num_stages));
  st.started = averager_state::clock::now();
  for (size_t k = 0; k < st.stages.size() && k < cfg.resume.size(); ++k)
    if (const auto& rec = cfg.resume[k]) {
      st.stages[k].position = {rec->step, rec->hash};
      st.stages[k].resumed_members = rec->members;
      st.stages[k].recorded = *rec;
    }
  // Round ids only need to differ from the previous averager's, whose rounds
  // may still be finishing among the servers: start from the clock.
  st.next_round = static_cast<uint64_t>(unix_seconds() * 1000.0) << 8;
  self->set_down_handler([self](caf::down_msg& msg) { forget(self, msg.source, "down", msg.reason); });
  return {
      [self](progress_atom, const std::string& bytes) { on_progress(self, bytes); },
      [self](done_atom, const std::string& bytes) { on_done(self, bytes); },
      [self](waiting_atom, const std::string& bytes) { on_waiting(self, bytes); },
      [self](join_atom, const std::string& bytes, const caf::actor& handle, const caf::actor& peer) {
        auto reg = decode<proto::register_server>(bytes, "register_server");
        if (!reg || !handle || reg->stage() >= self->state.stages.size())
          return;
        if (self->state.servers.count(handle.address()) == 0)
          self->monitor(handle);
        auto& s = self->state.servers[handle.address()];
        s.handle = handle;
        s.peer = peer ? peer : handle;  // a test's stand-in server without a peer
        s.stage = reg->stage();
        s.view.id = reg->server_id();
        s.endpoint = reg->host() + ":" + std::to_string(reg->port());
        s.joined = averager_state::clock::now();
        record_stage(self, s.stage);
      },
      [self](leave_atom, const caf::actor& server) { forget(self, server.address(), "left"); },
      [self](deadline_atom, uint32_t stage, uint64_t round, int32_t phase) { on_deadline(self, stage, round, phase); },
  };
}

} // namespace swarm
