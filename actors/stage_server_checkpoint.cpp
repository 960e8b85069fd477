#include "actors/stage_server_checkpoint.hpp"
#include "base/clock.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "base/log.hpp"
#include "messages/errors.hpp"

namespace swarm::checkpointing {

namespace {

using clock_type = std::chrono::steady_clock;

/// Writes the stage's state now (`checkpoint` event); errors are logged, not fatal.
void write_now(stage_actor::stateful_pointer<stage_server_state> self) {
  auto& st = self->state;
  const int stage = st.worker->span().stage;
  const int64_t step = st.worker->steps();
  const auto started = clock_type::now();
  const auto state = st.worker->export_state();
  checkpoint_header h{checkpoint_header::kind::stage, stage, static_cast<uint32_t>(st.cfg.num_stages),
                      st.cfg.model.hash(), step};
  auto written = st.cfg.checkpoints.store->write(h, state);
  const double secs = seconds_since(started);
  if (!written) {
    // Training goes on: a full disk must not stop the swarm, but it must be seen.
    get_logger("stage_server")
        ->error("stage {}: checkpoint at step {} failed: {}", stage, step, describe(written.error()));
    return;
  }
  get_logger("stage_server")
      ->debug("stage {}: checkpoint at step {} written to {} ({} bytes, {:.3f} s)", stage, step, *written, state.size(),
              secs);
  st.metrics->emit("checkpoint", {{"stage", int64_t{stage}},
                                  {"server", st.cfg.server_id},
                                  {"step", step},
                                  {"file", *written},
                                  {"bytes", static_cast<int64_t>(state.size())},
                                  {"seconds", secs}});
}

}  // namespace

void after_round(stage_actor::stateful_pointer<stage_server_state> self) {
  auto& st = self->state;
  const auto& ck = st.cfg.checkpoints;
  if (!ck.store || !st.avg.round || !st.avg.round->writer)
    return;
  const double since_s = seconds_since(st.member.serving_since);
  if (checkpoint_due(st.worker->steps(),
                     ck.store->latest_written(checkpoint_header::kind::stage, st.worker->span().stage), ck.every_steps,
                     ck.every_s, since_s))
    write_now(self);
}

void on_stop(stage_actor::stateful_pointer<stage_server_state> self) {
  auto& st = self->state;
  if (!st.cfg.checkpoints.store || !st.member.registered || st.avg.busy() || st.member.draining())
    return;
  const auto newest = st.cfg.checkpoints.store->latest_written(checkpoint_header::kind::stage, st.worker->span().stage);
  if (st.worker->steps() > (newest ? newest->step : 0))
    write_now(self);
}

caf::expected<bool> load_if_ahead(stage_actor::stateful_pointer<stage_server_state> self) {
  auto& st = self->state;
  const auto& ck = st.cfg.checkpoints;
  if (!ck.store)
    return false;
  return load_newest(ck, st.cfg.num_stages, st.cfg.model.hash(), st.cfg.server_id, *st.worker, *st.metrics,
                     st.worker->steps());
}

caf::expected<bool> load_newest(const checkpoint_settings& settings, int num_stages, uint64_t config_hash,
                                const std::string& server_id, stage_worker& worker, metrics_sink& metrics,
                                int64_t after_step) {
  if (!settings.store)
    return false;
  const int stage = worker.span().stage;
  const auto started = clock_type::now();
  auto found =
      settings.store->newest(checkpoint_header::kind::stage, stage, static_cast<uint32_t>(num_stages), config_hash);
  if (!found)
    return to_caf(found.error());
  if (!*found || (*found)->header.step <= after_step)
    return false;
  const auto& data = **found;
  if (auto err = worker.import_state(data.payload))
    return make_error(err.code(), "checkpoint " + data.path + " does not load: " + describe(err));
  const double secs = seconds_since(started);
  const auto hash = worker.parameter_hash();
  get_logger("stage_server")
      ->info("stage {}: loaded checkpoint {} (step {}, {:.2f} s){}", stage, data.path, data.header.step, secs,
             data.skipped ? " after skipping " + std::to_string(data.skipped) + " bad newer file(s)" : std::string{});
  metrics.emit("checkpoint_load", {{"stage", int64_t{stage}},
                                   {"server", server_id},
                                   {"step", data.header.step},
                                   {"file", data.path},
                                   {"skipped", int64_t{data.skipped}},
                                   {"hash", std::to_string(hash)},
                                   {"seconds", secs}});
  return true;
}

}  // namespace swarm::checkpointing
