#include "apps/remote_logits.hpp"

#include <unistd.h>

#include <caf/all.hpp>

#include "apps/balancer_config.hpp"
#include "apps/node.hpp"
#include "base/clock.hpp"
#include "messages/errors.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"

namespace swarm {

struct remote_logits::impl {
  app_config cfg;
  std::string id = "g" + std::to_string(::getpid());
  node n;
  std::vector<caf::actor> balancers;
  uint64_t next_id = 1;

  explicit impl(const app_config& c) : cfg(c), n(cfg, "generate " + id, "generate", nullptr) {}
};

result<std::unique_ptr<remote_logits>> remote_logits::connect(const app_config& cfg) {
  std::unique_ptr<remote_logits> r(new remote_logits);
  r->impl_ = std::make_unique<impl>(cfg);
  auto& m = *r->impl_;
  auto& sys = m.n.start();
  auto coord = m.n.connect(m.cfg.server.coordinator);
  auto bulk = m.n.bulk();
  for (int s = 0; s < m.cfg.stages; ++s)
    m.balancers.push_back(sys.spawn(load_balancer, balancer_config(m.cfg, m.id, s, bulk), coord, m.n.metrics()));
  m.n.phase("generating");
  return r;
}

remote_logits::~remote_logits() = default;

void remote_logits::end(int code) { impl_->n.end(code); }

result<at::Tensor> remote_logits::next(const std::vector<int64_t>& tokens, int64_t window) {
  auto& m = *impl_;
  const auto& t = m.cfg.trainer;
  const auto deadline = seconds(t.no_server_wait_s + t.attempts.max_attempts * t.forward_timeout_s + 10);
  const std::vector<int64_t> ids(tokens.begin() + window, tokens.end());
  proto::tensor inputs = make_int64_tensor(ids, {1, static_cast<int64_t>(ids.size())});
  const int stages = static_cast<int>(m.balancers.size());
  for (int stage = 0; stage < stages; ++stage) {
    const bool last = stage == stages - 1;
    proto::forward_request req;
    req.set_microbatch_id(m.next_id++);
    req.set_stage(static_cast<uint32_t>(stage));
    req.set_trainer_id(m.id);
    *req.mutable_inputs() = std::move(inputs);
    req.set_logits(last);
    // Logits travel exactly: a quantised one could change the argmax.
    req.set_reply_codec(last ? proto::RAW : codec_of(t.compression));
    auto rep = forward_blocking(m.n.sys(), m.balancers[static_cast<size_t>(stage)], std::move(req), 1, deadline);
    if (!rep)
      return error(code_of(rep.error()),
                   "stage " + std::to_string(stage) + " could not serve: " + describe(rep.error()));
    if (!last) {
      inputs = std::move(*rep->mutable_outputs());
      continue;
    }
    auto logits = decode_tensor(rep->outputs(), "logits");
    if (!logits)
      return error(errc::BAD_REQUEST, "the last stage's logits: " + describe(logits.error()));
    if (logits->dim() != 2 || logits->size(0) != 1 || logits->size(1) != m.cfg.model.vocab)
      return error(errc::WRONG_SHAPE, "the last stage's logits are not [1, vocab]: is it another model?");
    return logits->select(0, 0);
  }
  return error(errc::BAD_CONFIG, "--stages is 0");
}

}  // namespace swarm
