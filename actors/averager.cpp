#include "actors/averager.hpp"
#include "actors/averager_rounds.hpp"
#include "base/clock.hpp"
#include "policy/averaging.hpp"

#include <algorithm>
#include <cmath>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "base/log.hpp"
#include "actors/stage_server.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace averaging {
namespace {

/// A server's message and its sender; nullopt when malformed, from a server
/// that never joined, or about a stage not the sender's (so always a valid one).
template <class Msg>
std::optional<std::pair<Msg, averager_state::server*>> from_server(self_ptr self, const encoded<Msg>& bytes) {
  auto msg = decode(bytes);
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

/// Whether a live member of `stage` may still hold its state (policy::state_held);
/// when none does, the stage's state is lost (`cause`; `clean`: its last server
/// stopped on purpose) and its members are told to load the newest checkpoint.
void check_held(self_ptr self, uint32_t stage, const std::string& cause, bool clean) {
  auto& st = self->state;
  auto& sg = st.stages[stage];
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
  if (clean) {
    get_logger("averager")->info("stage {}: its last server stopped at optimizer step {}", stage, sg.position.step);
  } else {
    get_logger("averager")
        ->error(
            "stage {}: its last server is gone ({}): no live server holds its state at optimizer "
            "step {}; the next server of the stage loads its newest checkpoint (if there is one)",
            stage, cause, sg.position.step);
    st.metrics->emit("stage_lost", {{"stage", int64_t{stage}},
                                    {"step", static_cast<int64_t>(sg.position.step)},
                                    {"hash", std::to_string(sg.position.hash)},
                                    {"reason", cause}});
  }
  sg.position = {};
  sg.voting_from = policy::stage_position{};  // the next servers' reports say where it stands
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
      self->send(caf::actor_cast<stage_actor>(s.handle), reload_atom::value, wrap(from_disk), caf::actor{});
}

void on_progress(self_ptr self, const encoded<proto::progress_report>& bytes) {
  auto& st = self->state;
  auto got = from_server(self, bytes);
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
  const bool first_report = !s->view.reported;
  s->view = {s->view.id, true, rep->step(), rep->samples(), rep->parameter_hash(), rep->leaving()};
  // A member that had not reported counted as maybe holding the stage's state
  // when its last holder died; now it says whether it does (a server that moved
  // in just before the stage was wiped out holds initial parameters).
  if (first_report && sg.position.step > 0)
    check_held(self, rep->stage(), "no live member holds it", false);
  if (rep->reloads() != s->reloads)
    s->reload_pending = false;
  s->reloads = rep->reloads();
  if (sg.voting_from) {  // a restarted averager learns where the stage is: from most servers, not the highest claim
    std::vector<policy::member_view> views;
    for (const auto& [addr, other] : st.servers)
      if (other.stage == rep->stage())
        views.push_back(other.view);
    sg.position = policy::reported_position(views, *sg.voting_from);
  }
  record_stage(self, rep->stage());
  maybe_start(self, rep->stage());
}

void on_done(self_ptr self, const encoded<proto::round_done>& bytes) {
  auto& st = self->state;
  auto got = from_server(self, bytes);
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
  for (const auto& id : done->outliers())
    if (std::find(r.ids.begin(), r.ids.end(), id) != r.ids.end() && id != s->view.id)
      r.named_by[id].insert(s->handle.address());
  if (done->applied() && std::isfinite(done->grad_norm()) && done->grad_norm() >= 0)
    sg.grad_norm_sq = done->grad_norm() * done->grad_norm();
  if (!done->applied())
    exclude(self, done->stage(), r, *rank, "gave up");
  maybe_finish(self, done->stage(), false);
}

void on_waiting(self_ptr self, const encoded<proto::round_waiting>& bytes) {
  auto got = from_server(self, bytes);
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
  check_held(self, stage, reason ? caf::to_string(reason) : std::string{why}, reason && stopped_on_purpose(reason));
}

void on_recheck(self_ptr self, uint32_t stage) {
  auto& due = self->state.stages[stage].recheck_at;
  if (due && averager_state::clock::now() >= *due)
    due.reset();
  maybe_start(self, stage);
}

/// The round `round` of `stage` if it is the one running (a timer of an older one is spent), else null.
round_t* running(self_ptr self, uint32_t stage, uint64_t round) {
  auto& sg = self->state.stages[stage];
  return sg.running && sg.running->id == round ? &*sg.running : nullptr;
}

void on_exclude_due(self_ptr self, uint32_t stage, uint64_t round) {
  auto* r = running(self, stage, round);
  if (!r)
    return;
  // Blame the members too stuck to say whom they wait for. Naming the waited
  // for is not enough: waits chain (an owner short of a part holds back
  // everyone waiting for its shard), and responsive members only wait.
  std::set<size_t> blamed;
  for (size_t i = 0; i < r->members.size(); ++i) {
    const auto& m = r->members[i];
    if (r->finished.count(m) == 0 && r->excluded.count(m) == 0 && r->answered.count(m) == 0)
      blamed.insert(i);
  }
  for (size_t i : blamed) {
    exclude(self, stage, *r, i, "missed the deadline");
    if (auto it = self->state.servers.find(r->members[i]); it != self->state.servers.end())
      it->second.view.reported = false;  // not chosen again until it reports
  }
  using clock = policy::round_clock;
  send_later(self, seconds((clock::end - clock::exclude) * self->state.cfg.coordinator.averaging_timeout_s),
             averager_local::round_end{stage, round});
  maybe_finish(self, stage, false);
}

}  // namespace

void evict(self_ptr self, const caf::actor_addr& who, uint32_t stage, bool outlier) {
  auto& st = self->state;
  auto it = st.servers.find(who);
  if (it == st.servers.end())
    return;
  const auto id = it->second.view.id;
  const auto why = outlier ? fmt::format(
                                 "the majority of its rounds' members found its gradient outside the honest "
                                 "spread in {} of its stage's last {} rounds (centered-clip)",
                                 it->second.outlier_rounds.size(), policy::outlier_window)
                           : fmt::format("its round results differed from its stage's majority {} rounds in a row",
                                         it->second.dissents);
  get_logger("averager")->error("stage {}: evicted server {}: {}", stage, id, why);
  st.metrics->emit("server_evicted", {{"stage", int64_t{stage}},
                                      {"server", id},
                                      {"dissents", int64_t{it->second.dissents}},
                                      {"outlier_rounds", static_cast<int64_t>(it->second.outlier_rounds.size())},
                                      {"why", why}});
  st.evicted.insert(who);
  if (st.coordinator)
    self->send(caf::actor_cast<coordinator_actor>(st.coordinator), evict_atom::value, it->second.handle);
  forget(self, who, "evicted");
}

}  // namespace averaging

