#include "actors/trainer.hpp"
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
#include "messages/wire.hpp"

namespace swarm {

namespace {

using self_ptr = caf::stateful_actor<trainer_state>*;
using clock = trainer_state::clock;

int last_stage(self_ptr self) {
  return self->state.cfg.num_stages - 1;
}

int64_t busy_answers(const trainer_state& st) {
  return st.cfg.busy_answers ? st.cfg.busy_answers->load(std::memory_order_relaxed) : 0;
}

/// How long the trainer waits for a load balancer: every attempt, plus waiting
/// for a server, plus slack, so the balancer always answers first.
caf::timespan request_deadline(self_ptr self, double attempt_timeout_s) {
  const auto& t = self->state.cfg.train;
  return seconds(t.no_server_wait_s + t.attempts.max_attempts * attempt_timeout_s + 10);
}

void send_forward(self_ptr self, uint64_t id, int stage);
void send_backward(self_ptr self, uint64_t id, int stage, proto::tensor output_grad);
void launch(self_ptr self);

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
  std::string acked;
  for (auto n : st.acked)
    acked += (acked.empty() ? "" : ",") + std::to_string(n);
  get_logger("trainer")->info("{}: {} steps, {} microbatches issued, {} completed, {} dropped, {} in flight; acked "
                              "samples per stage {}; stage steps {}",
                              st.live.empty() && !st.stop_asked ? "done" : "stopped", st.step, st.issued, st.completed, st.dropped,
                              st.live.size(), acked, st.stages.steps_text());
  if (const auto lag = st.stages.stalled(stage_lag_allowed))
    get_logger("trainer")->warn("stage {} ended at optimizer step {}, where it stayed while stage {} took {} steps: "
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

void maybe_finish(self_ptr self) {
  auto& st = self->state;
  if (st.draining && st.live.empty() && !st.eval_pending) {
    report_exit(self);
    for (auto& lb : st.balancers)
      self->send_exit(lb, caf::exit_reason::user_shutdown);
    self->quit();
  }
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
  get_logger("trainer")->warn("stage {} has stayed at optimizer step {} while stage {} took {} steps (stage steps {}): "
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
            get_logger("trainer")->info("validation at step {}: loss {:.4f} (perplexity {:.1f}) on {} samples in "
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
                            {"wire_bytes_per_sample",
                             static_cast<double>(st.wire_bytes) / static_cast<double>(std::max<int64_t>(st.samples, 1))}});
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

void complete(self_ptr self, uint64_t id, float loss) {
  auto& st = self->state;
  auto it = st.live.find(id);
  const int64_t n = it->second.samples;
  st.live.erase(it);
  ++st.completed;
  st.samples += n;
  st.step_samples += n;
  st.step_loss_sum += loss;
  ++st.step_microbatches;
  // Microbatches still finishing after the last step count as samples, not as a step.
  if (st.step_samples >= st.cfg.train.batch_size && !st.draining)
    emit_step(self);
  launch(self);
  maybe_finish(self);
}

/// The load balancer gave up on a stage request: drop the microbatch, counted.
void drop(self_ptr self, uint64_t id, int stage, bool forward, const caf::error& err) {
  auto& st = self->state;
  get_logger("trainer")->warn("microbatch {} dropped at stage {} {}: {}", id, stage, forward ? "forward" : "backward",
                              describe(err));
  st.metrics->emit("dropped", {{"trainer", st.cfg.trainer_id},
                               {"microbatch", static_cast<int64_t>(id)},
                               {"stage", int64_t{stage}},
                               {"op", std::string{forward ? "forward" : "backward"}},
                               {"reason", describe(err)}});
  st.live.erase(id);
  ++st.dropped;
  launch(self);
  maybe_finish(self);
}

/// A stage request succeeded after `attempts` attempts; `commits`: it added gradients.
void on_success(self_ptr self, uint64_t id, int stage, int32_t attempts, bool commits) {
  auto& st = self->state;
  st.retries += attempts - 1;
  if (commits)
    st.acked[stage] += st.live.at(id).samples;
}

/// A stage request's header: which microbatch, stage and trainer, and the
/// codec its reply takes.
template <class Req>
Req addressed(const trainer_state& st, uint64_t id, int stage) {
  Req req;
  req.set_microbatch_id(id);
  req.set_stage(static_cast<uint32_t>(stage));
  req.set_trainer_id(st.cfg.trainer_id);
  req.set_reply_codec(codec_of(st.cfg.train.compression));
  return req;
}

void send_forward(self_ptr self, uint64_t id, int stage) {
  auto& st = self->state;
  auto& mb = st.live.at(id);
  auto req = addressed<proto::forward_request>(st, id, stage);
  // The balancer keeps what it sends for its retries, so the trainer needs a
  // stage's inputs again only for that stage's backward: the last stage has
  // none (its forward returns the input gradient), so its inputs move.
  if (stage == last_stage(self)) {
    *req.mutable_inputs() = std::move(mb.inputs[stage]);
    *req.mutable_targets() = std::move(mb.targets);
  } else {
    *req.mutable_inputs() = mb.inputs[stage];
  }
  auto parts = encode_parts(req);
  st.wire_bytes += parts_size(parts);
  self->request(st.balancers[stage], request_deadline(self, st.cfg.train.forward_timeout_s), forward_atom::value,
                std::move(parts), mb.samples)
      .then(
          [self, id, stage](std::vector<std::string>& parts, const std::string& server, int32_t attempts) {
            self->state.wire_bytes += parts_size(parts);
            auto rep = decode_parts<proto::forward_reply>(std::move(parts), "forward_reply");
            caf::error err = rep ? caf::error{} : rep.error();
            if (!err && stage == last_stage(self) && stage > 0)
              err = check_tensor(rep->input_grad(), "input_grad");
            else if (!err && stage != last_stage(self))
              err = check_tensor(rep->outputs(), "outputs");
            if (err) {
              drop(self, id, stage, true, err);
              return;
            }
            on_success(self, id, stage, attempts, stage == last_stage(self));
            self->state.stages.observe(stage, static_cast<int64_t>(rep->server_step()));
            auto& mb = self->state.live.at(id);
            mb.servers[stage] = server;
            mb.forward_steps[stage] = rep->server_step();
            if (stage != last_stage(self)) {
              mb.inputs[stage + 1] = std::move(*rep->mutable_outputs());
              send_forward(self, id, stage + 1);
            } else if (stage == 0) {
              complete(self, id, rep->loss());
            } else {
              // The loss is known now; the microbatch completes when stage 0's backward returns.
              mb.loss = rep->loss();
              send_backward(self, id, stage - 1, std::move(*rep->mutable_input_grad()));
            }
          },
          [self, id, stage](caf::error& err) { drop(self, id, stage, true, err); });
}

void send_backward(self_ptr self, uint64_t id, int stage, proto::tensor output_grad) {
  auto& st = self->state;
  auto& mb = st.live.at(id);
  auto req = addressed<proto::backward_request>(st, id, stage);
  *req.mutable_inputs() = std::move(mb.inputs[stage]);  // its last use: retries are the balancer's
  *req.mutable_output_grad() = std::move(output_grad);
  req.set_forward_step(mb.forward_steps[stage]);
  auto parts = encode_parts(req);
  st.wire_bytes += parts_size(parts);
  self->request(st.balancers[stage], request_deadline(self, st.cfg.train.backward_timeout_s), backward_atom::value,
                std::move(parts), mb.samples, mb.servers[stage])
      .then(
          [self, id, stage](std::vector<std::string>& parts, const std::string&, int32_t attempts) {
            self->state.wire_bytes += parts_size(parts);
            auto rep = decode_parts<proto::backward_reply>(std::move(parts), "backward_reply");
            caf::error err = rep ? caf::error{} : rep.error();
            if (!err && stage > 0)
              err = check_tensor(rep->input_grad(), "input_grad");
            if (err) {
              drop(self, id, stage, false, err);
              return;
            }
            on_success(self, id, stage, attempts, true);
            self->state.stages.observe(stage, static_cast<int64_t>(rep->server_step()));
            if (stage == 0)
              complete(self, id, self->state.live.at(id).loss);
            else
              send_backward(self, id, stage - 1, std::move(*rep->mutable_input_grad()));
          },
          [self, id, stage](caf::error& err) { drop(self, id, stage, false, err); });
}

/// Starts new microbatches until in_flight are live (unless draining).
void launch(self_ptr self) {
  auto& st = self->state;
  while (!st.draining && static_cast<int>(st.live.size()) < st.cfg.train.in_flight) {
    const auto tokens = sample_microbatch(*st.text, st.cfg.model.microbatch, st.cfg.model.seq_len, st.rng);
    const uint64_t id = ++st.next_id;
    auto& mb = st.live[id];
    mb.inputs.resize(static_cast<size_t>(st.cfg.num_stages));
    mb.servers.resize(static_cast<size_t>(st.cfg.num_stages));
    mb.forward_steps.resize(static_cast<size_t>(st.cfg.num_stages));
    mb.inputs[0] = make_int64_tensor(tokens.inputs, {tokens.batch, tokens.seq_len});
    mb.targets = make_int64_tensor(tokens.targets, {tokens.batch, tokens.seq_len});
    mb.samples = tokens.batch;
    ++st.issued;
    send_forward(self, id, 0);
  }
}

} // namespace

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
      self->delayed_send(self, stop_drain, deadline_atom::value);
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
  return {[](tick_atom) {},
          [self](deadline_atom) {  // stop_drain is over: what is still in flight is reported as such
            report_exit(self);
            self->quit(caf::exit_reason::user_shutdown);
          }};
}

} // namespace swarm
