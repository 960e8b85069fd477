#pragma once
// What the actor tests share: a forward request's payload, stage server settings,
// a real stage-0 server and a silent (hung) one, and a server's registration.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/stage_server.hpp"
#include "messages/wire.hpp"
#include "model_configs.hpp"

namespace swarm::testing::actor_helpers {

using testing::tiny_model;

inline encoded<proto::forward_request> forward_payload(uint32_t stage, int64_t batch, int64_t seq) {
  proto::forward_request req;
  req.set_microbatch_id(1);
  req.set_stage(stage);
  *req.mutable_inputs() = make_int64_tensor(std::vector<int64_t>(batch * seq, 65), {batch, seq});
  return wrap(req);
}

/// A stage server's settings as the tests use them: replies cut into
/// `chunk_bytes` pieces, everything else as configured by default.
inline stage_server_config server_settings(std::string id, int64_t chunk_bytes = 16 << 20) {
  stage_server_config scfg;
  scfg.server_id = std::move(id);
  scfg.net.chunk_bytes = chunk_bytes;
  return scfg;
}

/// A real stage server `id` of tiny_model()'s stage 0 (of 2), its metrics to `path` (empty: nowhere).
inline stage_actor spawn_stage0_server(caf::actor_system& sys, const std::string& id, const std::string& path) {
  auto scfg = server_settings(id, 4 << 20);
  scfg.model = tiny_model();
  scfg.num_stages = 2;
  return sys.spawn<caf::detached>(stage_server, scfg, std::make_shared<stage_worker>(tiny_model(), 0, 2, "cpu"),
                                  open_metrics(path, "server"), std::make_shared<stage_server_counters>());
}

/// A stage server that accepts requests and never answers: a hung peer.
inline stage_actor::behavior_type silent_server(stage_actor::pointer self) {
  return {
      [self](forward_atom, uint64_t,
             encoded<proto::forward_request>&) -> caf::result<uint64_t, encoded<proto::forward_reply>> {
        return self->make_response_promise<uint64_t, encoded<proto::forward_reply>>();
      },
      [self](backward_atom, uint64_t,
             encoded<proto::backward_request>&) -> caf::result<uint64_t, encoded<proto::backward_reply>> {
        return self->make_response_promise<uint64_t, encoded<proto::backward_reply>>();
      },
      [self](state_atom, uint64_t,
             encoded<proto::state_request>&) -> caf::result<uint64_t, encoded<proto::state_reply>> {
        return self->make_response_promise<uint64_t, encoded<proto::state_reply>>();
      },
      [](chunk_atom, uint64_t, std::string&) {},
      [](round_atom, encoded<proto::round_begin>&, std::vector<caf::actor>&) {},
      [](done_atom, encoded<proto::round_outcome>&, std::vector<float>&) {},
      [](reload_atom, encoded<proto::reload_order>&, caf::actor&) {},
      [](register_atom, encoded<proto::register_server>&, caf::actor&) { return std::string{}; },
      [](move_atom, encoded<proto::move_order>&) {},
      [self](door_atom) -> caf::result<caf::actor> { return self->make_response_promise<caf::actor>(); },
  };
}

/// The next membership update `watch` (a subscriber) gets within `wait`; nullopt if none came.
inline std::optional<proto::membership_update> next_update(caf::scoped_actor& watch, caf::timespan wait) {
  std::optional<proto::membership_update> up;
  watch->receive(
      [&](membership_atom, const encoded<proto::membership_update>& m) { up.emplace().ParseFromString(m.bytes); },
      caf::after(wait) >> [] {});
  return up;
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

/// One forward (stage 0 of 2, 2 x 8 tokens) through the load balancer `lb`:
/// the id of the server that answered it, or its error described.
inline std::string forward_through(caf::scoped_actor& self, const caf::actor& lb, caf::timespan timeout) {
  std::string served_by;
  self->request(lb, timeout, forward_atom::value, bulk_parts{forward_payload(0, 2, 8).bytes}, int64_t{2})
      .receive([&](bulk_parts&, const std::string& server, int32_t) { served_by = server; },
               [&](caf::error& err) { served_by = describe(err); });
  return served_by;
}

/// Event lines an actor writes, kept in memory (shared with the sink: the
/// actor may outlive the test's locals).
struct event_log : std::enable_shared_from_this<event_log> {
  std::mutex m;
  std::vector<std::string> lines;
  std::shared_ptr<metrics_sink> sink() {
    auto s = std::make_shared<metrics_sink>();
    s->observe(
        [self = shared_from_this()](double t, const char* event, std::initializer_list<metrics_sink::field> fields) {
          std::lock_guard<std::mutex> lock(self->m);
          self->lines.push_back(metrics_sink::format(t, "coordinator", event, fields));
        });
    return s;
  }
  /// The first line holding `a`; empty when none.
  std::string find(const std::string& a) {
    std::lock_guard<std::mutex> lock(m);
    for (const auto& l : lines)
      if (l.find(a) != std::string::npos)
        return l;
    return {};
  }
  size_t count(const std::string& a, const std::string& b = "") {
    std::lock_guard<std::mutex> lock(m);
    return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(a) != std::string::npos && l.find(b) != std::string::npos;
    }));
  }
};

}  // namespace swarm::testing::actor_helpers
