#include "actors/load_balancer.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/log.hpp"
#include "actors/policy/least_in_flight.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

using self_ptr = caf::stateful_actor<load_balancer_state>*;
using request = load_balancer_state::request;

caf::timespan seconds(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}

void dispatch(self_ptr self, request req);

/// A reply or error for request `id` arrived (or the server died): settle it once.
void settle(self_ptr self, uint64_t id, caf::expected<std::string> result) {
  auto& st = self->state;
  auto it = st.in_flight.find(id);
  if (it == st.in_flight.end())
    return;  // already failed when its server went down
  for (auto& s : st.servers)
    if (s.id == it->second.server_id)
      --s.in_flight;
  if (result)
    it->second.promise.deliver(std::move(*result), it->second.server_id);
  else
    it->second.promise.deliver(result.error());
  st.in_flight.erase(it);
}

void dispatch(self_ptr self, request req) {
  auto& st = self->state;
  std::vector<int> load;
  for (const auto& s : st.servers)
    load.push_back(s.in_flight);
  auto pick = policy::least_in_flight(load, st.rotation++);
  // Backward goes back to the forward's server while it lives: until stage
  // averaging keeps replicas identical, only that replica's function matches the
  // gradient the later stages computed.
  for (size_t i = 0; i < st.servers.size(); ++i)
    if (!req.preferred.empty() && st.servers[i].id == req.preferred)
      pick = i;
  if (!pick) {
    if (st.waiting.empty())
      get_logger("load_balancer")->warn("stage {}: no live server; requests wait up to {} s for one to join",
                                        st.cfg.stage, st.cfg.no_server_wait_s);
    st.waiting.push_back(std::move(req));
    return;
  }
  auto& target = st.servers[*pick];
  ++target.in_flight;
  req.server_id = target.id;
  auto piece = cut(req.payload, static_cast<size_t>(st.cfg.chunk_bytes), st.next_transfer);
  send_lead(self, target.handle, piece);
  const uint64_t id = ++st.next_request;
  const bool forward = req.forward;
  st.in_flight.emplace(id, std::move(req));
  const auto server_addr = target.handle.address();
  auto on_reply = [self, id, server_addr](uint64_t transfer_id, std::string& tail) {
    settle(self, id, self->state.chunks.finish(server_addr, transfer_id, std::move(tail)));
  };
  auto on_error = [self, id](caf::error& err) { settle(self, id, std::move(err)); };
  if (forward)
    self->request(target.handle, seconds(st.cfg.forward_timeout_s), forward_atom::value, piece.transfer_id,
                  std::move(piece.tail))
        .then(on_reply, on_error);
  else
    self->request(target.handle, seconds(st.cfg.backward_timeout_s), backward_atom::value, piece.transfer_id,
                  std::move(piece.tail))
        .then(on_reply, on_error);
}

void flush_waiting(self_ptr self) {
  auto waiting = std::move(self->state.waiting);
  self->state.waiting.clear();
  for (auto& req : waiting)
    dispatch(self, std::move(req));
}

/// Fails the requests pending at `server_id` with PEER_GONE and forgets the server.
void remove_server(self_ptr self, const std::string& server_id, const std::string& why) {
  auto& st = self->state;
  auto it = std::find_if(st.servers.begin(), st.servers.end(), [&](const auto& s) { return s.id == server_id; });
  if (it == st.servers.end())
    return;
  get_logger("load_balancer")->warn("stage {}: server {} down ({}), failing its {} pending requests", st.cfg.stage,
                                    server_id, why, it->in_flight);
  st.chunks.forget(it->handle.address());
  st.servers.erase(it);
  std::vector<uint64_t> lost;
  for (const auto& [id, req] : st.in_flight)
    if (req.server_id == server_id)
      lost.push_back(id);
  for (auto id : lost)
    settle(self, id, make_error(errc::PEER_GONE, "server " + server_id + " went down: " + why));
}

