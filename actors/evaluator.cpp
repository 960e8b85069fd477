#include "actors/evaluator.hpp"

#include <cmath>
#include <limits>
#include <optional>

#include <caf/all.hpp>

#include "base/clock.hpp"
#include "base/log.hpp"
#include "messages/errors.hpp"
#include "messages/protocol.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

using self_ptr = caf::stateful_actor<evaluator_state>*;

void fill(self_ptr self);

void finish_one(self_ptr self, int64_t samples, std::optional<float> loss) {
  auto& st = self->state;
  --st.live;
  if (loss) {
    st.loss_sum += static_cast<double>(*loss) * static_cast<double>(samples);
    st.samples += samples;
  } else {
    st.failed += samples;
  }
  fill(self);
}

void send_stage(self_ptr self, uint64_t id, int stage, proto::tensor inputs, const proto::tensor& targets,
                int64_t samples) {
  auto& st = self->state;
  const bool last = stage == st.cfg.num_stages - 1;
  proto::forward_request req;
  req.set_microbatch_id(id);
  req.set_stage(static_cast<uint32_t>(stage));
  req.set_trainer_id(st.cfg.trainer_id);
  *req.mutable_inputs() = std::move(inputs);
  if (last) {
    *req.mutable_targets() = targets;
    req.set_eval(true);
  }
  req.set_reply_codec(codec_of(st.cfg.train.compression));
  const auto& t = st.cfg.train;
  const auto deadline = seconds(t.no_server_wait_s + t.attempts.max_attempts * t.forward_timeout_s + 10);
  self->request(st.balancers[static_cast<size_t>(stage)], deadline, forward_atom::value, encode_parts(req), samples)
      .then(
          [self, id, stage, last, targets, samples](std::vector<std::string>& parts, const std::string&, int32_t) {
            auto rep = decode_parts<proto::forward_reply>(std::move(parts), "forward_reply");
            caf::error err = rep ? caf::error{} : rep.error();
            if (!err && !last)
              err = check_tensor(rep->outputs(), "outputs");
            if (!err && last && !std::isfinite(rep->loss()))
              err = make_error(errc::NON_FINITE, "validation loss is not finite");
            if (err) {
              get_logger("evaluator")->warn("validation microbatch failed at stage {}: {}", stage, describe(err));
              finish_one(self, samples, std::nullopt);
            } else if (last) {
              finish_one(self, samples, rep->loss());
            } else {
              send_stage(self, id, stage + 1, std::move(*rep->mutable_outputs()), targets, samples);
            }
          },
          [self, stage, samples](caf::error& err) {
            get_logger("evaluator")->warn("validation microbatch failed at stage {}: {}", stage, describe(err));
            finish_one(self, samples, std::nullopt);
          });
}

/// Sends microbatches until in_flight are out; answers once all are back.
void fill(self_ptr self) {
  auto& st = self->state;
  while (st.next < st.cfg.windows.size() && st.live < st.cfg.train.in_flight) {
    const auto& w = st.cfg.windows[st.next++];
    ++st.live;
    send_stage(self, st.next_id++, 0, make_int64_tensor(w.inputs, {w.batch, w.seq_len}),
               make_int64_tensor(w.targets, {w.batch, w.seq_len}), w.batch);
  }
  if (st.live > 0 || st.next < st.cfg.windows.size() || !st.measuring)
    return;
  st.measuring = false;
  const double loss =
      st.samples > 0 ? st.loss_sum / static_cast<double>(st.samples) : std::numeric_limits<double>::quiet_NaN();
  st.answer.deliver(loss, st.samples, st.failed, seconds_since(st.started));
}

}  // namespace

caf::behavior evaluator(self_ptr self, evaluator_settings cfg, std::vector<caf::actor> balancers) {
  self->state.cfg = std::move(cfg);
  self->state.balancers = std::move(balancers);
  return {
      [self](eval_atom) -> caf::response_promise {
        auto& st = self->state;
        auto rp = self->make_response_promise();
        if (st.measuring) {
          rp.deliver(make_error(errc::BAD_REQUEST, "a validation measurement is already under way"));
          return rp;
        }
        st.measuring = true;
        st.answer = rp;
        st.next = 0;
        st.loss_sum = 0;
        st.samples = st.failed = 0;
        st.started = std::chrono::steady_clock::now();
        fill(self);
        return rp;
      },
  };
}

}  // namespace swarm
