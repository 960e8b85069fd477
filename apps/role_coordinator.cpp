// --role coordinator: the membership registry, the averaging coordinator and
// the rebalancer, with the status page on --http-port; and --role status,
// which asks a running coordinator for one screen.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include <unistd.h>

#include <caf/all.hpp>

#include "actors/coordinator.hpp"
#include "actors/coordinator_client.hpp"
#include "apps/children.hpp"
#include "apps/control.hpp"
#include "apps/http_status.hpp"
#include "apps/node.hpp"
#include "apps/roles.hpp"
#include "messages/errors.hpp"
#include "models/shape/partition.hpp"
#include "observe/status_board.hpp"

namespace swarm {

namespace {

coordinator_settings settings_of(const app_config& cfg) {
  coordinator_settings settings{cfg.stages, cfg.model.hash(), cfg.model.tokenizer_label(), {}};
  settings.averaging.target_batch_size = cfg.server.batch_size;
  settings.averaging.coordinator = cfg.coordinator;
  settings.averaging.piece_elements = std::max<int64_t>(1, cfg.net.chunk_bytes / 4);
  auto& rb = settings.rebalancing;
  rb.stage_cost = stage_costs(cfg.model, cfg.stages);
  rb.coordinator = cfg.coordinator;
  rb.settle_s = std::min(10.0, cfg.coordinator.rebalance_period_s);
  settings.verify_strikes = cfg.trainer.verify_strikes;
  return settings;
}

/// Write then rename, so a reader never sees a half-written number.
void write_port_file(const std::string& path, uint16_t port) {
  const auto tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

/// The status page (when --http-port asks for one), fed by the process's events.
std::unique_ptr<http_status> start_status_page(node& n, const app_config& cfg, coordinator_settings& settings) {
  settings.board = std::make_shared<status_board>(unix_seconds());
  n.metrics()->observe(
      [board = settings.board](double t, const char* event, std::initializer_list<metrics_sink::field> fields) {
        board->on_event(t, event, fields);
      });
  if (cfg.coordinator.http_port <= 0)
    return nullptr;
  std::string error;
  auto http = http_status::start(cfg.coordinator.http_host, static_cast<uint16_t>(cfg.coordinator.http_port),
                                 cfg.coordinator.http_token, settings.board, error);
  if (!http) {
    std::cerr << "swarm: coordinator: " << error << " (--http-port, --http-host)\n";
    n.end(2);
  }
  get_logger("coordinator")
      ->info("status page on http://{}:{}/ (also /api/status and /metrics)", cfg.coordinator.http_host, http->port());
  return http;
}

/// The coordinator actor published on `port`; ends the process when it cannot listen.
std::pair<coordinator_actor, std::unique_ptr<basp_guard>> serve(node& n, const app_config& cfg,
                                                                const coordinator_settings& settings, int port) {
  auto coord = n.sys().spawn(coordinator, settings, n.metrics());
  // reuse: a coordinator restarted on its old port must not wait out TIME_WAIT.
  auto guard = n.publish(coord, port, true);
  if (!guard) {
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    n.end(1);
  }
  if (!cfg.coordinator.port_file.empty())
    write_port_file(cfg.coordinator.port_file, guard->port());
  get_logger("coordinator")
      ->info("listening on port {} for {} stages (model hash {}, tokenizer {}, {} ids)", guard->port(), cfg.stages,
             cfg.model.hash(), cfg.model.tokenizer, cfg.model.vocab);
  return {coord, std::move(guard)};
}

/// A lease from etcd, tried for up to --coordinator-wait at start (then exit
/// 1 naming the endpoints), and for as long as it takes later.
int64_t grant_lease(node& n, etcd_client& client, const app_config& cfg, bool at_start) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                             std::chrono::duration<double>(cfg.net.coordinator_wait_s));
  bool told = false;
  for (;;) {
    auto lease = client.grant(cfg.net.control_lease_s);
    if (lease)
      return *lease;
    if (stop_requested)
      n.end(0);
    if (at_start && std::chrono::steady_clock::now() > deadline) {
      std::cerr << "swarm: coordinator cannot reach etcd at " << cfg.net.control << " within "
                << cfg.net.coordinator_wait_s << " s (--coordinator-wait): " << describe(lease.error()) << "\n";
      n.end(1);
    }
    if (!told)
      get_logger("coordinator")->warn("etcd at {}: {}; trying again", cfg.net.control, describe(lease.error()));
    told = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

/// The port a candidate listens on: --port, else a free one; ends the process when there is none.
int candidate_port(node& n, const app_config& cfg) {
  const int port = cfg.coordinator.port > 0 ? cfg.coordinator.port : free_tcp_port("0.0.0.0");
  if (port == 0) {
    std::cerr << "swarm: coordinator: no free port to listen on\n";
    n.end(1);
  }
  return port;
}

/// Campaigns through etcd until elected: the won election, `lease` the lease
/// it was won under, kept by `keeper` for `leader`. Each campaign lost or
/// given up on costs its lease (a fresh one for the next).
etcd_leadership campaign_until_won(node& n, etcd_client& client, const app_config& cfg, const std::string& address,
                                   int64_t& lease, std::shared_ptr<leadership>& leader,
                                   std::unique_ptr<control::lease_keeper>& keeper) {
  for (bool told = false;;) {
    leader = std::make_shared<leadership>();
    keeper =
        std::make_unique<control::lease_keeper>(control::endpoints_of(cfg), lease, cfg.net.control_lease_s, leader);
    auto result = client.campaign(control::election, address, lease, std::chrono::seconds(5));
    // Leading needs a renewal confirmed after the win (its deadline runs from
    // there); it may take a while when a member is cut off, not past the lease.
    if (result && keeper->wait_renewed(std::chrono::milliseconds(cfg.net.control_lease_s * 1000) -
                                       control::lease_keeper::margin(cfg.net.control_lease_s)))
      return *result;
    if (stop_requested)
      n.end(0);
    if (!result && code_of(result.error()) != errc::TIMEOUT && !told) {
      get_logger("coordinator")->warn("campaign through etcd failed: {}; trying again", describe(result.error()));
      told = true;
    }
    // A campaign given up is withdrawn by etcd later (net/etcd.hpp): never reuse its lease.
    keeper.reset();
    (void)client.revoke(lease);
    lease = grant_lease(n, client, cfg, false);
  }
}

/// What the previous leader recorded for its successor, or nothing when it cannot be read.
control::resume_state resume_of(etcd_client& client, int stages) {
  auto resume = control::load_resume(client, stages);
  if (!resume) {
    get_logger("coordinator")
        ->warn("reading what the previous leader recorded failed: {}; starting from the servers' reports",
               describe(resume.error()));
    resume = control::resume_state{};
  }
  return *resume;
}

/// A leadership event: `change` is "won" or "lost".
void emit_leadership(node& n, const char* change, const etcd_leadership& won, const std::string& address,
                     double stood_by_s) {
  n.metrics()->emit("leadership", {{"change", std::string{change}},
                                   {"term", won.term},
                                   {"address", address},
                                   {"pid", int64_t{::getpid()}},
                                   {"stood_by_s", stood_by_s}});
}

/// Coordinates until the coordinator actor ends (its exit code), the lease is
/// lost (exit 3) or the process is asked to stop (resigning first: exit 0).
[[noreturn]] void lead(node& n, etcd_client& client, const control::lease_keeper& keeper, control::recorder& recorder,
                       const etcd_leadership& won, const std::string& address, const coordinator_actor& coord) {
  auto log = get_logger("coordinator");
  caf::scoped_actor self{n.sys()};
  self->monitor(coord);
  for (;;) {
    bool down = false;
    caf::error reason;
    self->receive(
        [&](caf::down_msg& msg) {
          down = true;
          reason = std::move(msg.reason);
        },
        caf::after(std::chrono::milliseconds(20)) >> [] {});
    if (down)
      n.end(exit_code_of(reason));
    if (keeper.lost()) {
      // Its actors stopped ordering when the lease's deadline passed (may_order); now the process goes.
      log->error("lost its etcd lease (term {}): another candidate may lead now; exiting so as to stand again",
                 won.term);
      emit_leadership(n, "lost", won, address, 0.0);
      n.end(3);
    }
    if (stop_requested) {
      // Records still queued first (while it leads, they can be written):
      // what the successor resumes from. Bounded: the stop watchdog's 5 s.
      if (!recorder.flush(control::recorder::flush_wait))
        log->warn("etcd: records not all written within {} ms; the successor resumes from older ones",
                  control::recorder::flush_wait.count());
      (void)client.resign(won);  // a standby need not wait out the lease
      log->info("resigned leadership (term {})", won.term);
      caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
      n.end(0);
    }
  }
}

/// --control: a candidate. Stands by until etcd elects it, then coordinates
/// as the one coordinator does, with its term on every order, until it stops
/// (resigning, so a standby takes over at once) or loses its lease (exit 3:
/// it must not order any more, and it stands again as a fresh process).
[[noreturn]] void run_candidate(node& n, const app_config& cfg, coordinator_settings settings) {
  auto log = get_logger("coordinator");
  auto client = control::client_of(cfg, std::chrono::seconds(1));
  const int port = candidate_port(n, cfg);
  const std::string address = cfg.server.host + ":" + std::to_string(port);
  const auto since = std::chrono::steady_clock::now();
  int64_t lease = grant_lease(n, *client, cfg, true);
  auto leading_term = std::make_shared<std::atomic<int64_t>>(0);
  control::start_watch(control::endpoints_of(cfg), n.metrics(), leading_term);
  auto leader = std::make_shared<leadership>();
  std::unique_ptr<control::lease_keeper> keeper;
  n.phase("standing by");
  log->info("standing by as {} for the election through etcd at {}", address, cfg.net.control);
  const etcd_leadership won = campaign_until_won(n, *client, cfg, address, lease, leader, keeper);
  leader->term = won.term;
  keeper->watch(won);
  const auto resume = resume_of(*client, cfg.stages);
  control::recorder recorder(control::endpoints_of(cfg), won);
  leader->record = [&recorder](const std::string& key, const std::string& value) { recorder.put(key, value); };
  settings.leader = leader;
  settings.averaging.resume = resume.stages;
  settings.rebalancing.resume = resume.rebalancer;
  auto [coord, guard] = serve(n, cfg, settings, port);
  *leading_term = won.term;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  log->info("leading as term {} at {} (stood by {:.1f} s)", won.term, address, waited);
  emit_leadership(n, "won", won, address, waited);
  n.phase("coordinating (elected)");
  lead(n, *client, *keeper, recorder, won, address, coord);
}

}  // namespace

int run_coordinator(const app_config& cfg) {
  node n{cfg, "coordinator", "coordinator", "coordinator"};
  auto settings = settings_of(cfg);
  n.start();
  auto http = start_status_page(n, cfg, settings);
  if (!cfg.net.control.empty())
    run_candidate(n, cfg, settings);
  auto [coord, guard] = serve(n, cfg, settings, cfg.coordinator.port);
  n.phase("coordinating");
  n.end(exit_code_of(n.wait_for(caf::actor_cast<caf::actor>(coord))));
}

int run_status(const app_config& cfg) {
  node n{cfg, "status", "status", nullptr};  // --coordinator was checked with the config
  n.start();
  auto coord = n.connect(cfg.trainer.coordinator);
  n.phase("asking the coordinator");
  const auto screen = status_screen(n.sys(), coord, std::chrono::seconds(10));
  if (screen)
    std::cout << *screen << std::flush;
  else
    std::cerr << "swarm: the coordinator did not answer: " << describe(screen.error()) << "\n";
  n.end(screen ? 0 : 1);
}

}  // namespace swarm
