// Copying a stage's state into a server's worker: from a live peer of the
// stage (a joining or moving server), else from the newest checkpoint; and
// building the worker of a stage (actors/stage_server_move.hpp, stage_server.hpp).
#include "actors/stage_server_move.hpp"
#include "base/clock.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "base/log.hpp"
#include "actors/stage_server_checkpoint.hpp"
#include "net/tls.hpp"
#include "messages/wire.hpp"

namespace swarm {

caf::error adopt_state(stage_worker& worker, const caf::expected<std::string>& reply, const std::string& server_id,
                       const std::string& from, std::chrono::steady_clock::time_point started, metrics_sink& metrics,
                       std::optional<std::pair<uint64_t, uint64_t>> expected) {
  if (!reply)
    return reply.error();
  auto rep = decode<proto::state_reply>(*reply, "state_reply");
  if (!rep)
    return rep.error();
  if (expected && (rep->step() != expected->first || rep->parameter_hash() != expected->second))
    return make_error(errc::BAD_REQUEST, from + " sent the state of step " + std::to_string(rep->step()) + " (hash " +
                                             std::to_string(rep->parameter_hash()) + "), not its stage's step " +
                                             std::to_string(expected->first) + " (hash " +
                                             std::to_string(expected->second) + "): not adopted");
  if (auto err = worker.import_state(rep->state()))
    return to_caf(err);
  if (worker.parameter_hash() != rep->parameter_hash())
    return make_error(errc::INTERNAL, "imported parameters hash differently from the peer's");
  const double secs = seconds_since(started);
  const int64_t stage = worker.span().stage;
  get_logger("stage_server")
      ->info("stage {}: copied the state at step {} from {} ({} bytes, {:.2f} s)", stage, rep->step(), from,
             rep->state().size(), secs);
  metrics.emit("state_download", {{"stage", stage},
                                  {"server", server_id},
                                  {"from", from},
                                  {"step", static_cast<int64_t>(rep->step())},
                                  {"bytes", static_cast<int64_t>(rep->state().size())},
                                  {"seconds", secs},
                                  {"hash", std::to_string(rep->parameter_hash())}});
  return caf::none;
}

caf::expected<std::shared_ptr<stage_worker>> build_stage_worker(const stage_server_config& cfg, int stage) {
  try {
    auto worker = std::make_shared<stage_worker>(cfg.model, stage, cfg.num_stages, cfg.device);
    worker->set_activation_cache(cfg.server.activation_cache_mb << 20);
    worker->set_bf16(cfg.bf16);
    using fault = server_config::fault_kind;
    worker->set_lies(cfg.server.fault == fault::stale ? cfg.server.fault_after : 0,
                     cfg.server.fault == fault::drop_half);
    if (cfg.initial_weights)
      if (auto err = worker->load_parameters(*cfg.initial_weights))
        return make_error(errc::BAD_CONFIG, std::string{"--init-from: "} + err.what());
    return worker;
  } catch (const std::exception& e) {
    return make_error(errc::BAD_CONFIG, "cannot build stage " + std::to_string(stage) + ": " + e.what());
  }
}

}  // namespace swarm

namespace swarm::moving {

namespace {

using clock_type = std::chrono::steady_clock;

/// Asks `peer` for its state of `stage` and imports it; the error when that fails.
caf::error download_from(caf::actor_system& sys, const proto::membership_update& peer, int stage,
                         const std::string& server_id, stage_worker& worker, metrics_sink& metrics) {
  auto found = dial(sys, peer.host(), static_cast<uint16_t>(peer.port()), std::chrono::seconds(10));
  if (!found)
    return found.error();
  const auto handle = caf::actor_cast<stage_actor>(std::move(*found));
  const auto started = clock_type::now();
  proto::state_request req;
  req.set_stage(static_cast<uint32_t>(stage));
  req.set_server_id(server_id);
  caf::scoped_actor self{sys};
  caf::expected<std::string> whole{caf::error{}};
  self->request(handle, std::chrono::seconds(120), state_atom::value, uint64_t{0}, wrap(req))
      .receive(
          [&](uint64_t transfer_id, encoded<proto::state_reply>& tail) {
            // A chunked reply's leading pieces came first and wait in the mailbox.
            // Unbounded: the one peer this server asked, for a state of any size.
            chunk_assembler chunks{chunk_limits::unbounded()};
            self->receive_while([&] { return self->mailbox().size() > 0; })(
                [&](chunk_atom, uint64_t id, const std::string& piece) {
                  (void)chunks.add(handle.address(), id, piece, std::chrono::steady_clock::now());
                });
            whole = chunks.finish(handle.address(), transfer_id, std::move(tail.bytes));
          },
          [&](caf::error& err) { whole = std::move(err); });
  return adopt_state(worker, whole, server_id, peer.server_id(), started, metrics);
}

}  // namespace

const char* to_string(state_source s) {
  switch (s) {
    case state_source::peer: return "peer";
    case state_source::checkpoint: return "checkpoint";
    case state_source::initial: return "initial";
  }
  return "?";
}

state_source download_state(caf::actor_system& sys, const coordinator_actor& coord, int stage, uint64_t config_hash,
                            const std::string& server_id, stage_worker& worker, metrics_sink& metrics,
                            const checkpoint_settings& checkpoints, int num_stages) {
  auto log = get_logger("stage_server");
  proto::subscribe query;
  query.set_stage(static_cast<uint32_t>(stage));
  query.set_config_hash(config_hash);
  caf::expected<proto::server_list> peers{make_error(errc::PEER_GONE, "the coordinator is not reachable")};
  caf::scoped_actor self{sys};
  if (coord)
    self->request(coord, std::chrono::seconds(10), peers_atom::value, wrap(query))
        .receive([&](const encoded<proto::server_list>& bytes) { peers = decode(bytes); },
                 [&](caf::error& err) { peers = std::move(err); });
  if (!peers)
    log->warn("cannot list the peers of stage {} ({})", stage, describe(peers.error()));
  else
    for (const auto& peer : peers->servers()) {
      auto err = download_from(sys, peer, stage, server_id, worker, metrics);
      if (!err)
        return state_source::peer;
      log->warn("state download from {} failed: {}; trying the next peer", peer.server_id(), describe(err));
    }
  // No live peer holds the state (the stage is new, or was wiped out): the
  // newest checkpoint loses at most one checkpoint interval.
  auto loaded = checkpointing::load_newest(checkpoints, num_stages, config_hash, server_id, worker, metrics);
  if (loaded && *loaded)
    return state_source::checkpoint;
  if (!loaded)
    log->error("stage {}: {}; starting from initial parameters", stage, describe(loaded.error()));
  else
    log->info("no live peer of stage {} delivered state{}; starting from initial parameters", stage,
              checkpoints.store ? " and it has no checkpoint" : "");
  return state_source::initial;
}

}  // namespace swarm::moving
