#include "actors/stage_calls.hpp"

#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

caf::error check_served_stage(uint32_t stage, const stage_span& span) {
  if (static_cast<int64_t>(stage) != span.stage)
    return make_error(errc::UNKNOWN_STAGE, "request for stage " + std::to_string(stage) + " reached the server of stage " +
                                               std::to_string(span.stage));
  return caf::none;
}

/// The codec a reply's float tensors use; an unknown value is the sender's mistake.
caf::expected<proto::codec> reply_codec(int value) {
  if (!proto::codec_IsValid(value))
    return make_error(errc::BAD_REQUEST, "unknown reply_codec " + std::to_string(value));
  return static_cast<proto::codec>(value);
}

} // namespace

caf::expected<proto::forward_reply> serve_forward(stage_worker& worker, const proto::forward_request& req,
                                                  const commit_gate& gate) {
  if (auto err = check_served_stage(req.stage(), worker.span()))
    return err;
  if (auto err = check_request(req, worker.span().num_stages))
    return err;
  const auto codec = reply_codec(req.reply_codec());
  if (!codec)
    return codec.error();
  auto inputs = decode_tensor(req.inputs(), "inputs", worker.device());
  if (!inputs)
    return inputs.error();
  std::optional<torch::Tensor> targets;
  if (req.has_targets()) {
    auto t = decode_tensor(req.targets(), "targets", worker.device());
    if (!t)
      return t.error();
    targets = std::move(*t);
  }
  auto r = worker.forward(*inputs, targets ? &*targets : nullptr, gate);
  if (!r)
    return r.error();
  proto::forward_reply reply;
  if (r->outputs.defined())
    *reply.mutable_outputs() = encode_tensor(r->outputs, *codec);
  if (r->input_grad.defined())
    *reply.mutable_input_grad() = encode_tensor(r->input_grad, *codec);
  reply.set_loss(r->loss);
  reply.set_duplicate(r->duplicate);
  reply.set_server_step(static_cast<uint64_t>(worker.steps()));
  return reply;
}

caf::expected<proto::backward_reply> serve_backward(stage_worker& worker, const proto::backward_request& req,
                                                    const commit_gate& gate) {
  if (auto err = check_served_stage(req.stage(), worker.span()))
    return err;
  if (auto err = check_request(req, worker.span().num_stages))
    return err;
  const auto codec = reply_codec(req.reply_codec());
  if (!codec)
    return codec.error();
  auto inputs = decode_tensor(req.inputs(), "inputs", worker.device());
  if (!inputs)
    return inputs.error();
  auto output_grad = decode_tensor(req.output_grad(), "output_grad", worker.device());
  if (!output_grad)
    return output_grad.error();
  auto r = worker.backward(*inputs, *output_grad, gate);
  if (!r)
    return r.error();
  proto::backward_reply reply;
  if (r->input_grad.defined())
    *reply.mutable_input_grad() = encode_tensor(r->input_grad, *codec);
  reply.set_duplicate(r->duplicate);
  reply.set_server_step(static_cast<uint64_t>(worker.steps()));
  return reply;
}

} // namespace swarm
