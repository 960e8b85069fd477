#pragma once
// What the actor tests share: a forward request's payload, stage server settings,
// a real stage-0 server and a silent (hung) one, and a server's registration.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/stage_server.hpp"
#include "messages/wire.hpp"
#include "model_configs.hpp"

namespace swarm::testing::actor_helpers {

using testing::tiny_model;

inline std::string forward_payload(uint32_t stage, int64_t batch, int64_t seq) {
  proto::forward_request req;
  req.set_microbatch_id(1);
  req.set_stage(stage);
  *req.mutable_inputs() = make_int64_tensor(std::vector<int64_t>(batch * seq, 65), {batch, seq});
  return encode(req);
}

/// A stage server's settings as the tests use them: replies cut into
/// `chunk_bytes` pieces, everything else as configured by default.
inline stage_server_config server_settings(std::string id, int64_t chunk_bytes = 16 << 20) {
  stage_server_config scfg;
  scfg.server_id = std::move(id);
  scfg.net.chunk_bytes = chunk_bytes;
  return scfg;
}

/// A real stage server `id` of tiny_model()'s stage 0 (of 2), its metrics to `path`.
inline stage_actor spawn_stage0_server(caf::actor_system& sys, const std::string& id, const std::string& path) {
  auto scfg = server_settings(id, 4 << 20);
  scfg.model = tiny_model();
  scfg.num_stages = 2;
  return sys.spawn<caf::detached>(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                                  std::make_shared<metrics_sink>(path, "server"),
                                  std::make_shared<stage_server_counters>());
}

/// A stage server that accepts requests and never answers: a hung peer.
inline stage_actor::behavior_type silent_server(stage_actor::pointer self) {
  return {
      [self](forward_atom, uint64_t, std::string&) -> caf::result<uint64_t, std::string> {
        return self->make_response_promise<uint64_t, std::string>();
      },
      [self](backward_atom, uint64_t, std::string&) -> caf::result<uint64_t, std::string> {
        return self->make_response_promise<uint64_t, std::string>();
      },
      [self](state_atom, uint64_t, std::string&) -> caf::result<uint64_t, std::string> {
        return self->make_response_promise<uint64_t, std::string>();
      },
      [](chunk_atom, uint64_t, std::string&) {},
      [](round_atom, std::string&, std::vector<caf::actor>&) {},
      [](done_atom, std::string&, std::vector<float>&) {},
      [](reload_atom, std::string&, caf::actor&) {},
      [](deadline_atom, uint64_t, int32_t) {},
      [](register_atom, std::string&, caf::actor&) { return std::string{}; },
      [](move_atom, std::string&) {},
      [](bulk_atom, uint64_t, std::vector<std::string>&) {},
      [](bulk_atom, uint64_t) {},
      [](settle_atom, uint64_t) {},
      [](leave_atom) {},
      [self](door_atom) -> caf::result<caf::actor> { return self->make_response_promise<caf::actor>(); },
  };
}

inline proto::register_server registration(const std::string& id, uint32_t stage, uint16_t port, uint64_t hash) {
  proto::register_server reg;
  reg.set_stage(stage);
  reg.set_server_id(id);
  reg.set_host("127.0.0.1");
  reg.set_port(port);
  reg.set_num_stages(2);
  reg.set_config_hash(hash);
  return reg;
}

}  // namespace swarm::testing::actor_helpers
