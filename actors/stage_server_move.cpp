#include "actors/stage_server_move.hpp"
#include "base/clock.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "base/log.hpp"
#include "actors/stage_server_averaging.hpp"
#include "actors/stage_server_checkpoint.hpp"
#include "net/peer_roles.hpp"
#include "net/tls.hpp"
#include "messages/wire.hpp"

namespace swarm::moving {

namespace {

using clock_type = std::chrono::steady_clock;

/// How long a server told to move waits for a round to hand its gradient to
/// (a stage steps every few seconds when it trains at all).
constexpr auto hand_in_wait = std::chrono::seconds(10);
/// The same for a server stopped on purpose: its round starts at once, and its
/// node ends the process 5 s after the signal (apps/node.cpp, stop_grace),
/// which must leave time for the exit's checkpoint and server_exit.
constexpr auto stop_hand_in_wait = std::chrono::seconds(2);

int stage_of(server_ptr self) { return self->state.worker->span().stage; }

/// The node has not seen the coordinator's connection drop (always, without a node).
bool coordinator_up(const stage_server_state& st) { return !st.cfg.coordinator_up || *st.cfg.coordinator_up; }

/// A registration's term: `adopt` for the node's (it registers only with the
/// leader etcd names now, so even an older term becomes the newest: etcd
/// restored from an older snapshot); `fence` for a moved server's own, with
/// the coordinator it had, which may have been deposed since.
enum class term_rule { adopt, fence };

bool take_term(server_ptr self, int64_t term, term_rule rule) {
  auto& newest = self->state.member.newest_term;
  if (rule == term_rule::fence)
    return accept_term(self, term, "registration");
  if (term < newest)
    get_logger("stage_server")
        ->warn("stage {}: the leader etcd names has term {}, below the {} seen before (etcd restored?): following it",
               stage_of(self), term, newest);
  newest = term;
  return true;
}

/// Registers as the stage served now and fetches the averager; the refusal, if any.
caf::error register_now(server_ptr self, term_rule rule) {
  auto& st = self->state;
  st.member.registration.set_stage(static_cast<uint32_t>(stage_of(self)));
  caf::error refused;
  caf::scoped_actor blocking{self->system()};
  int64_t term = 0;
  blocking
      ->request(st.member.coordinator, std::chrono::seconds(10), register_atom::value, wrap(st.member.registration),
                caf::actor_cast<stage_actor>(self), caf::actor_cast<caf::actor>(st.avg.peer))
      .receive(
          [&](const encoded<proto::register_reply>& bytes) {
            if (auto rep = decode(bytes))
              term = rep->term();
          },
          [&](caf::error& err) { refused = std::move(err); });
  if (!refused && !take_term(self, term, rule))
    refused = make_error(errc::PEER_GONE, "the coordinator's term " + std::to_string(term) +
                                              " is older than one this server saw: it no longer leads");
  if (refused)
    return refused;
  blocking->request(st.member.coordinator, std::chrono::seconds(10), averager_atom::value)
      .receive([&](averager_actor& handle) { st.member.averager = std::move(handle); },
               [&](caf::error& err) { refused = std::move(err); });
  if (refused)
    return refused;
  st.member.registered = true;
  st.member.registered_at = clock_type::now();
  enter(self, phase_event::registered);
  averaging::report_progress(self, true);
  return caf::none;
}

/// Leaves the stage served now for the ordered one (see the header); blocks until it serves it.
void move_now(server_ptr self) {
  auto& st = self->state;
  auto log = get_logger("stage_server");
  const auto order = *st.member.move;
  enter(self, phase_event::drained);
  const int from = stage_of(self);
  const int to = static_cast<int>(order.to_stage());
  // The old stage: its gradient not averaged yet goes with it.
  settle_held(self);
  const int64_t dropped = st.worker->accumulated_samples();
  st.counters->dropped_samples += dropped;
  report_exit(self, to);
  log->info("stage {}: leaving for stage {} ({}); {} samples of gradient not averaged yet dropped", from, to,
            order.reason(), dropped);
  proto::leave_notice note;
  note.set_stage(static_cast<uint32_t>(from));
  note.set_server_id(st.cfg.server_id);
  note.set_to_stage(static_cast<uint32_t>(to));
  if (st.member.coordinator)
    self->send(st.member.coordinator, leave_atom::value, wrap(note));
  st.member.left_stages.insert(static_cast<uint32_t>(from));
  st.member.left_stages.erase(static_cast<uint32_t>(to));
  // The new stage: its layers, then its state from a peer.
  auto built = build_stage_worker(st.cfg, to);
  if (!built) {
    log->error("stage {}: {}", to, describe(built.error()));
    self->quit(built.error());
    return;
  }
  auto fresh = std::move(*built);
  // With the coordinator gone (its node noticed), asking it would block this
  // server, which serves nothing while moving, for the requests' timeouts.
  const bool reachable = st.member.coordinator && coordinator_up(st);
  const auto source =
      download_state(self->system(), reachable ? st.member.coordinator : coordinator_actor{}, to, st.cfg.model.hash(),
                     st.cfg.server_id, *fresh, *st.metrics, st.cfg.checkpoints, st.cfg.num_stages);
  st.worker = std::move(fresh);
  *st.counters = {};
  st.serving.begin_stage();
  st.avg.begin_stage(st.worker->parameter_hash());
  st.member.move.reset();
  st.member.hand_in_timer = false;
  enter(self, phase_event::moved);
  if (reachable)
    if (auto err = register_now(self, term_rule::fence))
      log->warn("stage {}: registering failed: {}; its node registers it when the coordinator is back", to,
                describe(err));
  const double secs = seconds_since(st.member.move_ordered);
  log->info("stage {}: serving it now, moved from stage {} in {:.2f} s (state from {})", to, from, secs,
            to_string(source));
  st.metrics->emit("rebalance", {{"server", st.cfg.server_id},
                                 {"from", int64_t{from}},
                                 {"to", int64_t{to}},
                                 {"reason", order.reason()},
                                 {"predicted_gain", order.predicted_gain()},
                                 {"seconds", secs},
                                 {"state_copied", source == state_source::peer},
                                 {"state_from", std::string{to_string(source)}}});
}

}  // namespace

caf::result<std::string> on_register(server_ptr self, const encoded<proto::register_server>& bytes,
                                     const caf::actor& coordinator) {
  // Its node registers it (apps/, through a scoped actor of this process): from
  // elsewhere this would hand the server to another coordinator.
  if (!sent_from(self, self->node(), self->state.cfg.server_id, "own process", "register"))
    return make_error(errc::BAD_REQUEST, "register comes only from the server's own process");
  auto reg = decode(bytes);
  if (!reg)
    return reg.error();
  if (!coordinator)
    return make_error(errc::BAD_REQUEST, "register without a coordinator handle");
  self->state.member.registration = std::move(*reg);
  self->state.member.coordinator = caf::actor_cast<coordinator_actor>(coordinator);
  averaging::abandon_round(self);
  if (auto err = register_now(self, term_rule::adopt))
    return err;
  return std::string{};
}

bool enter(server_ptr self, phase_event event) {
  auto& m = self->state.member;
  const auto to = next_phase(m.phase, event);
  if (!to)
    return false;
  if (*to != m.phase)
    get_logger("stage_server")
        ->debug("stage {}: {} -> {} ({})", stage_of(self), to_string(m.phase), to_string(*to), to_string(event));
  m.phase = *to;
  return true;
}

bool from_coordinator(server_ptr self, const char* what) {
  const auto& coordinator = self->state.member.coordinator;
  return coordinator && sent_from(self, coordinator.node(), self->state.cfg.server_id, "coordinator's process", what) &&
         sent_as(self, role_coordinator, self->state.cfg.server_id, what);
}

bool accept_term(server_ptr self, int64_t term, const char* what) {
  auto& st = self->state;
  if (term >= st.member.newest_term) {
    st.member.newest_term = term;
    return true;
  }
  get_logger("stage_server")
      ->warn("stage {}: refused a {} order of coordinator term {}: term {} leads now (a deposed coordinator's order)",
             stage_of(self), what, term, st.member.newest_term);
  st.metrics->emit("stale_order", {{"stage", stage_of(self)},
                                   {"server", st.cfg.server_id},
                                   {"order", std::string{what}},
                                   {"term", term},
                                   {"newest_term", st.member.newest_term}});
  return false;
}

void on_move(server_ptr self, const encoded<proto::move_order>& bytes) {
  // The rebalancer runs in the coordinator's process: a move from anywhere else is refused.
  if (from_coordinator(self, "move order"))
    resume_move(self, bytes);
}

void resume_move(server_ptr self, const encoded<proto::move_order>& bytes) {
  auto& st = self->state;
  auto log = get_logger("stage_server");
  auto order = decode(bytes);
  const auto here = static_cast<uint32_t>(stage_of(self));
  // Checked whole before its term counts: an order that does not fit must not
  // raise the newest term (one such order with term 2^63-1 fenced a server off).
  const bool fits = order && order->stage() == here && order->to_stage() != here &&
                    order->to_stage() < static_cast<uint32_t>(st.cfg.num_stages) &&
                    (!st.member.move || st.member.move->to_stage() == order->to_stage()) &&
                    next_phase(st.member.phase, phase_event::move_ordered);
  if (!fits) {
    log->warn("stage {}: ignored a move order{} ({})", here,
              order ? " that does not fit (stage, target or a move under way)" : "", to_string(st.member.phase));
    return;
  }
  if (!accept_term(self, order->term(), "move"))
    return;
  enter(self, phase_event::move_ordered);
  if (!st.member.move) {
    st.member.move = *order;
    st.member.move_ordered = clock_type::now();
    log->info("stage {}: told to move to stage {} ({}); taking no more requests", here, order->to_stage(),
              order->reason());
  }
  if (st.avg.busy())
    return;  // resume() brings the order back when that ends
  // Its gradient goes into the stage's next round before it leaves (the round's
  // end brings the order back); a stage whose rounds stopped gets hand_in_wait.
  const bool waited = clock_type::now() - st.member.move_ordered >= hand_in_wait;
  if (st.worker->accumulated_samples() + st.worker->held_samples() > 0 && !waited) {
    if (!st.member.hand_in_timer) {
      st.member.hand_in_timer = true;
      send_later(self, hand_in_wait, stage_server_local::move_again{bytes});  // to resume_move
    }
    return;
  }
  move_now(self);
}

void resume(server_ptr self) {
  if (self->state.member.move)
    send_self(self, stage_server_local::move_again{wrap(*self->state.member.move)});
  stop_when_handed_in(self, false);
}

bool hand_in_before_stop(server_ptr self) {
  auto& st = self->state;
  if (st.member.phase == server_phase::stopping)
    return true;  // already waiting
  const bool coordinator = st.member.averager && coordinator_up(st);
  const int64_t samples = st.worker->accumulated_samples();
  // A round in progress holds what it handed in already: its end is waited
  // for too, so that the stop's checkpoint has the step it applies (stopped
  // mid-round, a server wrote none and its newest file stayed a step behind
  // the step it had reported: test_durability failed so once in a fresh clone).
  if (!st.member.registered || st.member.draining() || !coordinator || (samples == 0 && !st.avg.busy()))
    return false;
  enter(self, phase_event::stop_asked);
  st.member.stopping_since = clock_type::now();
  st.member.stopping_samples = samples;
  get_logger("stage_server")
      ->info("stage {}: stopping; handing {} samples of gradient to a round first (at most {} s)", stage_of(self),
             samples, stop_hand_in_wait.count());
  averaging::report_progress(self, true);
  stop_when_handed_in(self, true);
  return true;
}

void stop_when_handed_in(server_ptr self, bool from_timer) {
  auto& st = self->state;
  if (st.member.phase != server_phase::stopping || st.avg.busy())
    return;  // the round's end calls again
  const bool handed_in = st.worker->accumulated_samples() == 0;
  if (handed_in || !coordinator_up(st) || clock_type::now() - st.member.stopping_since >= stop_hand_in_wait) {
    stop(self, caf::exit_reason::user_shutdown);
    return;
  }
  if (from_timer)
    send_later(self, std::chrono::milliseconds(100), stage_server_local::leave_check{});
}

void stop(server_ptr self, const caf::error& reason) {
  auto& st = self->state;
  if (reason == caf::exit_reason::user_shutdown) {
    checkpointing::on_stop(self);
    // So that no round starts with it (the averager hears of its exit later).
    if (enter(self, phase_event::stop_asked) && st.member.stopping_since == clock_type::time_point{})
      st.member.stopping_since = clock_type::now();
    averaging::report_progress(self, true);
  }
  if (st.member.registered) {
    const int64_t left = st.worker->accumulated_samples();
    st.counters->dropped_samples += left;
    if (left > 0)
      get_logger("stage_server")
          ->info("stage {}: exiting with {} samples of gradient not averaged (dropped)", stage_of(self), left);
    if (reason == caf::exit_reason::user_shutdown)
      st.metrics->emit("stop_hand_in", {{"stage", int64_t{stage_of(self)}},
                                        {"server", st.cfg.server_id},
                                        {"samples", std::max(st.member.stopping_samples, left)},
                                        {"handed_in", left == 0},
                                        {"seconds", seconds_since(st.member.stopping_since)}});
  }
  report_exit(self, -1);
  self->quit(reason);
}

void report_exit(server_ptr self, int moved_to) {
  auto& st = self->state;
  if (!st.member.registered)
    return;
  const auto& c = *st.counters;
  const auto& cache = st.worker->activation_cache();
  st.metrics->emit("server_exit", {{"stage", int64_t{stage_of(self)}},
                                   {"server", st.cfg.server_id},
                                   {"served", c.served},
                                   {"rejected", c.rejected},
                                   {"committed_samples", c.committed_samples},
                                   {"duplicates", c.duplicates},
                                   {"late", c.late},
                                   {"rounds", c.rounds},
                                   {"rounds_failed", c.rounds_failed},
                                   {"dropped_samples", c.dropped_samples},
                                   {"carried_gradients", c.carried_gradients},
                                   {"withheld_samples", c.withheld_samples},
                                   {"steps", st.worker->steps()},
                                   {"cache_hits", cache.hits},
                                   {"cache_misses", cache.misses},
                                   {"cache_stepped", cache.stepped},
                                   {"cache_evicted", cache.evicted},
                                   {"cache_peak_mib", static_cast<double>(cache.peak_bytes) / (1 << 20)},
                                   {"hash", std::to_string(st.avg.hash)},
                                   {"refused", static_cast<int64_t>(refused_messages())},
                                   {"refused_by_role", static_cast<int64_t>(refused_by_role())},
                                   {"moved_to", int64_t{moved_to}}});
}

}  // namespace swarm::moving
