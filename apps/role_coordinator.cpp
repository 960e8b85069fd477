// --role coordinator: the membership registry, the averaging coordinator and
// the rebalancer, with the status page on --http-port; and --role status,
// which asks a running coordinator for one screen.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <caf/all.hpp>

#include "actors/coordinator.hpp"
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
  settings.averaging.timeout_s = cfg.coordinator.averaging_timeout_s;
  settings.averaging.piece_elements = std::max<int64_t>(1, cfg.net.chunk_bytes / 4);
  auto& rb = settings.rebalancing;
  rb.stage_cost = stage_costs(cfg.model, cfg.stages);
  rb.enabled = cfg.coordinator.rebalance == "on";
  rb.period_s = cfg.coordinator.rebalance_period_s;
  rb.settle_s = std::min(10.0, rb.period_s);
  rb.policy.min_gain = cfg.coordinator.rebalance_min_gain;
  rb.policy.min_replicas = cfg.coordinator.min_replicas;
  return settings;
}

/// Write then rename, so a reader never sees a half-written number.
void write_port_file(const std::string& path, uint16_t port) {
  const auto tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

} // namespace

int run_coordinator(const app_config& cfg) {
  node n{cfg, "coordinator", "coordinator", "coordinator"};
  auto log = get_logger("coordinator");
  auto settings = settings_of(cfg);
  n.start();
  settings.board = std::make_shared<status_board>(unix_seconds());
  n.metrics()->observe([board = settings.board](double t, const char* event,
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
      n.end(2);
    }
    log->info("status page on http://{}:{}/ (also /api/status and /metrics)", cfg.coordinator.http_host,
              http->port());
  }
  auto coord = n.sys().spawn(coordinator, settings, n.metrics());
  // reuse: a coordinator restarted on its old port must not wait out TIME_WAIT.
  auto guard = n.publish(coord, cfg.coordinator.port, true);
  if (!guard) {
    caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
    n.end(1);
  }
  if (!cfg.coordinator.port_file.empty())
    write_port_file(cfg.coordinator.port_file, guard->port());
  log->info("listening on port {} for {} stages (model hash {}, tokenizer {}, {} ids)", guard->port(), cfg.stages,
            cfg.model.hash(), cfg.model.tokenizer, cfg.model.vocab);
  n.phase("coordinating");
  n.end(exit_code_of(n.wait_for(caf::actor_cast<caf::actor>(coord))));
}

int run_status(const app_config& cfg) {
  node n{cfg, "status", "status", nullptr};  // --coordinator was checked with the config
  n.start();
  auto coord = n.connect(cfg.trainer.coordinator);
  n.phase("asking the coordinator");
  int code = 1;
  caf::scoped_actor self{n.sys()};
  self->request(coord, std::chrono::seconds(10), status_atom::value, std::string{"text"})
      .receive(
          [&](const std::string& screen) {
            std::cout << screen << std::flush;
            code = 0;
          },
          [&](caf::error& err) { std::cerr << "swarm: the coordinator did not answer: " << describe(err) << "\n"; });
  n.end(code);
}

} // namespace swarm
