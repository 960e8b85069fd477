// --role server: serves one pipeline stage (placed by the coordinator with
// --stage auto), starting from the stage's state, and moves between stages
// when the rebalancer says so (the stage server actor does the moving).

#include <iostream>
#include <thread>

#include <unistd.h>

#include <caf/all.hpp>

#include "actors/stage_server.hpp"
#include "actors/stage_server_move.hpp"
#include "actors/coordinator_client.hpp"
#include "apps/node.hpp"
#include "apps/roles.hpp"
#include "apps/weight_roles.hpp"
#include "config/key_words.hpp"
#include "messages/errors.hpp"

namespace swarm {

namespace {

/// The stage server actor's settings from the process's config.
stage_server_config stage_server_settings(const app_config& cfg, const std::string& server_id,
                                          std::shared_ptr<bulk_endpoint> bulk, const checkpoint_settings& checkpoints,
                                          std::shared_ptr<const named_tensors> initial) {
  stage_server_config scfg;
  scfg.server_id = server_id;
  scfg.server = cfg.server;
  scfg.net = cfg.net;
  scfg.model = cfg.model;
  scfg.num_stages = cfg.stages;
  scfg.device = cfg.device;
  scfg.bf16 = cfg.bf16();
  scfg.bulk = std::move(bulk);
  scfg.checkpoints = checkpoints;
  scfg.initial_weights = std::move(initial);
  scfg.coordinator_up = std::make_shared<std::atomic<bool>>(true);
  scfg.freeze_s = cfg.net.connection_timeout_s;
  return scfg;
}

proto::register_server registration(const app_config& cfg, const std::string& server_id, int stage, uint16_t port) {
  proto::register_server reg;
  reg.set_stage(static_cast<uint32_t>(stage));
  reg.set_server_id(server_id);
  reg.set_host(cfg.server.host);
  reg.set_port(port);
  reg.set_num_stages(static_cast<uint32_t>(cfg.stages));
  reg.set_config_hash(cfg.model.hash());
  reg.set_tokenizer(cfg.model.tokenizer_label());
  return reg;
}

/// --stage auto: the stage the coordinator places this server on; ends the
/// process when it names none (2 for a config it refuses, else 1).
proto::placement ask_stage(node& n, const coordinator_actor& coord, const app_config& cfg,
                           const std::string& server_id) {
  n.phase("asking the coordinator for a stage");
  auto answer = ask_placement(n.sys(), coord, server_id, cfg.model);
  if (answer && answer->term() < n.term())  // fencing: the placement of a deposed leader
    answer = make_error(errc::PEER_GONE, "the placement came with term " + std::to_string(answer->term()) +
                                             ", older than the leader's (" + std::to_string(n.term()) + ")");
  if (!answer || static_cast<int>(answer->stage()) >= cfg.stages) {
    std::cerr << "swarm: server " << server_id << " got no stage from the coordinator: "
              << (answer ? "stage " + std::to_string(answer->stage()) + " out of range" : describe(answer.error()))
              << "\n";
    n.end(answer || code_of(answer.error()) == errc::BAD_CONFIG ? 2 : 1);
  }
  get_logger("stage_server")->info("the coordinator placed this server on stage {}", answer->stage());
  return *answer;
}

/// A placed server's first stage, as the rebalance event of a move from nowhere.
void emit_join(metrics_sink& metrics, const std::string& server_id, int stage, const proto::placement& placed,
               double seconds) {
  metrics.emit("rebalance", {{"server", server_id},
                             {"from", int64_t{-1}},
                             {"to", int64_t{stage}},
                             {"reason", std::string{"join"}},
                             {"predicted_gain", placed.predicted_gain()},
                             {"seconds", seconds}});
}

/// The worker of `stage`, or null after saying why it cannot be built.
std::shared_ptr<stage_worker> build_worker(const app_config& cfg, const std::string& server_id,
                                           std::shared_ptr<const named_tensors> initial, int stage) {
  auto built = build_stage_worker(stage_server_settings(cfg, server_id, nullptr, {}, std::move(initial)), stage);
  if (!built)
    std::cerr << "swarm: server: " << describe(built.error()) << "\n";
  return built ? *built : nullptr;
}

/// Registers `server` with the coordinator; when it refuses, stops the server
/// and ends the process (2 for a config it refuses, else 1).
void register_or_end(node& n, const coordinator_actor& coord, const proto::register_server& reg,
                     const stage_actor& server, const std::string& server_id) {
  if (auto refused = register_with(n.sys(), coord, reg, server)) {
    std::cerr << "swarm: coordinator refused server " << server_id << ": " << describe(refused) << "\n";
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    n.end(code_of(refused) == errc::BAD_CONFIG || code_of(refused) == errc::UNKNOWN_STAGE ? 2 : 1);
  }
}

}  // namespace

int run_server(const app_config& cfg) {
  // Names no stage: a server may serve several in its life (--stage auto, moves).
  const std::string server_id =
      "s-" + std::to_string(::getpid()) + (cfg.server.host == "127.0.0.1" ? std::string{} : "@" + cfg.server.host);
  node n{cfg, "server " + server_id, "server", "server"};
  auto log = get_logger("stage_server");
  if (cfg.server.lies()) {
    const auto fault = key_words::fault_text(cfg.server);
    n.metrics()->tag("fault", fault);  // every event of a server lying on purpose says so
    log->warn("--fault {}: this server lies on purpose (a test of issue #47's defences)", fault);
  }
  set_torch_threads(cfg.threads, cfg.model.d_model, cfg.bf16());
  // --init-from: read once, checked before anything connects; every stage
  // this server builds (moves too) starts from it unless a peer or a checkpoint is further along.
  auto initial = initial_weights(cfg);
  if (!initial) {
    std::cerr << "swarm: server: --init-from: " << initial.error().what() << "\n";
    return 2;
  }
  std::shared_ptr<stage_worker> worker;
  // The worker is built before anything connects (a bad config fails first), the actor's settings after.
  auto build = [&](int stage) {
    worker = build_worker(cfg, server_id, *initial, stage);
    return worker != nullptr;
  };
  // A bad config should fail before anything connects: build an explicit stage first.
  if (cfg.server.stage >= 0 && !build(cfg.server.stage))
    return 2;
  auto checkpoints = checkpoints_of(cfg, "server");
  if (!checkpoints)
    return 2;
  auto& sys = n.start();
  auto coord = n.connect(cfg.server.coordinator);
  auto bulk = n.bulk();
  const auto asked_at = std::chrono::steady_clock::now();
  proto::placement placed;
  if (cfg.server.stage < 0) {
    placed = ask_stage(n, coord, cfg, server_id);
    if (!build(static_cast<int>(placed.stage())))
      n.end(2);
  }
  const int stage = worker->span().stage;
  // Before serving anything: start where the stage is (a live peer's state, or
  // the newest checkpoint when none holds it), not from scratch.
  n.phase("downloading the stage's state");
  (void)moving::download_state(sys, coord, stage, cfg.model.hash(), server_id, *worker, *n.metrics(), *checkpoints,
                               cfg.stages);
  const auto scfg = stage_server_settings(cfg, server_id, bulk, *checkpoints, *initial);
  auto server =
      sys.spawn<caf::detached>(stage_server, scfg, worker, n.metrics(), std::make_shared<stage_server_counters>());
  auto stop_server = [&] { caf::anon_send_exit(server, caf::exit_reason::user_shutdown); };
  auto guard = n.publish(server, cfg.server.port, false);
  if (!guard) {
    stop_server();
    n.end(1);
  }
  const auto reg = registration(cfg, server_id, stage, guard->port());
  n.phase("registering with the coordinator");
  register_or_end(n, coord, reg, server, server_id);
  log->info("serving stage {} (blocks {}..{}, {} parameters) on port {}", stage, worker->span().first_block,
            worker->span().end_block, worker->parameter_count(), guard->port());
  if (cfg.server.stage < 0)  // placed by the rebalancer: its move from nowhere
    emit_join(*n.metrics(), server_id, stage, placed, seconds_since(asked_at));
  worker.reset();  // the actor owns it now, and replaces it when it moves
  n.phase("serving (or moving between stages)");
  // Serve until done; whenever the coordinator connection drops (a coordinator
  // restart, or this process was stopped long enough for peers to give up on
  // it), register again so trainers find this server anew. The server writes
  // its own server_exit when it stops.
  const auto reason = n.run_with_coordinator(
      caf::actor_cast<caf::actor>(server), coord, cfg.server.coordinator,
      [&](const coordinator_actor& fresh) { return register_with(sys, fresh, reg, server); },
      scfg.coordinator_up.get());
  // Let the middleman deliver the server's down notices (user_shutdown: a
  // server stopped on purpose, not a lost link) before the process ends.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  n.emit_bulk(server_id);
  n.end(exit_code_of(reason));
}

}  // namespace swarm