using namespace averaging;

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
      st.stages[k].voting_from = st.stages[k].position;  // servers past the record (it lags a round) still count
      st.stages[k].resumed_members = rec->members;
      st.stages[k].recorded = *rec;
    }
  // Round ids only need to differ from the previous averager's, whose rounds
  // may still be finishing among the servers: start from the clock.
  st.next_round = static_cast<uint64_t>(unix_seconds() * 1000.0) << 8;
  self->set_down_handler([self](caf::down_msg& msg) { forget(self, msg.source, "down", msg.reason); });
  handle_local(
      self, [self](averager_local::recheck t) { on_recheck(self, t.stage); },
      [self](averager_local::exclude_due t) { on_exclude_due(self, t.stage, t.round); },
      [self](averager_local::round_end t) {
        if (running(self, t.stage, t.round))
          maybe_finish(self, t.stage, true);
      });
  return {
      [self](progress_atom, const encoded<proto::progress_report>& bytes) { on_progress(self, bytes); },
      [self](done_atom, const encoded<proto::round_done>& bytes) { on_done(self, bytes); },
      [self](waiting_atom, const encoded<proto::round_waiting>& bytes) { on_waiting(self, bytes); },
      [self](join_atom, const encoded<proto::register_server>& bytes, const caf::actor& handle,
             const caf::actor& peer) {
        // Its coordinator, in this process, checked the registration first.
        if (!sent_from(self, self->node(), "averager", "coordinator", "join"))
          return;
        auto reg = decode(bytes);
        if (!reg || !handle || reg->stage() >= self->state.stages.size() ||
            self->state.evicted.count(handle.address()) > 0)
          return;
        self->state.coordinator = caf::actor_cast<caf::actor>(self->current_sender());
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
      [self](leave_atom, const caf::actor& server) {
        if (sent_from(self, self->node(), "averager", "coordinator", "leave"))
          forget(self, server.address(), "left");
      },
  };
}

}  // namespace swarm
