#include "actors/stage_server_averaging.hpp"
#include "policy/allreduce.hpp"
#include "policy/averaging.hpp"
#include "base/clock.hpp"

#include <cmath>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "base/freeze_watch.hpp"
#include "base/log.hpp"
#include "actors/stage_server_checkpoint.hpp"
#include "actors/stage_server_move.hpp"
#include "messages/wire.hpp"
#include "models/optimizer.hpp"

namespace swarm::averaging {

namespace {

using clock_type = std::chrono::steady_clock;

int64_t stage_of(server_ptr self) { return self->state.worker->span().stage; }

void send_done(server_ptr self, const server_round& r, bool applied) {
  auto& st = self->state;
  if (!st.member.averager)
    return;
  proto::round_done done;
  done.set_stage(static_cast<uint32_t>(stage_of(self)));
  done.set_server_id(st.cfg.server_id);
  done.set_round(r.id);
  done.set_applied(applied);
  done.set_step(static_cast<uint64_t>(st.worker->steps()));
  done.set_parameter_hash(st.avg.hash);
  done.set_samples(static_cast<uint64_t>(st.worker->accumulated_samples()));
  done.set_taken(static_cast<uint64_t>(r.samples));
  if (applied)
    done.set_grad_norm(st.worker->last_grad_norm());
  for (const auto& id : r.outliers)
    done.add_outliers(id);
  self->send(st.member.averager, done_atom::value, wrap(done));
  st.avg.reported_samples = st.worker->accumulated_samples();
}

/// A round given up: its gradient, when the peer handed it back, goes into the
/// next round (or waits to learn whether the others stepped with its parts);
/// otherwise it is lost. Says which, for the log.
const char* keep_gradient(server_ptr self, const server_round& r, const proto::round_outcome& o,
                          const std::vector<float>& values) {
  auto& st = self->state;
  if (r.samples == 0)
    return "was empty";
  if (o.reply_late() && r.check) {
    // The provisional microbatch may count elsewhere too: withheld, as settle_held would have; the rest
    // of the gradient cannot be told from it any more, so it goes too (a stall inside a 50 ms window).
    st.counters->committed_samples -= r.check->samples;
    st.counters->withheld_samples += r.check->samples;
    st.counters->dropped_samples += r.samples - r.check->samples;
    return "is dropped with it";
  }
  if (values.size() != static_cast<size_t>(st.worker->parameter_count())) {
    st.counters->dropped_samples += r.samples;
    return "is lost (it never came back from the round)";
  }
  local_gradient g{values, r.samples, r.microbatches, r.stale_samples};
  if (!o.parts_sent()) {
    carry_over(self, std::move(g), static_cast<int64_t>(r.step), "failed_round");
    return "goes into the next round (nobody got any of it)";
  }
  st.avg.returned = averaging_state::returned_gradient{std::move(g), static_cast<int64_t>(r.step)};
  return "waits for the next round: the others may have stepped with its parts";
}

/// Ends the round here: applied (`o` complete, `mean` the stage's gradient) or
/// given up (`why`, or the outcome's).
void finish(server_ptr self, std::string why, const proto::round_outcome& o, const std::vector<float>& mean) {
  auto& st = self->state;
  auto& r = *st.avg.round;
  if (r.finished)
    return;
  r.finished = true;
  r.writer = o.writer();
  // Centered-clip: members whose parts lay far outside the others' spread
  // (issue #47; the averager counts what a majority says).
  for (int i = 0; i < o.outlying_size() && i < static_cast<int>(r.ids.size()); ++i)
    if (o.outlying(i) > policy::outlier_ratio)
      r.outliers.push_back(r.ids[static_cast<size_t>(i)]);
  if (why.empty() && !o.complete())
    why = o.why().empty() ? "the exchange did not complete" : o.why();
  if (why.empty() && st.cfg.freeze_s > 0)
    if (auto thaw = thawed_after(st.member.registered_at);
        thaw && clock_type::now() - *thaw < std::chrono::duration<double>(2 * st.cfg.freeze_s))
      why =
          "this process stood still longer than the connection timeout: its peers counted it out of its rounds "
          "until it registers again";
  bool applied = why.empty();
  if (applied) {
    if (auto err = st.worker->apply_gradient(mean, r.other_norm_sq)) {
      // Every member got the same vector, so every member refuses it alike.
      get_logger("stage_server")
          ->error("stage {}: round {}: averaged gradient refused: {}", stage_of(self), r.number, describe(err));
      applied = false;
      why = "averaged gradient refused";
    }
  }
  const double secs = seconds_since(r.started);
  if (applied) {
    ++st.counters->rounds;
    st.avg.hash = st.worker->parameter_hash();
    emit_params(self);
    checkpointing::after_round(self);
  } else {
    ++st.counters->rounds_failed;
    const char* fate = keep_gradient(self, r, o, mean);
    get_logger("stage_server")
        ->warn("stage {}: gave up round {} after {:.2f} s: {}; its gradient ({} samples) {}", stage_of(self), r.number,
               secs, why, r.samples, fate);
  }
  st.metrics->emit("averaging_round",
                   {{"stage", stage_of(self)},
                    {"server", st.cfg.server_id},
                    {"round", static_cast<int64_t>(r.id)},
                    {"term", r.term},
                    {"step", st.worker->steps()},
                    {"applied", applied},
                    {"peers", int64_t{r.members}},
                    {"excluded", static_cast<int64_t>(o.gone())},
                    {"reassigned", static_cast<int64_t>(o.reassigned())},
                    {"samples", r.samples},
                    {"stale_samples", r.stale_samples},
                    {"lr", learning_rate(st.cfg.model, st.worker->steps() - 1)},
                    {"compression", st.cfg.server.averaging_compression},
                    {"outliers", fmt::format("{}", fmt::join(r.outliers, ","))},
                    {"bytes", static_cast<int64_t>(o.bytes_sent())},
                    {"bytes_received", static_cast<int64_t>(o.bytes_received())},
                    {"raw_bytes", static_cast<int64_t>(o.raw_bytes())},
                    {"ideal_bytes", static_cast<int64_t>(policy::ideal_allreduce_bytes(
                                        4.0 * static_cast<double>(st.worker->parameter_count()), r.members))},
                    {"seconds", secs}});
  send_done(self, r, applied);
  release_deferred(self);
  moving::resume(self);
}

/// Gives the running round up here, before its peer had an outcome.
void give_up(server_ptr self, const char* why) { finish(self, why, proto::round_outcome{}, {}); }

}  // namespace

void emit_params(server_ptr self) {
  self->state.metrics->emit("params", {{"stage", stage_of(self)},
                                       {"server", self->state.cfg.server_id},
                                       {"step", self->state.worker->steps()},
                                       {"hash", std::to_string(self->state.avg.hash)}});
}

void carry_over(server_ptr self, local_gradient g, int64_t computed_at, const char* why) {
  auto& st = self->state;
  if (g.samples == 0)
    return;
  const int64_t behind = st.worker->steps() - computed_at;
  const bool kept = behind >= 0 && behind <= 1 && !st.worker->restore_gradient(g, behind > 0);
  st.metrics->emit("gradient_carry", {{"stage", stage_of(self)},
                                      {"server", st.cfg.server_id},
                                      {"reason", std::string{why}},
                                      {"samples", g.samples},
                                      {"computed_at", computed_at},
                                      {"step", st.worker->steps()},
                                      {"kept", kept}});
  if (kept) {
    ++st.counters->carried_gradients;
    return;
  }
  st.counters->dropped_samples += g.samples;
  get_logger("stage_server")
      ->info(
          "stage {}: dropped {} samples of gradient computed at step {}: the stage is at "
          "step {} now",
          stage_of(self), g.samples, computed_at, st.worker->steps());
}

void report_progress(server_ptr self, bool force) {
  auto& st = self->state;
  const int64_t samples = st.worker->accumulated_samples();
  if (!st.member.averager || (!force && samples == st.avg.reported_samples))
    return;
  st.avg.reported_samples = samples;
  proto::progress_report rep;
  rep.set_stage(static_cast<uint32_t>(stage_of(self)));
  rep.set_server_id(st.cfg.server_id);
  rep.set_step(static_cast<uint64_t>(st.worker->steps()));
  rep.set_samples(static_cast<uint64_t>(samples));
  rep.set_parameter_hash(st.avg.hash);
  rep.set_reloads(st.avg.reloads);
  rep.set_busy_seconds(st.serving.busy_s);
  rep.set_committed_samples(static_cast<uint64_t>(st.counters->committed_samples));
  rep.set_leaving(st.member.phase == server_phase::stopping);
  self->send(st.member.averager, progress_atom::value, wrap(rep));
}

void on_round_begin(server_ptr self, const encoded<proto::round_begin>& bytes, const std::vector<caf::actor>& members) {
  auto& st = self->state;
  auto log = get_logger("stage_server");
  auto begin = decode(bytes);
  if (!begin || begin->members_size() != static_cast<int>(members.size()) || !std::isfinite(begin->timeout_s()) ||
      begin->timeout_s() <= 0) {
    log->warn("stage {}: ignored a malformed round_begin", stage_of(self));
    return;
  }
  if (begin->stage() != static_cast<uint32_t>(stage_of(self))) {
    log->info("stage {}: ignored a round of stage {} (this server left it)", stage_of(self), begin->stage());
    return;
  }
  if (!moving::accept_term(self, begin->term(), "round"))
    return;
  bool member = false;
  for (const auto& m : members)
    member = member || m.address() == st.avg.peer.address();
  if (!member)
    return;
  if (st.avg.returned) {
    auto back = std::move(*st.avg.returned);
    st.avg.returned.reset();
    if (begin->step() == static_cast<uint64_t>(back.step))  // nobody stepped with it
      carry_over(self, std::move(back.gradient), back.step, "returned");
  }
  if (st.avg.in_round())
    give_up(self, "a newer round began");
  server_round r;
  r.id = begin->round();
  r.number = begin->number();
  r.step = begin->step();
  r.members = begin->members_size();
  r.ids.assign(begin->members().begin(), begin->members().end());
  r.other_norm_sq = std::isfinite(begin->other_norm_sq()) ? std::max(begin->other_norm_sq(), 0.0) : 0.0;
  r.term = begin->term();
  r.started = clock_type::now();
  st.avg.round = r;
  // A draining server takes part too: its gradient goes in before it leaves (stage_server_move.hpp).
  if (static_cast<uint64_t>(st.worker->steps()) != r.step || st.avg.reloading) {
    give_up(self, "this server is not at the round's step");
    return;
  }
  // The microbatch answered last joins this gradient, on the parameters it was computed on (else it would be
  // a step stale); while its reply may still be leaving, the peer checks that before any part goes out.
  st.avg.round->check = settle_held_for_round(self);
  std::vector<int64_t> check;
  if (const auto& c = st.avg.round->check)
    check = {c->sent_at.time_since_epoch().count(), c->window_end.time_since_epoch().count(),
             static_cast<int64_t>(c->slack_s * 1e6)};
  auto grad = st.worker->take_gradient();
  if (st.cfg.server.fault == server_config::fault_kind::flip)  // issue #47's test: a contribution that lies
    for (auto& v : grad.values)
      v *= -10.0f;
  st.avg.round->samples = grad.samples;
  st.avg.round->microbatches = grad.microbatches;
  st.avg.round->stale_samples = grad.stale_samples;
  self->send(st.avg.peer, round_atom::value, bytes, members, std::move(grad.values), grad.samples, st.member.averager,
             std::move(check));
  send_later(self, seconds(policy::round_clock::end * begin->timeout_s() + 5.0),
             stage_server_local::round_overdue{r.id});
  if (st.cfg.server.stale_wait_s > 0)
    send_later(self, seconds(st.cfg.server.stale_wait_s), stage_server_local::stale_wait_over{r.id});
}

void on_round_overdue(server_ptr self, uint64_t round) {
  auto& st = self->state;
  if (st.avg.in_round() && st.avg.round->id == round)
    give_up(self, "its round peer gave no outcome by the round's end");
}

void on_stale_wait_over(server_ptr self, uint64_t round) {
  auto& st = self->state;
  if (!st.avg.in_round() || st.avg.round->id != round)
    return;
  st.serving.waited_out = round;
  release_deferred(self);
}

void on_outcome(server_ptr self, const encoded<proto::round_outcome>& bytes, const std::vector<float>& mean) {
  auto& st = self->state;
  // Only its own round peer ran the exchange: an outcome from anyone else would be applied as the step.
  if (!sent_by(self, st.avg.peer.address(), st.cfg.server_id, "round peer", "round outcome"))
    return;
  auto o = decode(bytes);
  if (!o || !st.avg.round || st.avg.round->id != o->round())
    return;
  finish(self, "", *o, mean);
}

void abandon_round(server_ptr self) {
  auto& st = self->state;
  if (!st.avg.in_round())
    return;
  self->send(st.avg.peer, abandon_atom::value, st.avg.round->id);
  give_up(self, "its link to the coordinator dropped; the round went on without it");
}

}  // namespace swarm::averaging
