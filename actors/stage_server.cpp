#include "actors/stage_server.hpp"

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

using self_ptr = stage_actor::stateful_pointer<stage_server_state>;
using reply_t = caf::result<uint64_t, std::string>;

/// Steps the optimizer once enough samples are accumulated.
void maybe_step(self_ptr self) {
  auto& st = self->state;
  if (st.worker->accumulated_samples() < st.cfg.batch_size)
    return;
  const int64_t samples = st.worker->accumulated_samples();
  st.worker->apply_step();
  get_logger("stage_server")->debug("stage {}: step {} over {} samples", st.worker->span().stage,
                                    st.worker->steps(), samples);
  st.metrics->emit("server_step", {{"stage", int64_t{st.worker->span().stage}},
                                   {"server", st.cfg.server_id},
                                   {"step", st.worker->steps()},
                                   {"samples", samples}});
}

/// Sends the leading chunks of `payload` to the requester and returns the tail.
reply_t send_reply(self_ptr self, std::string payload) {
  auto p = cut(std::move(payload), static_cast<size_t>(self->state.cfg.chunk_bytes), self->state.next_transfer);
  send_lead(self, caf::actor_cast<caf::actor>(self->current_sender()), p);
  return {p.transfer_id, std::move(p.tail)};
}

reply_t reject(self_ptr self, const char* op, caf::error err) {
  ++self->state.rejected;
  get_logger("stage_server")->warn("stage {}: rejected {} from {}: {}", self->state.worker->span().stage, op,
                                   caf::to_string(self->current_sender()), describe(err));
  return err;
}

/// Reassembles, decodes, validates and runs one request of type Req on `run`.
template <class Req, class Run>
reply_t handle(self_ptr self, const char* op, uint64_t transfer_id, std::string tail, Run run) {
  auto& st = self->state;
  auto payload = st.chunks.finish(caf::actor_cast<caf::actor_addr>(self->current_sender()), transfer_id, std::move(tail));
  if (!payload)
    return reject(self, op, payload.error());
  auto req = decode<Req>(*payload, op);
  if (!req)
    return reject(self, op, req.error());
  auto rep = run(*req);
  if (!rep)
    return reject(self, op, rep.error());
  ++st.served;
  maybe_step(self);
  return send_reply(self, encode(*rep));
}

} // namespace

stage_actor::behavior_type stage_server(self_ptr self, stage_server_config cfg, std::shared_ptr<stage_worker> worker,
                                        std::shared_ptr<metrics_sink> metrics) {
  self->state.cfg = std::move(cfg);
  self->state.worker = std::move(worker);
  self->state.metrics = std::move(metrics);
  // A trainer that dies mid-transfer leaves partial payloads; drop them with it.
  self->set_down_handler([self](caf::down_msg& msg) {
    self->state.chunks.forget(msg.source);
    self->state.chunk_senders.erase(msg.source);
  });
  return {
      [self](forward_atom, uint64_t transfer_id, std::string tail) -> reply_t {
        return handle<proto::forward_request>(self, "forward_request", transfer_id, std::move(tail),
                                              [self](const proto::forward_request& r) {
                                                return self->state.worker->forward(r);
                                              });
      },
      [self](backward_atom, uint64_t transfer_id, std::string tail) -> reply_t {
        return handle<proto::backward_request>(self, "backward_request", transfer_id, std::move(tail),
                                               [self](const proto::backward_request& r) {
                                                 return self->state.worker->backward(r);
                                               });
      },
      [self](chunk_atom, uint64_t transfer_id, const std::string& piece) {
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (self->state.chunk_senders.insert(from).second)
          self->monitor(from);
        self->state.chunks.add(from, transfer_id, piece);
      },
  };
}

} // namespace swarm
