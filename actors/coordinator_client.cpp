#include "actors/coordinator_client.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "messages/wire.hpp"

namespace swarm {

caf::expected<proto::placement> ask_placement(caf::actor_system& sys, const coordinator_actor& coord,
                                              const std::string& server_id, const model_config& model) {
  proto::placement_request req;
  req.set_server_id(server_id);
  req.set_config_hash(model.hash());
  req.set_tokenizer(model.tokenizer_label());
  caf::expected<proto::placement> answer{caf::error{}};
  caf::scoped_actor self{sys};
  self->request(coord, std::chrono::seconds(10), place_atom::value, wrap(req))
      .receive([&](const encoded<proto::placement>& bytes) { answer = decode(bytes); },
               [&](caf::error& err) { answer = std::move(err); });
  return answer;
}

caf::error register_with(caf::actor_system& sys, const coordinator_actor& coord, const proto::register_server& reg,
                         const stage_actor& server) {
  caf::error refused;
  caf::scoped_actor self{sys};
  self->request(server, std::chrono::seconds(30), register_atom::value, wrap(reg), caf::actor_cast<caf::actor>(coord))
      .receive([](const std::string&) {}, [&](caf::error& err) { refused = std::move(err); });
  return refused;
}

bool answers(caf::actor_system& sys, const coordinator_actor& coord, caf::timespan timeout) {
  bool alive = false;
  caf::scoped_actor self{sys};
  self->request(coord, timeout, averager_atom::value)
      .receive([&](const averager_actor&) { alive = true; }, [](caf::error&) {});
  return alive;
}

caf::expected<std::string> status_screen(caf::actor_system& sys, const coordinator_actor& coord,
                                         caf::timespan timeout) {
  caf::expected<std::string> screen{caf::error{}};
  caf::scoped_actor self{sys};
  self->request(coord, timeout, status_atom::value, std::string{"text"})
      .receive([&](std::string& text) { screen = std::move(text); }, [&](caf::error& err) { screen = std::move(err); });
  return screen;
}

}  // namespace swarm
