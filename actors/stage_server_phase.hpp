#pragma once
// The stage server's phases and the only transitions between them
// (actors/stage_server_move.hpp carries them out):
//
//   starting --(registered)--> serving
//   serving --(move_ordered)--> draining: requests refused with LEAVING (load
//     balancers re-send them elsewhere; nothing was computed), reload orders
//     turned down; a round or reload it is in ends first and then re-sends it
//     the order; with gradient accumulated it waits for the stage's next round
//     and hands it in (at most 10 s after the order)
//   draining --(drained)--> moving: server_exit for the old stage (with gradient
//     still not averaged counted in dropped_samples), leave_notice to the
//     coordinator, the new stage's layers built, its state copied from a live
//     peer (initial parameters when none holds it), registered for the new stage.
//     The actor blocks while moving (it is detached, and has left its old stage).
//   moving --(moved)--> serving: `rebalance` written (seconds from the order)
//   starting | serving | draining --(stop_asked: exit message)--> stopping: with
//     gradient held and the coordinator there, requests refused with LEAVING and
//     a progress report saying so; the averager starts a round with what the
//     stage holds (a short step), and the server exits when it ends (at most 2 s)
//
// Registering again (a coordinator restart) keeps the phase it comes in; any
// other event is refused where no arrow above starts (a move order while
// stopping is ignored, for one).

#include <optional>

namespace swarm {

enum class server_phase { starting, serving, draining, moving, stopping };
enum class phase_event { registered, move_ordered, drained, moved, stop_asked };

/// Where `event` leads from `from`; nullopt when it cannot happen there.
[[nodiscard]] std::optional<server_phase> next_phase(server_phase from, phase_event event);

/// Whether a server in `phase` computes requests (else it refuses them with LEAVING).
[[nodiscard]] inline bool takes_requests(server_phase phase) {
  return phase == server_phase::starting || phase == server_phase::serving;
}

[[nodiscard]] const char* to_string(server_phase phase);
[[nodiscard]] const char* to_string(phase_event event);

}  // namespace swarm
