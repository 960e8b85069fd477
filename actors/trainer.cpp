#include "actors/trainer.hpp"
#include "actors/trainer_microbatches.hpp"
#include "actors/evaluator.hpp"
#include "base/clock.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include <caf/all.hpp>

#include "base/log.hpp"
#include "messages/errors.hpp"
#include "messages/protocol.hpp"
#include "messages/local.hpp"
#include "messages/wire.hpp"

namespace swarm::trainer_local {
struct drain_over {};  ///< its own timer: stop_drain after a stop was asked
}  // namespace swarm::trainer_local

SWARM_LOCAL_MESSAGE(swarm::trainer_local::drain_over)

namespace swarm {

namespace training {

namespace {

using clock = trainer_state::clock;

int64_t busy_answers(const trainer_state& st) {
  return st.cfg.busy_answers ? st.cfg.busy_answers->load(std::memory_order_relaxed) : 0;
}

/// One count of its load balancers' verification (0 when none is counted).
int64_t verified(const trainer_state& st, const std::atomic<int64_t> policy::verify_counters::*field) {
  return st.cfg.verified ? ((*st.cfg.verified).*field).load(std::memory_order_relaxed) : 0;
}

/// The `verify` event (issue #47), after each step and at the end while
/// verification is on: its counts so far, and its extra forward samples as a
/// share of all the forwards' samples.
void emit_verify(self_ptr self) {
  auto& st = self->state;
  if (!(st.cfg.train.verify_fraction > 0) || !st.cfg.verified)
    return;
  using v = policy::verify_counters;
  const int64_t samples = verified(st, &v::samples), forwards = verified(st, &v::forward_samples);
  st.metrics->emit("verify",
                   {{"trainer", st.cfg.trainer_id},
                    {"step", st.step},
                    {"fraction", st.cfg.train.verify_fraction},
                    {"requests", verified(st, &v::requests)},
                    {"samples", samples},
                    {"forward_samples", forwards},
                    {"share", static_cast<double>(samples) / static_cast<double>(std::max<int64_t>(forwards, 1))},
                    {"agreed", verified(st, &v::agreed)},
                    {"disagreed", verified(st, &v::disagreed)},
                    {"inconclusive", verified(st, &v::inconclusive)},
                    {"strikes", verified(st, &v::strikes)},
                    {"bans", verified(st, &v::bans)}});
}

/// Writes the trainer's position as a checkpoint (when `due_only`, only if one is due).
void save_position(self_ptr self, bool due_only) {
  auto& st = self->state;
  const auto& ck = st.cfg.checkpoints;
  if (!ck.store)
    return;
  const auto newest = ck.store->latest_written(checkpoint_header::kind::trainer, st.cfg.slot);
  const double since_s = seconds_since(st.started);
  if (due_only ? !checkpoint_due(st.step, newest, ck.every_steps, ck.every_s, since_s)
               : st.step <= 0 || (newest && newest->step == st.step))
    return;
  std::ostringstream rng;
  rng << st.rng;
  const checkpoint_header h{checkpoint_header::kind::trainer, st.cfg.slot, static_cast<uint32_t>(st.cfg.num_stages),
                            st.cfg.model.hash(), st.step};
  const auto started = clock::now();
  const auto position = encode_position({st.step, st.samples, rng.str()});
  auto written = ck.store->write(h, position);
  if (!written) {
    get_logger("trainer")->error("checkpoint of the trainer's position failed: {}", describe(written.error()));
    return;
  }
  st.metrics->emit("checkpoint", {{"stage", int64_t{-1}},
                                  {"trainer", st.cfg.trainer_id},
                                  {"step", st.step},
                                  {"file", *written},
                                  {"bytes", static_cast<int64_t>(position.size())},
                                  {"seconds", seconds_since(started)}});
}

/// trainer_exit, once: when done, or when told to stop (then with what was in flight).
void report_exit(self_ptr self) {
  auto& st = self->state;
  if (st.reported)
    return;
  st.reported = true;
  save_position(self, false);
  emit_verify(self);
  std::string acked;
  for (auto n : st.acked)
    acked += (acked.empty() ? "" : ",") + std::to_string(n);
  get_logger("trainer")->info(
      "{}: {} steps, {} microbatches issued, {} completed, {} dropped, {} in flight; acked "
      "samples per stage {}; stage steps {}",
      st.live.empty() && !st.stop_asked ? "done" : "stopped", st.step, st.issued, st.completed, st.dropped,
      st.live.size(), acked, st.stages.steps_text());
  if (const auto lag = st.stages.stalled(stage_lag_allowed))
    get_logger("trainer")->warn(
        "stage {} ended at optimizer step {}, where it stayed while stage {} took {} steps: "
        "it did not learn from those samples",
        lag->stage, lag->step, lag->leader, lag->gained);
  st.metrics->emit("trainer_exit", {{"trainer", st.cfg.trainer_id},
                                    {"steps", st.step},
                                    {"issued", st.issued},
                                    {"completed", st.completed},
                                    {"dropped", st.dropped},
                                    {"in_flight", static_cast<int64_t>(st.live.size())},
                                    {"retries", st.retries},
                                    {"busy", busy_answers(st)},
                                    {"samples", st.samples},
                                    {"wire_bytes", st.wire_bytes},
                                    {"compression", st.cfg.train.compression},
                                    {"acked", acked},
                                    {"stage_steps", st.stages.steps_text()}});
}

/// The progress line a person watches: at most one every 2 s (and the last),
/// with a bar and an ETA when --max-steps is set; every step at debug level.
void log_progress(self_ptr self, double loss, double tokens_per_s, trainer_state::clock::time_point now) {
  auto& st = self->state;
  const int64_t max = st.cfg.train.max_steps;
  auto log = get_logger("trainer");
  const bool last = max > 0 && st.step >= max;
  if (!last && st.progress_logged_once && now - st.progress_logged < std::chrono::seconds(2)) {
    log->debug("step {} loss {:.4f} samples {} tokens/s {:.0f}", st.step, loss, st.samples, tokens_per_s);
    return;
  }
  st.progress_logged = now;
  st.progress_logged_once = true;
  std::string line = "step " + std::to_string(st.step);
  if (max > 0) {
    const double done = std::min(1.0, static_cast<double>(st.step) / static_cast<double>(max));
    const int filled = static_cast<int>(done * 20);
    line += "/" + std::to_string(max) + " [" + std::string(static_cast<size_t>(filled), '#') +
            std::string(static_cast<size_t>(20 - filled), '-') + "] " + std::to_string(static_cast<int>(done * 100)) +
            "%";
  }
  line += fmt::format("  loss {:.3f}  {:.0f} tokens/s", loss, tokens_per_s);
  const int64_t steps_here = st.step - st.first_step;
  if (max > 0 && !last && steps_here > 0) {
    const double per_step = std::chrono::duration<double>(now - st.started).count() / static_cast<double>(steps_here);
    const auto eta = static_cast<int64_t>(per_step * static_cast<double>(max - st.step));
    line += fmt::format("  ETA {}:{:02d}", eta / 60, eta % 60);
  }
  if (st.cfg.num_stages > 1)
    line += "  stage steps " + st.stages.steps_text();
  if (st.dropped > 0 || st.retries > 0)
    line += fmt::format("  ({} dropped, {} retries)", st.dropped, st.retries);
  log->info("{}", line);
}

/// Says so when a stage has stopped stepping while the others go on
/// (policy/stage_lag.hpp), and again as it stays so.
void check_stage_lag(self_ptr self) {
  auto& st = self->state;
  const auto lag = st.stages.stalled(stage_lag_allowed);
  if (!lag) {
    st.lag_warned = 0;
    return;
  }
  if (!warn_about_lag(lag->gained, st.lag_warned, stage_lag_allowed))
    return;
  st.lag_warned = lag->gained;
  get_logger("trainer")->warn(
      "stage {} has stayed at optimizer step {} while stage {} took {} steps (stage steps {}): "
      "its averaging rounds are not completing, so its weights are not learning; the "
      "coordinator's log and status page say which member it waits on",
      lag->stage, lag->step, lag->leader, lag->gained, st.stages.steps_text());
  st.metrics->emit("stage_lag", {{"trainer", st.cfg.trainer_id},
                                 {"stage", int64_t{lag->stage}},
                                 {"step", lag->step},
                                 {"leader", int64_t{lag->leader}},
                                 {"gained", lag->gained},
                                 {"stage_steps", st.stages.steps_text()}});
}

/// Measures the validation loss at the current step (actors/evaluator.hpp);
/// `first`: training starts once it is known.
void run_eval(self_ptr self, bool first) {
  auto& st = self->state;
  if (st.eval_pending) {
    get_logger("trainer")->warn("step {}: no validation, the one before is still under way (raise --eval-every)",
                                st.step);
    return;
  }
  st.eval_pending = true;
  const int64_t step = st.step;
  auto done = [self, first] {
    self->state.eval_pending = false;
    if (first)
      launch(self);
    maybe_finish(self);
  };
  self->request(st.evaluator, caf::infinite, eval_atom::value)
      .then(
          [self, step, done](double loss, int64_t samples, int64_t failed, double secs) {
            auto& st = self->state;
            get_logger("trainer")->info(
                "validation at step {}: loss {:.4f} (perplexity {:.1f}) on {} samples in "
                "{:.1f} s{}",
                step, loss, std::exp(loss), samples, secs,
                failed ? fmt::format(" ({} samples failed)", failed) : std::string{});
            st.metrics->emit("eval", {{"trainer", st.cfg.trainer_id},
                                      {"step", step},
                                      {"samples", samples},
                                      {"tokens", samples * st.cfg.model.seq_len},
                                      {"loss", loss},
                                      {"perplexity", std::exp(loss)},
                                      {"failed", failed},
                                      {"seconds", secs}});
            done();
          },
          [done](caf::error& err) {
            get_logger("trainer")->warn("validation failed: {}", describe(err));
            done();
          });
}

}  // namespace

int last_stage(self_ptr self) { return self->state.cfg.num_stages - 1; }

caf::timespan request_deadline(self_ptr self, double attempt_timeout_s) {
  const auto& t = self->state.cfg.train;
  return seconds(t.no_server_wait_s + t.attempts.max_attempts * attempt_timeout_s + 10);
}

void maybe_finish(self_ptr self) {
  auto& st = self->state;
  if (st.draining && st.live.empty() && !st.eval_pending) {
    report_exit(self);
    for (auto& lb : st.balancers)
      self->send_exit(lb, caf::exit_reason::user_shutdown);
    self->quit();
  }
}

void emit_step(self_ptr self) {
  auto& st = self->state;
  const auto now = clock::now();
  const double secs = std::chrono::duration<double>(now - st.step_started).count();
  const double loss = st.step_loss_sum / static_cast<double>(std::max<int64_t>(st.step_microbatches, 1));
  const double tokens_per_s = static_cast<double>(st.step_samples * st.cfg.model.seq_len) / std::max(secs, 1e-9);
  ++st.step;
  check_stage_lag(self);
  log_progress(self, loss, tokens_per_s, now);
  st.metrics->emit("step", {{"trainer", st.cfg.trainer_id},
                            {"step", st.step},
                            {"loss", loss},
                            {"samples", st.samples},
                            {"tokens", st.samples * st.cfg.model.seq_len},
                            {"tokens_per_s", tokens_per_s},
                            {"elapsed_s", std::chrono::duration<double>(now - st.started).count()},
                            {"issued", st.issued},
                            {"completed", st.completed},
                            {"dropped", st.dropped},
                            {"retries", st.retries},
                            {"step_retries", st.retries - st.step_retries_base},
                            {"busy", busy_answers(st)},
                            {"wire_bytes", st.wire_bytes},
                            {"wire_bytes_per_sample", static_cast<double>(st.wire_bytes) /
                                                          static_cast<double>(std::max<int64_t>(st.samples, 1))}});
  emit_verify(self);
  st.step_retries_base = st.retries;
  st.step_samples = 0;
  st.step_loss_sum = 0;
  st.step_microbatches = 0;
  st.step_started = now;
  save_position(self, true);
  if (st.cfg.train.max_steps > 0 && st.step >= st.cfg.train.max_steps)
    st.draining = true;
  if (st.evaluator && st.step % st.cfg.train.eval_every == 0)
    run_eval(self, false);
}

}  // namespace training

using namespace training;

caf::behavior trainer(self_ptr self, trainer_settings cfg, std::shared_ptr<const token_source> text,
                      std::vector<caf::actor> balancers, std::shared_ptr<metrics_sink> metrics) {
  auto& st = self->state;
  st.rng.seed(cfg.sampler_seed);
  if (cfg.resume) {
    std::istringstream rng(cfg.resume->rng);
    rng >> st.rng;  // checked by decode_position's caller: a generator this trainer wrote
    st.step = cfg.resume->step;
    st.samples = cfg.resume->samples;
  }
  st.cfg = std::move(cfg);
  st.text = std::move(text);
  st.balancers = std::move(balancers);
  st.metrics = std::move(metrics);
  st.started = st.step_started = clock::now();
  st.first_step = st.step;
  // A load balancer that quits (e.g. its subscription was refused) ends training.
  for (auto& lb : st.balancers)
    self->link_to(lb);
  st.acked.assign(static_cast<size_t>(st.cfg.num_stages), 0);
  st.stages = stage_watch(st.cfg.num_stages);
  // SIGTERM (the node's exit message): no new microbatches, and those in flight
  // finish for at most stop_drain, so that every gradient a server added is one
  // this trainer saw acknowledged (and counted); then report and go. Any other
  // exit (a linked load balancer or evaluator gone) ends it at once.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    const bool from_own = (st.evaluator && msg.source == st.evaluator.address()) ||
                          std::any_of(st.balancers.begin(), st.balancers.end(),
                                      [&](const caf::actor& lb) { return msg.source == lb.address(); });
    if (msg.reason == caf::exit_reason::user_shutdown && !from_own && !st.stop_asked) {
      st.stop_asked = true;
      st.draining = true;
      self->delayed_send(self, stop_drain, trainer_local::drain_over{});
      maybe_finish(self);
      return;
    }
    report_exit(self);
    self->quit(msg.reason);
  });
  if (st.cfg.resume)
    st.metrics->emit("checkpoint_load", {{"stage", int64_t{-1}},
                                         {"trainer", st.cfg.trainer_id},
                                         {"step", st.step},
                                         {"samples", st.samples},
                                         {"slot", int64_t{st.cfg.slot}}});
  if (st.cfg.train.max_steps > 0 && st.step >= st.cfg.train.max_steps) {
    get_logger("trainer")->warn("resumed at step {}, already at --max-steps {}: nothing to train", st.step,
                                st.cfg.train.max_steps);
    st.draining = true;
    maybe_finish(self);
    return {};
  }
  if (!st.cfg.eval_set.empty() && st.cfg.train.eval_every > 0) {
    // Validation first: the loss of the weights training starts from.
    st.evaluator = self->spawn<caf::linked>(
        evaluator, evaluator_settings{st.cfg.trainer_id, st.cfg.num_stages, st.cfg.train, st.cfg.eval_set},
        st.balancers);
    run_eval(self, true);
  } else {
    launch(self);
  }
  // Everything arrives as responses; the behavior only keeps the actor alive.
  return {[self](trainer_local::drain_over) {  // what is still in flight is reported as such
    report_exit(self);
    self->quit(caf::exit_reason::user_shutdown);
  }};
}

}  // namespace swarm
