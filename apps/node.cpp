// The networked roles: coordinator, server, trainer. Each builds one actor
// system, spawns its actors, and waits until they finish or a signal arrives.

#include <csignal>
#include <fstream>
#include <mutex>
#include <variant>
#include <iostream>
#include <thread>

#include <malloc.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/coordinator.hpp"
#include "actors/load_balancer.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "actors/stage_server.hpp"
#include "actors/stage_server_move.hpp"
#include "observe/status_board.hpp"
#include "actors/trainer.hpp"
#include "apps/http_status.hpp"
#include "apps/roles.hpp"
#include "net/basp_guard.hpp"
#include "net/bulk.hpp"
#include "net/chunks.hpp"
#include "net/tls.hpp"
#include "messages/types.hpp"
#include "messages/wire.hpp"
#include "models/checkpoint.hpp"
#include "models/shape/partition.hpp"

namespace swarm {

std::atomic<bool> stop_requested{false};

void install_signal_handlers() {
  auto on_signal = [](int) { stop_requested = true; };
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

namespace {

/// What the process is doing, for the stop watchdog's message.
std::atomic<const char*> phase{"starting"};

/// Ends the process with `code` without running the actor system's
/// destructor: CAF 0.17.6 can wait there for ever for a detached actor (seen in
/// 3 of 7 clusters stopped with SIGTERM), and nothing is left to do by then:
/// metrics lines are written as they happen, checkpoints are fsynced, and the
/// kernel closes the sockets, which peers see as this process going down.
[[noreturn]] void end_process(int code) {
  checkpoint_store::abandon_partial_write();
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

/// Stop watchdog: once a signal asked this process to stop, it has
/// `stop_grace` to end on its own (exit events written, actors done); a step
/// that blocks longer (a state download from a stalled peer, a connect, a
/// move) must not hold the process, so then it ends anyway.
constexpr auto stop_grace = std::chrono::seconds(5);
void start_stop_watchdog(const char* who) {
  std::thread([who] {
    while (!stop_requested)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(stop_grace);
    get_logger(who)->warn("asked to stop {} s ago while {}; exiting now", stop_grace.count(), phase.load());
    end_process(0);
  }).detach();
}

/// CAF settings every node shares. Heartbeats and the connection timeout are what
/// detect a hung (SIGSTOPped) peer; without them its connection never drops.
void configure(caf::actor_system_config& sys_cfg, const app_config& cfg) {
  sys_cfg.load<caf::io::middleman>();
  if (!cfg.net.tls_ca.empty()) {
    // Every link of the process goes through the openssl module: its
    // middleman dials (tls.hpp: dialer) and publishes; nothing is published
    // in plain, which would share the same BASP broker.
    sys_cfg.load<caf::openssl::manager>();
    sys_cfg.openssl_cafile = cfg.net.tls_ca;
    sys_cfg.openssl_certificate = cfg.net.tls_cert;
    sys_cfg.openssl_key = cfg.net.tls_key;
  }
  register_types(sys_cfg);
  sys_cfg.set("middleman.heartbeat-interval", seconds(cfg.net.heartbeat_s));
  sys_cfg.set("middleman.connection-timeout", seconds(cfg.net.connection_timeout_s));
  // Compute runs on detached actors; the scheduler only shuffles messages.
  sys_cfg.set("scheduler.max-threads", size_t{2});
  sys_cfg.set("logger.console", caf::atom("none"));
}

struct wait_result {
  bool watched_down = false;  ///< `watched` went down first; `whom` still runs
  caf::error reason;          ///< otherwise: `whom`'s exit reason
};

/// Waits until `whom` terminates (returns its exit reason) or `watched` goes down
/// first; a signal asks `whom` to exit and the wait goes on until it has.
template <class Handle, class Watched>
wait_result wait_for(caf::actor_system& sys, const Handle& whom, const Watched& watched) {
  caf::scoped_actor self{sys};
  self->monitor(whom);
  if (watched)
    self->monitor(watched);
  bool asked = false;
  for (;;) {
    if (stop_requested && !asked) {
      self->send_exit(whom, caf::exit_reason::user_shutdown);
      asked = true;
    }
    caf::optional<caf::down_msg> down;
    self->receive([&](caf::down_msg& msg) { down = std::move(msg); },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
    if (down && down->source == whom.address())
      return {false, down->reason};
    if (down && watched && down->source == watched.address())
      return {true, {}};
  }
}

/// Waits until `whom` terminates and returns its exit reason.
template <class Handle>
caf::error wait_for(caf::actor_system& sys, const Handle& whom) {
  return wait_for(sys, whom, caf::actor{}).reason;
}

/// Has `server` (re)register with the coordinator, as the stage it serves now; the refusal, if any.
caf::error register_with(caf::actor_system& sys, const coordinator_actor& coord, const proto::register_server& reg,
                         const stage_actor& server) {
  caf::error refused;
  caf::scoped_actor self{sys};
  self->request(server, std::chrono::seconds(30), register_atom::value, encode(reg), caf::actor_cast<caf::actor>(coord))
      .receive([](const std::string&) {}, [&](caf::error& err) { refused = std::move(err); });
  return refused;
}

int exit_code_of(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::user_shutdown || reason == caf::exit_reason::normal ? 0 : 1;
}

/// The `bulk` metrics event: what this process moved over its bulk connections.
void emit_bulk(metrics_sink& metrics, const std::string& who, const bulk_endpoint& bulk) {
  const auto s = bulk.stats();
  metrics.emit("bulk", {{"process", who},
                        {"frames_sent", static_cast<int64_t>(s.frames_sent)},
                        {"bytes_sent", static_cast<int64_t>(s.bytes_sent)},
                        {"frames_received", static_cast<int64_t>(s.frames_received)},
                        {"bytes_received", static_cast<int64_t>(s.bytes_received)},
                        {"send_failures", static_cast<int64_t>(s.send_failures)},
                        {"bad_frames", static_cast<int64_t>(s.bad_frames)},
                        {"undeliverable", static_cast<int64_t>(s.undeliverable)}});
}

/// Publishes `handle` on loopback only, behind a guard that listens on `port`
/// (any interface) and passes peers' BASP frames one by one after checking
/// them (net/basp_guard.hpp): CAF 0.17.6 itself can be crashed or
/// stalled by a single header. The guard is the public port; null when either
/// cannot listen (said on stderr).
template <class Handle>
std::unique_ptr<basp_guard> publish_guarded(caf::actor_system& sys, const Handle& handle, int port, bool reuse,
                                            const app_config& cfg, const char* who) {
  const bool tls = sys.has_openssl_manager();
  auto local = tls ? caf::openssl::publish(handle, 0, "127.0.0.1", reuse)
                   : sys.middleman().publish(handle, 0, "127.0.0.1", reuse);
  if (!local) {
    std::cerr << "swarm: " << who << " cannot listen on loopback: " << sys.render(local.error()) << "\n";
    return nullptr;
  }
  guard_options opts;
  opts.host.clear();
  opts.port = static_cast<uint16_t>(port);
  opts.backend_port = *local;
  opts.tls = tls;
  opts.limits.max_payload = static_cast<uint64_t>(cfg.net.chunk_bytes) + (uint64_t{1} << 20);
  auto guard = basp_guard::start(opts);
  if (!guard) {
    std::cerr << "swarm: " << who << " cannot listen on port " << port << ": " << describe(guard.error()) << "\n";
    return nullptr;
  }
  return std::move(*guard);
}

/// This process's end of the bulk data plane (net/bulk.hpp), listening on
/// --host; null, after saying why on stderr, when it cannot listen.
std::shared_ptr<bulk_endpoint> start_bulk(caf::actor_system& sys, const app_config& cfg, const char* who) {
  bulk_options opts;
  opts.host = cfg.server.host;
  if (!cfg.net.tls_ca.empty()) {
    auto tls = tls_context::load({cfg.net.tls_ca, cfg.net.tls_cert, cfg.net.tls_key});
    if (!tls) {  // checked at start-up already (main.cpp); a file changed since
      std::cerr << "swarm: " << who << ": " << describe(tls.error()) << "\n";
      return nullptr;
    }
    opts.tls = *tls;
  }
  auto bulk = bulk_endpoint::start(sys, opts);
  if (!bulk) {
    std::cerr << "swarm: " << who << ": " << describe(bulk.error()) << "\n";
    return nullptr;
  }
  get_logger(who)->debug("bulk connections on {}:{}", opts.host, (*bulk)->port());
  return *bulk;
}

/// Whether `coord` answers a harmless request within `timeout`.
bool answers(caf::actor_system& sys, const coordinator_actor& coord, caf::timespan timeout) {
  bool alive = false;
  caf::scoped_actor self{sys};
  self->request(coord, timeout, averager_atom::value)
      .receive([&](const averager_actor&) { alive = true; }, [](caf::error&) {});
  return alive;
}

/// Connects to the coordinator, retrying while it is still starting up; says
/// on stderr why `who` could not reach it. `lost`: a coordinator that went
/// down. The same address can come back for two reasons: CAF's middleman still
/// hands out the dead one right after the connection dropped, or only the link
/// dropped (this process or the coordinator was stopped longer than the
/// connection timeout) and the coordinator lives on. A timed request tells them
/// apart. Each attempt is bounded: CAF's own remote_actor waits forever on a
/// connection whose handshake never completes.
caf::expected<coordinator_actor> connect_coordinator(caf::actor_system& sys, const std::string& address,
                                                     const char* who, const caf::actor_addr& lost = {}) {
  const auto hp = split_host_port(address);  // validated by parse_config
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    caf::expected<coordinator_actor> handle{caf::error{}};
    if (auto found = dial(sys, hp->first, hp->second, std::chrono::seconds(5)))
      handle = caf::actor_cast<coordinator_actor>(std::move(*found));
    else
      handle = std::move(found.error());
    if (handle && lost && handle->address() == lost && !answers(sys, *handle, std::chrono::seconds(3)))
      handle = make_error(errc::PEER_GONE, "the lost coordinator is still cached and does not answer");
    const bool out_of_time = std::chrono::steady_clock::now() > deadline || stop_requested;
    if (!handle && out_of_time)
      std::cerr << "swarm: " << who << " cannot reach coordinator " << address << ": " << describe(handle.error())
                << "\n";
    if (handle || out_of_time)
      return handle;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

/// Waits until `whom` terminates and returns its exit reason. Whenever the
/// coordinator goes down meanwhile, connects to its successor at `address` and
/// calls `rejoin(new coordinator)` until that returns true.
template <class Handle, class Rejoin>
caf::error run_with_coordinator(caf::actor_system& sys, const Handle& whom, coordinator_actor coord,
                                const std::string& address, const char* who, Rejoin rejoin,
                                std::atomic<bool>* coordinator_up = nullptr) {
  for (;;) {
    auto waited = wait_for(sys, whom, coord);
    if (!waited.watched_down)
      return waited.reason;
    if (coordinator_up)
      *coordinator_up = false;
    get_logger(who)->warn("lost the coordinator; joining it again when it is back");
    const auto lost = coord.address();
    for (;;) {
      auto fresh = connect_coordinator(sys, address, who, lost);
      if (stop_requested)
        return wait_for(sys, whom);
      if (fresh && rejoin(*fresh)) {
        coord = *fresh;
        if (coordinator_up)
          *coordinator_up = true;
        get_logger(who)->info("joined the coordinator again");
        break;
      }
    }
  }
}

/// Asks the coordinator where a server started with --stage auto should go.
caf::expected<proto::placement> ask_placement(caf::actor_system& sys, const coordinator_actor& coord,
                                              const std::string& server_id, uint64_t config_hash) {
  proto::placement_request req;
  req.set_server_id(server_id);
  req.set_config_hash(config_hash);
  caf::expected<proto::placement> answer{caf::error{}};
  caf::scoped_actor self{sys};
  self->request(coord, std::chrono::seconds(10), place_atom::value, encode(req))
      .receive([&](const std::string& bytes) { answer = decode<proto::placement>(bytes, "placement"); },
               [&](caf::error& err) { answer = std::move(err); });
  return answer;
}

/// --checkpoint-dir as the actors take it; nullopt (said on stderr) when the
/// folder holds a checkpoint of another model config or stage count, which must
/// stop the process before it joins anything.
std::optional<checkpoint_settings> checkpoints_of(const app_config& cfg, const char* who) {
  checkpoint_settings out;
  if (cfg.checkpoint.dir.empty())
    return out;
  auto store = std::make_shared<checkpoint_store>(cfg.checkpoint.dir, cfg.checkpoint.keep);
  if (auto err = store->check_all(static_cast<uint32_t>(cfg.stages), cfg.model.hash())) {
    std::cerr << "swarm: " << who << ": " << describe(err) << "\n";
    return std::nullopt;
  }
  out.store = std::move(store);
  out.every_steps = cfg.checkpoint.every_steps;
  out.every_s = cfg.checkpoint.every_s;
  return out;
}

/// With --checkpoint-dir: claims a trainer slot and continues from its newest
/// position; false (said on stderr) when that cannot be done.
bool resume_trainer(const app_config& cfg, trainer_settings& tcfg) {
  auto checkpoints = checkpoints_of(cfg, "trainer");
  if (!checkpoints)
    return false;
  tcfg.checkpoints = *checkpoints;
  if (!checkpoints->store)
    return true;
  const auto& store = *checkpoints->store;
  auto slot = claim_trainer_slot(store);
  if (!slot) {
    std::cerr << "swarm: trainer: " << describe(slot.error()) << "\n";
    return false;
  }
  tcfg.slot = *slot;
  auto found = store.newest(checkpoint_header::kind::trainer, *slot, static_cast<uint32_t>(cfg.stages),
                            cfg.model.hash());
  if (!found) {
    std::cerr << "swarm: trainer: " << describe(found.error()) << "\n";
    return false;
  }
  auto log = get_logger("trainer");
  if (!*found) {
    log->info("checkpoints of this trainer go to {} (slot {}): none to resume from", store.dir(), *slot);
    return true;
  }
  auto position = decode_position((*found)->payload);
  if (!position) {
    log->error("checkpoint {} is not a trainer position; starting at step 0", (*found)->path);
    return true;
  }
  log->info("resuming from {}: step {}, {} samples done, data sampler where it was", (*found)->path, position->step,
            position->samples);
  tcfg.resume = *position;
  return true;
}

} // namespace

namespace {

/// What a trainer's status report says, gathered from its own events: the
/// latest step event and counts of its load balancers' reroutes and bans.
struct trainer_tally {
  std::mutex m;
  proto::trainer_report report;
};

std::shared_ptr<trainer_tally> tally_of(metrics_sink& metrics) {
  auto tally = std::make_shared<trainer_tally>();
  metrics.observe([tally](double, const char* event, std::initializer_list<metrics_sink::field> fields) {
    const std::string_view e{event};
    if (e != "step" && e != "reroute" && e != "ban")
      return;
    std::lock_guard<std::mutex> lock(tally->m);
    auto& r = tally->report;
    if (e == "reroute") {
      r.set_reroutes(r.reroutes() + 1);
      return;
    }
    if (e == "ban") {
      r.set_bans(r.bans() + 1);
      return;
    }
    for (const auto& [key, value] : fields) {
      const std::string_view k{key};
      const auto* i = std::get_if<int64_t>(&value);
      const auto* d = std::get_if<double>(&value);
      if (k == "step" && i) r.set_step(*i);
      else if (k == "loss" && d) r.set_loss(*d);
      else if (k == "tokens_per_s" && d) r.set_tokens_per_s(*d);
      else if (k == "samples" && i) r.set_samples(*i);
      else if (k == "tokens" && i) r.set_tokens(*i);
      else if (k == "dropped" && i) r.set_dropped(*i);
      else if (k == "retries" && i) r.set_retries(*i);
      else if (k == "wire_bytes" && i) r.set_wire_bytes(*i);
      else if (k == "elapsed_s" && d) r.set_elapsed_s(*d);
    }
  });
  return tally;
}

/// Sends the coordinator the trainer's tally every 2 s (and gets the new
/// coordinator after a restart as (subscribe, handle)). Off the data path.
caf::behavior status_reporter(caf::event_based_actor* self, std::string trainer_id, int64_t max_steps,
                              std::shared_ptr<trainer_tally> tally, coordinator_actor coord) {
  auto current = std::make_shared<coordinator_actor>(std::move(coord));
  self->send(self, tick_atom::value);
  return {
      [=](tick_atom) {
        proto::trainer_report r;
        {
          std::lock_guard<std::mutex> lock(tally->m);
          r = tally->report;
        }
        r.set_trainer_id(trainer_id);
        r.set_max_steps(max_steps);
        self->send(*current, report_atom::value, encode(r));
        self->delayed_send(self, std::chrono::seconds(2), tick_atom::value);
      },
      [=](subscribe_atom, const coordinator_actor& fresh) { *current = fresh; },
  };
}

} // namespace

int run_coordinator(const app_config& cfg) {
  setup_logging("coordinator", cfg.log_level);
  auto log = get_logger("coordinator");
  auto metrics = open_metrics(cfg.metrics, "coordinator");
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  coordinator_settings settings{cfg.stages, cfg.model.hash(), {}};
  settings.averaging.target_batch_size = cfg.server.batch_size;
  settings.averaging.timeout_s = cfg.coordinator.averaging_timeout_s;
  settings.averaging.piece_elements = std::max<int64_t>(1, cfg.net.chunk_bytes / 4);
  auto& rb = settings.rebalancing;
  rb.stage_cost = stage_costs(cfg.model.d_model, cfg.model.seq_len, cfg.model.vocab, static_cast<int>(cfg.model.n_layers),
                              cfg.stages);
  rb.enabled = cfg.coordinator.rebalance == "on";
  rb.period_s = cfg.coordinator.rebalance_period_s;
  rb.settle_s = std::min(10.0, rb.period_s);
  rb.policy.min_gain = cfg.coordinator.rebalance_min_gain;
  rb.policy.min_replicas = cfg.coordinator.min_replicas;
  start_stop_watchdog("coordinator");
  settings.board = std::make_shared<status_board>(unix_seconds());
  metrics->observe([board = settings.board](double t, const char* event,
                                            std::initializer_list<metrics_sink::field> fields) {
    board->on_event(t, event, fields);
  });
  std::unique_ptr<http_status> http;
  if (cfg.coordinator.http_port > 0) {
    std::string error;
    http = http_status::start(cfg.coordinator.http_host, static_cast<uint16_t>(cfg.coordinator.http_port),
                              settings.board, error);
    if (!http) {
      std::cerr << "swarm: coordinator: " << error << " (--http-port, --http-host)\n";
      end_process(2);
    }
    log->info("status page on http://{}:{}/ (also /api/status and /metrics)", cfg.coordinator.http_host,
              http->port());
  }
  auto coord = sys.spawn(coordinator, settings, metrics);
  // reuse: a coordinator restarted on its old port must not wait out TIME_WAIT.
  auto guard = publish_guarded(sys, coord, cfg.coordinator.port, true, cfg, "coordinator");
  if (!guard) {
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    end_process(1);
  }
  const uint16_t port = guard->port();
  if (!cfg.coordinator.port_file.empty()) {
    // Write then rename, so a reader never sees a half-written number.
    const auto tmp = cfg.coordinator.port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), cfg.coordinator.port_file.c_str());
  }
  log->info("listening on port {} for {} stages (model hash {})", port, cfg.stages, cfg.model.hash());
  phase = "coordinating";
  end_process(exit_code_of(wait_for(sys, coord)));
}

int run_server(const app_config& cfg) {
  // Names no stage: a server may serve several in its life (--stage auto, moves).
  const std::string server_id = "s-" + std::to_string(::getpid()) +
                                (cfg.server.host == "127.0.0.1" ? std::string{} : "@" + cfg.server.host);
  setup_logging("server " + server_id, cfg.log_level);
  auto log = get_logger("stage_server");
  auto metrics = open_metrics(cfg.metrics, "server");
  set_torch_threads(cfg.threads);
  std::shared_ptr<stage_worker> worker;
  auto build = [&](int stage) {
    try {
      worker = std::make_shared<stage_worker>(cfg.model, stage, cfg.stages, cfg.device);
      return true;
    } catch (const std::exception& e) {
      std::cerr << "swarm: server: " << e.what() << "\n";
      return false;
    }
  };
  // A bad config should fail before anything connects: build an explicit stage first.
  if (cfg.server.stage >= 0 && !build(cfg.server.stage))
    return 2;
  auto checkpoints = checkpoints_of(cfg, "server");
  if (!checkpoints)
    return 2;
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  start_stop_watchdog("stage_server");
  phase = "connecting to the coordinator";
  auto coord = connect_coordinator(sys, cfg.server.coordinator, "server");
  if (!coord)
    end_process(1);
  auto bulk = start_bulk(sys, cfg, "server");
  if (!bulk)
    end_process(1);
  const auto asked_at = std::chrono::steady_clock::now();
  proto::placement placed;
  if (cfg.server.stage < 0) {
    phase = "asking the coordinator for a stage";
    auto answer = ask_placement(sys, *coord, server_id, cfg.model.hash());
    if (!answer || static_cast<int>(answer->stage()) >= cfg.stages) {
      std::cerr << "swarm: server " << server_id << " got no stage from the coordinator: "
                << (answer ? "stage " + std::to_string(answer->stage()) + " out of range" : describe(answer.error()))
                << "\n";
      end_process(answer || code_of(answer.error()) == errc::BAD_CONFIG ? 2 : 1);
    }
    placed = *answer;
    log->info("the coordinator placed this server on stage {}", placed.stage());
    if (!build(static_cast<int>(placed.stage())))
      end_process(2);
  }
  const int stage = worker->span().stage;
  // Before serving anything: start where the stage is (a live peer's state, or
  // the newest checkpoint when none holds it), not from scratch.
  phase = "downloading the stage's state";
  (void)moving::download_state(sys, *coord, stage, cfg.model.hash(), server_id, *worker, *metrics, *checkpoints,
                               cfg.stages);
  stage_server_config scfg{server_id, cfg.net.chunk_bytes, cfg.server.slowdown};
  if (cfg.server.fault == "hang-forward")
    scfg.fault = stage_server_config::fault_kind::hang_forward;
  else if (cfg.server.fault == "hang-backward")
    scfg.fault = stage_server_config::fault_kind::hang_backward;
  else if (cfg.server.fault == "hang-round")
    scfg.fault = stage_server_config::fault_kind::hang_round;
  else if (cfg.server.fault == "hang-state")
    scfg.fault = stage_server_config::fault_kind::hang_state;
  scfg.fault_after = cfg.server.fault_after;
  scfg.model = cfg.model;
  scfg.num_stages = cfg.stages;
  scfg.device = cfg.device;
  scfg.averaging_compression = cfg.server.averaging_compression;
  scfg.bulk = bulk;
  scfg.bulk_min_bytes = cfg.net.bulk_min_bytes;
  scfg.checkpoints = *checkpoints;
  scfg.coordinator_up = std::make_shared<std::atomic<bool>>(true);
  scfg.freeze_s = cfg.net.connection_timeout_s;
  auto server = sys.spawn<caf::detached>(stage_server, scfg, worker, metrics, std::make_shared<stage_server_counters>());
  auto stop_server = [&] { caf::anon_send_exit(server, caf::exit_reason::user_shutdown); };
  auto guard = publish_guarded(sys, server, cfg.server.port, false, cfg, "server");
  if (!guard) {
    stop_server();
    end_process(1);
  }
  const uint16_t port = guard->port();
  proto::register_server reg;
  reg.set_stage(static_cast<uint32_t>(stage));
  reg.set_server_id(server_id);
  reg.set_host(cfg.server.host);
  reg.set_port(port);
  reg.set_num_stages(static_cast<uint32_t>(cfg.stages));
  reg.set_config_hash(cfg.model.hash());
  phase = "registering with the coordinator";
  auto refused = register_with(sys, *coord, reg, server);
  if (refused) {
    std::cerr << "swarm: coordinator refused server " << server_id << ": " << describe(refused) << "\n";
    stop_server();
    end_process(code_of(refused) == errc::BAD_CONFIG || code_of(refused) == errc::UNKNOWN_STAGE ? 2 : 1);
  }
  log->info("serving stage {} (blocks {}..{}, {} parameters) on port {}", stage, worker->span().first_block,
            worker->span().end_block, worker->parameter_count(), port);
  if (cfg.server.stage < 0)
    metrics->emit("rebalance", {{"server", server_id},
                                {"from", int64_t{-1}},
                                {"to", int64_t{stage}},
                                {"reason", std::string{"join"}},
                                {"predicted_gain", placed.predicted_gain()},
                                {"seconds", seconds_since(asked_at)}});
  worker.reset();  // the actor owns it now, and replaces it when it moves
  phase = "serving (or moving between stages)";
  // Serve until done; whenever the coordinator connection drops (a coordinator
  // restart, or this process was stopped long enough for peers to give up on
  // it), register again so trainers find this server anew. The server writes
  // its own server_exit when it stops.
  const auto reason = run_with_coordinator(sys, server, *coord, cfg.server.coordinator, "server",
                                           [&](const coordinator_actor& fresh) {
                                             auto err = register_with(sys, fresh, reg, server);
                                             if (err)
                                               log->warn("registering again failed: {}; retrying", describe(err));
                                             return !err;
                                           },
                                           scfg.coordinator_up.get());
  // Let the middleman deliver the server's down notices (user_shutdown: a
  // server stopped on purpose, not a lost link) before the process ends.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  emit_bulk(*metrics, server_id, *bulk);
  end_process(exit_code_of(reason));
}

int run_trainer(const app_config& cfg) {
  // Two malloc arenas, not glibc's 8 per core: a trainer's CAF workers and a
  // bulk reader thread per server connection (a new one for every restarted
  // server) each filled an arena of their own with free chunks it kept
  // (chaos soak: thread arenas +2.8 MB in 5 min, the main one flat; the
  // trainer +13% in 30 min).
  ::mallopt(M_ARENA_MAX, 2);
  const std::string trainer_id = "t" + std::to_string(::getpid());
  setup_logging("trainer " + trainer_id, cfg.log_level);
  auto metrics = open_metrics(cfg.metrics, "trainer");
  auto text = std::make_shared<const corpus>(corpus::load(cfg.trainer.corpus, cfg.model.seq_len + 1));
  trainer_settings tcfg{trainer_id, cfg.stages, cfg.model, cfg.trainer};
  if (!resume_trainer(cfg, tcfg))
    return 2;
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  start_stop_watchdog("trainer");
  phase = "connecting to the coordinator";
  auto coord = connect_coordinator(sys, cfg.trainer.coordinator, "trainer");
  if (!coord)
    end_process(1);
  auto bulk = start_bulk(sys, cfg, "trainer");
  if (!bulk)
    end_process(1);
  std::vector<caf::actor> balancers;
  for (int s = 0; s < cfg.stages; ++s) {
    const auto& t = cfg.trainer;
    load_balancer_config lb;
    lb.stage = s;
    lb.trainer_id = trainer_id;
    lb.config_hash = cfg.model.hash();
    lb.forward_timeout_s = t.forward_timeout_s;
    lb.backward_timeout_s = t.backward_timeout_s;
    lb.no_server_wait_s = t.no_server_wait_s;
    lb.commit_grace = t.commit_grace;
    lb.max_attempts = t.max_retries;
    lb.static_routing = t.routing == "static";
    lb.chunk_bytes = cfg.net.chunk_bytes;
    lb.bulk = bulk;
    lb.bulk_min_bytes = cfg.net.bulk_min_bytes;
    lb.seed = cfg.model.seed * 1000003 + static_cast<uint64_t>(::getpid()) * 31 + static_cast<uint64_t>(s);
    lb.routing = {t.ema_alpha, t.backward_cost, t.ban_base_s, t.ban_max_s};
    balancers.push_back(sys.spawn(load_balancer, lb, *coord, metrics));
  }
  phase = "training";
  auto t = sys.spawn(trainer, tcfg, text, balancers, metrics);
  auto reporter = sys.spawn(status_reporter, trainer_id, cfg.trainer.max_steps, tally_of(*metrics), *coord);
  // Train until done; after a coordinator restart the load balancers subscribe
  // to the new one (they keep routing to the servers they know meanwhile).
  const auto reason = run_with_coordinator(sys, t, *coord, cfg.trainer.coordinator, "trainer",
                                           [&](const coordinator_actor& fresh) {
                                             for (auto& lb : balancers)
                                               caf::anon_send(lb, subscribe_atom::value, fresh);
                                             caf::anon_send(reporter, subscribe_atom::value, fresh);
                                             return true;
                                           });
  for (auto& lb : balancers)
    caf::anon_send_exit(lb, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(reporter, caf::exit_reason::user_shutdown);
  emit_bulk(*metrics, trainer_id, *bulk);
  if (exit_code_of(reason) != 0)
    std::cerr << "swarm: trainer stopped: " << describe(reason) << "\n";
  end_process(exit_code_of(reason));
}

int run_status(const app_config& cfg) {
  setup_logging("status", cfg.log_level);  // --coordinator was checked with the config
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg);
  caf::actor_system sys{sys_cfg};
  start_stop_watchdog("status");
  phase = "asking the coordinator";
  auto coord = connect_coordinator(sys, cfg.trainer.coordinator, "status");
  if (!coord)
    end_process(1);
  int code = 1;
  caf::scoped_actor self{sys};
  self->request(*coord, std::chrono::seconds(10), status_atom::value, std::string{"text"})
      .receive(
          [&](const std::string& screen) {
            std::cout << screen << std::flush;
            code = 0;
          },
          [&](caf::error& err) { std::cerr << "swarm: the coordinator did not answer: " << describe(err) << "\n"; });
  end_process(code);
}

} // namespace swarm
