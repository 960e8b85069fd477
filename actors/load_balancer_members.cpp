// The load balancer's membership side (actors/load_balancer.hpp): the stage's
// servers as the coordinator reports them, joining, leaving and going down.
#include "actors/load_balancer_members.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/stage_server.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "messages/wire.hpp"
#include "net/tls.hpp"

namespace swarm::balancing {

namespace {

/// Static routing lost its pin: no rerouting to the servers already there.
void unpin(self_ptr self, const std::string& server_id) {
  auto& st = self->state;
  if (st.pin.pinned() != server_id)
    return;
  std::vector<std::string> present;
  for (const auto& [id, handle] : st.servers)
    present.push_back(id);
  st.pin.gone(server_id, present);
}

/// Takes the requests of `pending` that are at `server_id` (sent there, or asking its door).
std::vector<request> take_at(std::map<uint64_t, request>& pending, const std::string& server_id) {
  std::vector<request> taken;
  for (auto at = pending.begin(); at != pending.end();)
    if (at->second.server_id == server_id) {
      taken.push_back(std::move(at->second));
      at = pending.erase(at);
    } else {
      ++at;
    }
  return taken;
}

/// Asks a just-connected server for its door (actors/door.hpp). Until it
/// answers, or if it never does (an older server), requests go there without asking.
void ask_for_door(self_ptr self, const std::string& id, const stage_actor& server) {
  self->request(server, std::chrono::seconds(60), door_atom::value)
      .then(
          [self, id, server](const caf::actor& door) {
            auto& st = self->state;
            auto it = st.servers.find(id);
            if (door && it != st.servers.end() && it->second == server)  // still that server
              st.doors[id] = caf::actor_cast<door_actor>(door);
          },
          [self, id](caf::error& err) {
            get_logger("load_balancer")
                ->debug("stage {}: server {} named no door ({}): sending without asking", self->state.cfg.stage, id,
                        describe(err));
          });
}

/// A JOIN: dials the server (once at a time) and adds it when connected.
void connect(self_ptr self, const proto::membership_update& up) {
  auto& st = self->state;
  const auto id = up.server_id();
  if (st.caught.count(id) > 0) {
    get_logger("load_balancer")->warn("stage {}: server {} joined again; still banned here", st.cfg.stage, id);
    return;
  }
  if (st.leaving.erase(id) > 0) {  // it came back to this stage, still connected
    st.router.add(id, now_s(), &st.rng);
    get_logger("load_balancer")->info("stage {}: server {} is back", st.cfg.stage, id);
    flush_waiting(self);
    return;
  }
  if (st.connecting.count(id) > 0 || st.servers.count(id) > 0)
    return;
  st.connecting.insert(id);
  self->request(dialer(self->system()), std::chrono::seconds(10), caf::connect_atom::value, up.host(),
                static_cast<uint16_t>(up.port()))
      .then(
          [self, id](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            auto& st = self->state;
            st.connecting.erase(id);
            if (!ptr) {
              get_logger("load_balancer")->warn("stage {}: server {} published nothing", st.cfg.stage, id);
              return;
            }
            if (st.unreachable.erase(id) > 0)
              get_logger("load_balancer")->info("stage {}: server {} connected at last", st.cfg.stage, id);
            auto handle = caf::actor_cast<stage_actor>(std::move(ptr));
            self->monitor(handle);
            st.servers[id] = handle;
            st.router.add(id, now_s(), &st.rng);
            ask_for_door(self, id, handle);
            get_logger("load_balancer")
                ->debug("stage {}: server {} connected ({} live)", st.cfg.stage, id, st.servers.size());
            flush_waiting(self);
          },
          [self, id, up](caf::error& err) {
            auto& st = self->state;
            if (st.connecting.erase(id) == 0)
              return;  // the coordinator reported it gone meanwhile
            auto [it, first] = st.unreachable.try_emplace(id);
            if (!first)
              it->second.wait_s = std::min(60.0, 2 * it->second.wait_s);
            it->second.bytes = up.SerializeAsString();
            it->second.retry_at = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                          std::chrono::duration<double>(it->second.wait_s));
            auto log = get_logger("load_balancer");
            log->log(first ? spdlog::level::warn : spdlog::level::debug,
                     "stage {}: cannot connect to server {}: {}; trying again in {:.0f} s", st.cfg.stage, id,
                     self->system().render(err), it->second.wait_s);
          });
}

}  // namespace

void leave_server(self_ptr self, const std::string& server_id, const char* why) {
  auto& st = self->state;
  if (st.servers.count(server_id) == 0 || !st.leaving.insert(server_id).second)
    return;
  st.router.remove(server_id);
  unpin(self, server_id);
  get_logger("load_balancer")
      ->info("stage {}: server {} {} ({} left here)", st.cfg.stage, server_id, why,
             st.servers.size() - st.leaving.size());
}

void remove_server(self_ptr self, std::string server_id, const std::string& why) {
  auto& st = self->state;
  auto it = st.servers.find(server_id);
  if (it == st.servers.end())
    return;
  st.chunks.forget(it->second.address());
  st.servers.erase(it);
  st.doors.erase(server_id);
  st.leaving.erase(server_id);
  st.router.remove(server_id);
  unpin(self, server_id);
  auto lost = take_at(st.in_flight, server_id);
  auto unasked = take_at(st.asking, server_id);  // waiting on its door: choose again now, not at the ask's timeout
  get_logger("load_balancer")
      ->warn("stage {}: server {} down ({}); re-sending its {} pending requests", st.cfg.stage, server_id, why,
             lost.size() + unasked.size());
  for (auto& req : lost)
    on_attempt_failed(self, std::move(req), make_error(errc::PEER_GONE, "server " + server_id + " down: " + why),
                      "down");
  for (auto& req : unasked)
    dispatch(self, std::move(req));
}

void retry_unreachable(self_ptr self) {
  auto& st = self->state;
  const auto now = clock_type::now();
  for (auto& [id, u] : st.unreachable)
    if (u.retry_at <= now && st.connecting.count(id) == 0) {
      proto::membership_update up;
      if (up.ParseFromString(u.bytes))
        connect(self, up);
    }
}

void on_membership(self_ptr self, const encoded<proto::membership_update>& bytes) {
  auto up = decode(bytes);
  if (!up) {
    get_logger("load_balancer")->warn("stage {}: {}", self->state.cfg.stage, describe(up.error()));
    return;
  }
  if (up->kind() == proto::membership_update::JOIN) {
    self->state.unreachable.erase(up->server_id());  // a fresh JOIN is dialed at once
    connect(self, *up);
    return;
  }
  self->state.unreachable.erase(up->server_id());
  self->state.connecting.erase(up->server_id());
  if (up->kind() == proto::membership_update::LEAVE)
    leave_server(self, up->server_id());
  else
    remove_server(self, up->server_id(), "coordinator reported it down");
}

void subscribe(self_ptr self, const coordinator_actor& coordinator) {
  self->state.coordinator = coordinator.address();
  self->state.coordinator_handle = coordinator;
  proto::subscribe sub;
  sub.set_stage(static_cast<uint32_t>(self->state.cfg.stage));
  sub.set_config_hash(self->state.cfg.config_hash);
  sub.set_tokenizer(self->state.cfg.tokenizer);
  self->request(coordinator, std::chrono::seconds(30), subscribe_atom::value, wrap(sub))
      .then([](const std::string&) {},
            [self](caf::error& err) {
              get_logger("load_balancer")
                  ->error("stage {}: subscription refused: {}", self->state.cfg.stage, describe(err));
              self->quit(err);
            });
}

}  // namespace swarm::balancing