void connect(self_ptr self, const proto::membership_update& up) {
  auto& st = self->state;
  const auto id = up.server_id();
  if (st.connecting.count(id) > 0 ||
      std::any_of(st.servers.begin(), st.servers.end(), [&](const auto& s) { return s.id == id; }))
    return;
  st.connecting.insert(id);
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(10), caf::connect_atom::value, up.host(), static_cast<uint16_t>(up.port()))
      .then(
          [self, id](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            auto& st = self->state;
            st.connecting.erase(id);
            if (!ptr) {
              get_logger("load_balancer")->warn("stage {}: server {} published nothing", st.cfg.stage, id);
              return;
            }
            auto handle = caf::actor_cast<stage_actor>(std::move(ptr));
            self->monitor(handle);
            st.servers.push_back({id, handle, 0});
            get_logger("load_balancer")->info("stage {}: server {} connected ({} live)", st.cfg.stage, id,
                                              st.servers.size());
            flush_waiting(self);
          },
          [self, id](caf::error& err) {
            self->state.connecting.erase(id);
            get_logger("load_balancer")->warn("stage {}: cannot connect to server {}: {}", self->state.cfg.stage, id,
                                              self->system().render(err));
          });
}

void on_membership(self_ptr self, const std::string& bytes) {
  auto up = decode<proto::membership_update>(bytes, "membership_update");
  if (!up) {
    get_logger("load_balancer")->warn("stage {}: {}", self->state.cfg.stage, describe(up.error()));
    return;
  }
  if (up->kind() == proto::membership_update::JOIN)
    connect(self, *up);
  else
    remove_server(self, up->server_id(), "coordinator reported it down");
}

/// Expires requests that waited too long for any server.
void expire_waiting(self_ptr self) {
  auto& st = self->state;
  const auto limit = std::chrono::duration_cast<load_balancer_state::clock::duration>(
      std::chrono::duration<double>(st.cfg.no_server_wait_s));
  const auto now = load_balancer_state::clock::now();
  while (!st.waiting.empty() && now - st.waiting.front().queued_at > limit) {
    st.waiting.front().promise.deliver(make_error(
        errc::NO_SERVER, "stage " + std::to_string(st.cfg.stage) + " had no live server for " +
                             std::to_string(st.cfg.no_server_wait_s) + " s"));
    st.waiting.pop_front();
  }
}

} // namespace

caf::behavior load_balancer(self_ptr self, load_balancer_config cfg, coordinator_actor coordinator,
                            std::shared_ptr<metrics_sink> metrics) {
  self->state.cfg = cfg;
  self->state.metrics = std::move(metrics);
  self->set_down_handler([self](caf::down_msg& msg) {
    for (const auto& s : self->state.servers)
      if (s.handle.address() == msg.source) {
        remove_server(self, s.id, caf::to_string(msg.reason));
        return;
      }
  });
  proto::subscribe sub;
  sub.set_stage(static_cast<uint32_t>(cfg.stage));
  sub.set_config_hash(cfg.config_hash);
  self->request(coordinator, std::chrono::seconds(30), subscribe_atom::value, encode(sub))
      .then([](const std::string&) {},
            [self](caf::error& err) {
              get_logger("load_balancer")->error("stage {}: subscription refused: {}", self->state.cfg.stage,
                                                 describe(err));
              self->quit(err);
            });
  self->send(self, tick_atom::value);
  auto enqueue = [self](bool forward, std::string& payload, std::string preferred) {
    auto promise = self->make_response_promise();
    dispatch(self, {forward, std::move(payload), std::move(preferred), promise, load_balancer_state::clock::now(), {}});
    return promise;
  };
  return {
      [enqueue](forward_atom, std::string& payload) { return enqueue(true, payload, {}); },
      [enqueue](backward_atom, std::string& payload, std::string& preferred) {
        return enqueue(false, payload, std::move(preferred));
      },
      [self](membership_atom, const std::string& bytes) { on_membership(self, bytes); },
      [self](chunk_atom, uint64_t transfer_id, const std::string& piece) {
        self->state.chunks.add(caf::actor_cast<caf::actor_addr>(self->current_sender()), transfer_id, piece);
      },
      [self](tick_atom) {
        expire_waiting(self);
        self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
      },
  };
}

} // namespace swarm
