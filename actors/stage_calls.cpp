#include "actors/stage_calls.hpp"

#include <algorithm>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "messages/errors.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

/// The request is for this stage and well-formed: the codec its reply takes.
template <class Req>
caf::expected<proto::codec> check_call(const stage_worker& worker, const Req& req) {
  const auto& span = worker.span();
  if (static_cast<int64_t>(req.stage()) != span.stage)
    return make_error(errc::UNKNOWN_STAGE, "request for stage " + std::to_string(req.stage()) +
                                               " reached the server of stage " + std::to_string(span.stage));
  if (auto err = check_request(req, span.num_stages))
    return err;
  if (!proto::codec_IsValid(req.reply_codec()))  // the sender's mistake
    return make_error(errc::BAD_REQUEST, "unknown reply_codec " + std::to_string(req.reply_codec()));
  return static_cast<proto::codec>(req.reply_codec());
}

/// What every call opens with: the request checked, its inputs decoded.
struct opened_call {
  proto::codec codec;  ///< the reply's
  torch::Tensor inputs;
};

template <class Req>
caf::expected<opened_call> open_call(const stage_worker& worker, Req& req) {
  const auto codec = check_call(worker, req);
  if (!codec)
    return codec.error();
  auto inputs = decode_tensor(std::move(*req.mutable_inputs()), "inputs", worker.device());
  if (!inputs)
    return inputs.error();
  return opened_call{*codec, std::move(*inputs)};
}

/// The activation cache's key of a microbatch: its trainer and id.
template <class Req>
std::string cache_key(const Req& req) {
  return req.trainer_id() + "#" + std::to_string(req.microbatch_id());
}

}  // namespace

caf::expected<proto::forward_reply> serve_forward(stage_worker& worker, proto::forward_request&& req,
                                                  const commit_gate& gate) {
  auto call = open_call(worker, req);
  if (!call)
    return call.error();
  std::optional<torch::Tensor> targets;
  if (req.has_targets()) {
    auto t = decode_tensor(std::move(*req.mutable_targets()), "targets", worker.device());
    if (!t)
      return t.error();
    targets = std::move(*t);
  }
  if (req.eval() && targets) {  // validation on the last stage: the loss, nothing accumulated
    auto loss = worker.evaluate(call->inputs, *targets);
    if (!loss)
      return to_caf(loss.error());
    proto::forward_reply reply;
    reply.set_loss(*loss);
    reply.set_server_step(static_cast<uint64_t>(worker.steps()));
    return reply;
  }
  if (req.logits() && worker.span().has_head()) {  // generation: the next token's logits, nothing accumulated
    auto logits = worker.next_logits(call->inputs);
    if (!logits)
      return to_caf(logits.error());
    proto::forward_reply reply;
    *reply.mutable_outputs() = encode_tensor(*logits, call->codec);
    reply.set_server_step(static_cast<uint64_t>(worker.steps()));
    return reply;
  }
  // A second opinion on the last stage (issue #47) answers as in training, nothing accumulated.
  auto r = req.verify() && targets ? worker.verify(call->inputs, *targets)
                                   : worker.forward(call->inputs, targets ? &*targets : nullptr, gate, cache_key(req));
  if (!r)
    return to_caf(r.error());
  proto::forward_reply reply;
  if (r->outputs.defined())
    *reply.mutable_outputs() = encode_tensor(r->outputs, call->codec);
  if (r->input_grad.defined())
    *reply.mutable_input_grad() = encode_tensor(r->input_grad, call->codec);
  reply.set_loss(r->loss);
  reply.set_duplicate(r->duplicate);
  reply.set_server_step(static_cast<uint64_t>(worker.steps()));
  return reply;
}

caf::expected<proto::backward_reply> serve_backward(stage_worker& worker, proto::backward_request&& req,
                                                    const commit_gate& gate) {
  auto call = open_call(worker, req);
  if (!call)
    return call.error();
  auto output_grad = decode_tensor(std::move(*req.mutable_output_grad()), "output_grad", worker.device());
  if (!output_grad)
    return output_grad.error();
  auto r = worker.backward(
      call->inputs, *output_grad, gate,
      req.has_forward_step()
          ? std::optional<int64_t>(static_cast<int64_t>(std::min<uint64_t>(req.forward_step(), uint64_t{1} << 62)))
          : std::nullopt,
      cache_key(req));
  if (!r)
    return to_caf(r.error());
  proto::backward_reply reply;
  if (r->input_grad.defined())
    *reply.mutable_input_grad() = encode_tensor(r->input_grad, call->codec);
  reply.set_duplicate(r->duplicate);
  reply.set_server_step(static_cast<uint64_t>(worker.steps()));
  return reply;
}

void replace_with_noise(proto::tensor& t, uint64_t seed) {
  if (t.data().empty())
    return;
  auto decoded = decode_tensor(t, "outputs");
  if (!decoded || decoded->numel() == 0)
    return;
  const auto x = decoded->to(torch::kFloat32);
  auto gen = at::detail::createCPUGenerator(seed);
  auto noise = torch::randn(x.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat32)) * x.std() + x.mean();
  t = encode_tensor(noise.to(decoded->scalar_type()), t.codec());
}

}  // namespace swarm
