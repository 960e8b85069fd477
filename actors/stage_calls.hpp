#pragma once
// The stage server's boundary between the wire and the model: checks a request
// (served stage, well-formed tensors), decodes its tensors onto the worker's
// device, runs the worker, and encodes the reply's float tensors with the codec
// the request asks for (the trainer's --compression). Torch-free header.

#include <caf/expected.hpp>

#include "models/stage_worker.hpp"
#include "swarm.pb.h"

namespace swarm {

/// UNKNOWN_STAGE when `req` is for another stage; BAD_REQUEST when malformed;
/// then whatever stage_worker::forward says. Takes the bytes of `req`'s
/// tensors (a raw tensor's become the decoded tensor's memory): `req` keeps
/// every other field, its tensors' data is empty afterwards.
[[nodiscard]] caf::expected<proto::forward_reply> serve_forward(stage_worker& worker, proto::forward_request&& req,
                                                                const commit_gate& gate = {});

/// As serve_forward, for stage_worker::backward.
[[nodiscard]] caf::expected<proto::backward_reply> serve_backward(stage_worker& worker, proto::backward_request&& req,
                                                                  const commit_gate& gate = {});

/// The `noise` fault (--fault noise, with --allow-faults; issue #47): `t`'s
/// values replaced by Gaussian noise of their own mean and standard deviation,
/// drawn from `seed`, in `t`'s dtype and codec: an answer of the right shape
/// and scale that computed nothing, as a server saving its compute would
/// send. An empty or undecodable tensor is left as it is.
void replace_with_noise(proto::tensor& t, uint64_t seed);

/// On a copy of `req` (tests that send one request twice).
[[nodiscard]] inline caf::expected<proto::forward_reply> serve_forward(stage_worker& worker,
                                                                       const proto::forward_request& req,
                                                                       const commit_gate& gate = {}) {
  return serve_forward(worker, proto::forward_request(req), gate);
}

[[nodiscard]] inline caf::expected<proto::backward_reply> serve_backward(stage_worker& worker,
                                                                         const proto::backward_request& req,
                                                                         const commit_gate& gate = {}) {
  return serve_backward(worker, proto::backward_request(req), gate);
}

}  // namespace swarm
