#pragma once
// Which server each attempt of one stage request goes to (SWARM.md,
// mechanisms 2-4): the one decision that swarm's load balancer and swarm-sim's
// trainers both make, written once so the simulator cannot drift from the
// binary.
//
// A request carries its history (attempt_history): the servers that failed it
// (avoided while another is eligible, then tried again rather than dropped),
// the servers whose doors said busy (passed over while it still asks), and for
// a backward its forward's server (taken when it is among the next in the
// rotation, policy::stage_router::choose_backward). Static routing pins one
// server per stage instead (policy::static_pin). A request asks a server's
// door for room (policy::admission) until busy_retries doors refused it; after
// that it is sent without asking, so a stage whose servers are all busy still
// takes every request.
//
// Pure: no CAF, no clock, no global RNG; `now` is seconds on the caller's
// monotonic clock and randomness comes in as an engine.

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "policy/routing.hpp"

namespace swarm::policy {

/// Knobs of the attempt planner; one field per line with its unit.
struct attempt_config {
  /// Static routing (the GPipe-style baseline): one pinned server per stage,
  /// no asking, no rerouting but to the pin's replacement.
  bool pinned = false;
  /// Attempts per stage request before its error goes back to the trainer
  /// (busy answers are not attempts).
  int max_attempts = 5;
  /// Busy answers a request takes before it is sent without asking; 0 = never ask.
  int busy_retries = 4;
};

/// One request's attempts so far, as the planner sees them.
struct attempt_history {
  bool backward = false;
  double samples = 0;              ///< the task's size in samples
  std::string preferred;           ///< a backward's forward server; empty: none
  std::vector<std::string> tried;  ///< servers that failed it, in order
  std::vector<std::string> busy;   ///< servers whose doors said busy, one entry per answer
  /// Attempts so far: the caller counts one when it sends the request, or
  /// when the attempt ends before it could (its ask failed, its server is gone).
  int attempts = 0;
};

/// Whether `h` asks a door before its next attempt (else it is sent as it is).
[[nodiscard]] bool asks(const attempt_config& cfg, const attempt_history& h);

/// Whether `h` may have another attempt.
[[nodiscard]] bool attempts_left(const attempt_config& cfg, const attempt_history& h);

/// The server of `h`'s next attempt, routed by `router` (the stage's live
/// servers: those not leaving): the forward's server when it is eligible and
/// due, else the next in the rotation that has not failed it (nor, while it
/// asks, said busy), else any eligible one. With cfg.pinned the pin, pinning
/// one of `candidates()` (the stage's live servers) when none is. nullopt:
/// none is eligible now (wait for one to join or a ban to end).
[[nodiscard]] std::optional<std::string> next_server(const attempt_config& cfg, const attempt_history& h,
                                                     stage_router& router, static_pin& pin, double now,
                                                     std::mt19937_64& rng,
                                                     const std::function<std::vector<std::string>()>& candidates);

/// `server`'s door said busy to `h`: not an attempt, not the server's fault.
void on_busy(attempt_history& h, stage_router& router, const std::string& server);

/// An attempt of `h` at `server` ended (sent or not; answered or not): the
/// server's slot is released and any next attempt avoids it.
void on_ended(attempt_history& h, stage_router& router, const std::string& server);

}  // namespace swarm::policy
