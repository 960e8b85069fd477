// The trainer's microbatches (actors/trainer.hpp): each launched, sent
// forward stage by stage and backward again through the stages' load
// balancers, completed or dropped. Steps, evaluation and reports are
// actors/trainer.cpp's.
#include "actors/trainer_microbatches.hpp"

#include <caf/all.hpp>

#include "base/log.hpp"
#include "messages/errors.hpp"
#include "messages/protocol.hpp"
#include "messages/wire.hpp"

namespace swarm::training {

namespace {

void send_backward(self_ptr self, uint64_t id, int stage, proto::tensor output_grad);

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

}  // namespace

void launch(self_ptr self) {
  auto& st = self->state;
  while (!st.draining && static_cast<int>(st.live.size()) < st.cfg.train.in_flight) {
    const auto drawn = sample_microbatch(*st.text, st.cfg.model.microbatch, st.cfg.model.seq_len, st.rng);
    if (!drawn) {  // a shard changed under the trainer (data/shard.hpp): finish what is in flight, then stop
      get_logger("trainer")->error("{}: no more microbatches", drawn.error().what());
      st.draining = true;
      maybe_finish(self);
      return;
    }
    const auto& tokens = *drawn;
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

}  // namespace swarm::training
