// The stage server's reloads (actors/stage_server_averaging.hpp): a server
// given up in a round, or told its parameters differ, copies an up-to-date
// peer's state; with the stage's state lost, it loads the newest checkpoint.
#include "actors/stage_server_averaging.hpp"

#include <caf/all.hpp>

#include "actors/dial.hpp"
#include "actors/stage_server_checkpoint.hpp"
#include "actors/stage_server_move.hpp"
#include "base/log.hpp"
#include "messages/wire.hpp"

namespace swarm::averaging {

namespace {

int64_t stage(server_ptr self) { return self->state.worker->span().stage; }

}  // namespace

void on_reload(server_ptr self, const encoded<proto::reload_order>& bytes, const caf::actor& peer) {
  auto& st = self->state;
  auto order = decode(bytes);
  if (!order || st.avg.reloading || !moving::accept_term(self, order->term(), "reload"))
    return;
  if (!peer) {  // the stage's state was lost: its newest checkpoint, if ahead of this server
    if (st.avg.in_round() || st.member.draining() || order->stage() != static_cast<uint32_t>(stage(self)))
      return;
    settle_held(self);
    const int64_t before = st.worker->steps();
    auto carried = st.worker->take_gradient();
    auto loaded = checkpointing::load_if_ahead(self);
    carry_over(self, std::move(carried), before, "checkpoint_reload");
    if (loaded && *loaded) {
      st.avg.hash = st.worker->parameter_hash();
      emit_params(self);
      report_progress(self, true);
    } else if (!loaded) {
      get_logger("stage_server")->error("stage {}: {}", stage(self), describe(loaded.error()));
    }
    return;
  }
  if (st.avg.in_round() || st.member.draining()) {
    ++st.avg.reloads;  // turned down: the averager may ask again after the round (a leaving server needs none)
    report_progress(self, true);
    return;
  }
  st.avg.reloading = true;
  proto::state_request req;
  req.set_stage(static_cast<uint32_t>(stage(self)));
  req.set_server_id(st.cfg.server_id);
  // Dialed first: the averager's handle may carry a route through a coordinator that died.
  dial_then(self, "stage " + std::to_string(stage(self)), order->from_endpoint(),
            [self, req, from = order->from_server_id(), peer, expected = std::make_pair(order->step(), order->hash())] {
              const auto started = std::chrono::steady_clock::now();
              auto handle = caf::actor_cast<stage_actor>(peer);
              self->request(handle, std::chrono::seconds(120), state_atom::value, uint64_t{0}, wrap(req))
                  .then(
                      [self, handle, from, started, expected](uint64_t transfer_id, encoded<proto::state_reply>& tail) {
                        auto& st = self->state;
                        st.avg.reloading = false;
                        ++st.avg.reloads;
                        settle_held(self);
                        const int64_t before = st.worker->steps();
                        auto carried = st.worker->take_gradient();
                        auto err = adopt_state(*st.worker,
                                               st.chunks.finish(handle.address(), transfer_id, std::move(tail.bytes)),
                                               st.cfg.server_id, from, started, *st.metrics, expected);
                        carry_over(self, std::move(carried), before, "reload");
                        st.avg.hash = st.worker->parameter_hash();
                        if (err)
                          get_logger("stage_server")
                              ->warn("stage {}: reload from {} failed: {}", stage(self), from, describe(err));
                        else
                          emit_params(self);
                        report_progress(self, true);
                        moving::resume(self);
                      },
                      [self, from](caf::error& err) {
                        self->state.avg.reloading = false;
                        ++self->state.avg.reloads;
                        report_progress(self, true);
                        get_logger("stage_server")
                            ->warn("stage {}: reload from {} failed: {}", stage(self), from, describe(err));
                        moving::resume(self);
                      });
            });
}

}  // namespace swarm::averaging
