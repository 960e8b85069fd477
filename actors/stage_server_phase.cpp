#include "actors/stage_server_phase.hpp"

namespace swarm {

std::optional<server_phase> next_phase(server_phase from, phase_event event) {
  using p = server_phase;
  using e = phase_event;
  switch (event) {
    case e::registered: return from == p::starting ? p::serving : from;
    case e::move_ordered:
      if (from == p::serving || from == p::draining)
        return p::draining;
      return std::nullopt;
    case e::drained:
      if (from == p::draining)
        return p::moving;
      return std::nullopt;
    case e::moved:
      if (from == p::moving)
        return p::serving;
      return std::nullopt;
    case e::stop_asked:
      if (from == p::moving)
        return std::nullopt;  // it blocks while moving: no handler runs
      return p::stopping;
  }
  return std::nullopt;
}

const char* to_string(server_phase phase) {
  switch (phase) {
    case server_phase::starting: return "starting";
    case server_phase::serving: return "serving";
    case server_phase::draining: return "draining";
    case server_phase::moving: return "moving";
    case server_phase::stopping: return "stopping";
  }
  return "?";
}

const char* to_string(phase_event event) {
  switch (event) {
    case phase_event::registered: return "registered";
    case phase_event::move_ordered: return "move_ordered";
    case phase_event::drained: return "drained";
    case phase_event::moved: return "moved";
    case phase_event::stop_asked: return "stop_asked";
  }
  return "?";
}

}  // namespace swarm
