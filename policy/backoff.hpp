#pragma once
// How long a node waits before it tries again to reach its coordinator after
// a try failed (a dial that timed out, a registration refused): capped
// exponential backoff with jitter. Without it a node whose registration was
// refused at once retried in a tight loop, and a whole swarm that lost its
// coordinator came back at the same instant; jitter spreads them out.
//
// Pure: the random draw comes in as an argument (uniform in [0, 1)).

#include <chrono>

namespace swarm::policy {

struct backoff_settings {
  /// The wait after the first failure: short, a restarted coordinator is often back at once.
  std::chrono::milliseconds first{200};
  double factor = 2.0;  ///< each failure in a row multiplies the wait
  /// The longest wait: a coordinator that comes back is found within this.
  std::chrono::milliseconds cap{5000};
  /// The share of the wait the draw may take off: 0.5 waits between half and all of it.
  double jitter = 0.5;
};

/// The wait after `failures` failed tries in a row (1 after the first):
/// first * factor^(failures - 1), at most cap, less jitter * draw of it. None
/// before any failure; a draw outside [0, 1) is clamped.
[[nodiscard]] std::chrono::milliseconds backoff_delay(const backoff_settings& s, int failures, double draw);

}  // namespace swarm::policy
