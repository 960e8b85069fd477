#pragma once
// Did this process stand still? A SIGSTOP (or a machine that starved it) longer
// than the connection timeout makes every peer count the process as gone,
// while the process itself, once running again, first handles what was already
// in its mailbox as if nothing happened: a stage server would finish an
// averaging round its peers finished without it, and end with other
// parameters. A thread ticking every 100 ms notices such a gap in its own
// ticks; the server asks before applying a round.

#include <chrono>

namespace swarm {

/// Starts the watch (once per process; later calls keep the first `gap`).
void watch_freezes(std::chrono::steady_clock::duration gap);

/// Whether the process stood still for at least the gap at some time after
/// `t` (false when the watch is not running).
[[nodiscard]] bool stood_still_since(std::chrono::steady_clock::time_point t);

} // namespace swarm
