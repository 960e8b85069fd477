#pragma once
// Clocks every layer reads. Policies never call these: their callers pass the
// time in, so tests drive time by hand.

#include <chrono>

namespace swarm {

/// Now in unix seconds: the clock of every metrics event's "t" and of the
/// times processes tell each other (reports, the status page).
[[nodiscard]] double unix_seconds();

/// Seconds on the monotonic clock from an arbitrary origin: the `now` policies take.
[[nodiscard]] inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Seconds from `since` to now on the monotonic clock: durations a process measures itself.
[[nodiscard]] inline double seconds_since(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace swarm
