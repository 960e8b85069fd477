#pragma once
// Did this process stand still? A SIGSTOP (or a machine that starved it) longer
// than the connection timeout makes every peer count the process as gone,
// while the process itself, once running again, first handles what was already
// in its mailbox as if nothing happened: a stage server would finish an
// averaging round its peers finished without it, and end with other
// parameters. A thread ticking every 20 ms notices such a gap in its own
// ticks; the server asks before applying a round. The round at risk may even
// begin after the thaw (its begin waited in the mailbox), so the server gives
// up every round it ends after a thaw until it has registered again, or for
// twice the gap when its links survived and it does not register again.

#include <chrono>
#include <optional>

namespace swarm {

/// Starts the watch (once per process; later calls keep the first `gap`).
void watch_freezes(std::chrono::steady_clock::duration gap);

/// When the process last ran again after standing still for at least the gap,
/// if that was after `t` (nullopt when not, or when the watch is not running).
[[nodiscard]] std::optional<std::chrono::steady_clock::time_point> thawed_after(
    std::chrono::steady_clock::time_point t);

/// The longest time the process stood still (a gap in the watch's ticks, less
/// their 20 ms period) in a stall that overlaps [from, to], ended or lasting
/// now; gaps under 30 ms beyond the period are not kept. Zero when the watch is
/// not running. A stage server asks it before it adds a microbatch it already
/// answered: a stall while its reply was leaving may have made that reply late.
[[nodiscard]] std::chrono::steady_clock::duration longest_stall_between(std::chrono::steady_clock::time_point from,
                                                                        std::chrono::steady_clock::time_point to);

}  // namespace swarm
