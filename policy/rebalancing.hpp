#pragma once
// Which server serves which stage (SWARM section 3.2, "adaptive swarm
// rebalancing"): pure, over the rebalancer's view of the swarm, with time passed
// in, so it is tested without actors or clocks.
//
// Throughput model. A pipeline runs at the speed of its slowest stage, and a
// stage's capacity is the sum of its servers' rates:
//   capacity(stage) = sum of rate_i over its servers, samples/s.
// rate_i is what server i processes per second of compute on its stage (samples
// whose gradients it added / seconds it spent handling requests): its speed when
// busy, not the load the trainers happened to give it. Busy fraction and queue
// length say which stage is the bottleneck now but not what a move would
// change; a rate does. A server's rate on another stage is predicted from the
// stages' costs (work per sample): rate_on_b = rate_on_a x cost_a / cost_b.
// A server not measured yet counts with the median speed of those that are
// (all equal when none is).
//
// Moves, one at a time, in this order:
//   empty      a stage without servers gets one at once, from a stage with two or
//              more (never emptying one), whichever move leaves the best bottleneck;
//   redundancy a stage with fewer than min_replicas servers gets one from a stage
//              with more than min_replicas (not from a server in its cooldown);
//   load       (periodic only) the move that raises the bottleneck capacity the
//              most, when it raises it by more than min_gain, from a server out
//              of its cooldown, never leaving more stages below min_replicas.
// Hysteresis: min_gain keeps noise from moving anyone, and a server that moved or
// joined stays put for cooldown_s (its rate on the new stage must be measured
// before it is judged again), so a server never ping-pongs.
// Ties (equal predicted bottlenecks) go to the lower target stage, then the lower
// source stage, then the lower server id.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace swarm::policy {

enum class move_reason { load, redundancy, empty, join };

[[nodiscard]] const char* to_string(move_reason r);

struct rebalance_config {
  /// A load move must raise the predicted bottleneck by more than this
  /// fraction: rates measured on shared cores are noisy by ~5%.
  double min_gain = 0.1;
  int min_replicas = 2;    ///< servers per stage kept before optimising throughput, where others have spare
  double cooldown_s = 60;  ///< a server that moved or joined is not moved again for this long (but for an empty stage)
};

/// The rule a coordinator that checks loads every `period_s` runs: `moves`
/// with a cooldown of two periods, so a mover's rate on its new stage is
/// measured before it is judged again (swarm's rebalancer and swarm-sim's).
[[nodiscard]] rebalance_config periodic_rule(rebalance_config moves, double period_s);

/// One live server as the rebalancer sees it.
struct server_load {
  std::string id;
  int stage = 0;
  double rate = std::nan("");  ///< samples/s per second of compute on its stage; NaN: not measured yet
  double settled_at = -std::numeric_limits<double>::infinity();  ///< when it last joined or moved, seconds
};

struct move_plan {
  std::string server;
  int from = 0;
  int to = 0;
  move_reason reason = move_reason::load;
  double bottleneck_before = 0;  ///< slowest non-empty stage's capacity now, samples/s
  double bottleneck_after = 0;   ///< predicted after the move
  double gain = 0;               ///< after / before - 1; +inf when a stage was empty
};

/// Predicted capacity of every stage, samples/s (0 for a stage without servers).
/// `cost`: work per sample of each stage (any unit; only ratios matter), > 0.
[[nodiscard]] std::vector<double> capacities(const std::vector<double>& cost, const std::vector<server_load>& servers);

/// The one move to make now, if any (see the header). `periodic`: the
/// rebalancing period has come, so load moves are allowed; otherwise only
/// empty and redundancy moves are.
[[nodiscard]] std::optional<move_plan> plan_move(const std::vector<double>& cost,
                                                 const std::vector<server_load>& servers, double now, bool periodic,
                                                 const rebalance_config& cfg);

/// Where a new server goes: the first empty stage; else the under-replicated
/// stage (fewer than min_replicas) with the least capacity; else the stage with
/// the least capacity, where it raises the bottleneck. from = -1, reason join.
/// An empty `cost` (no stages) gives to = -1.
[[nodiscard]] move_plan place_joiner(const std::vector<double>& cost, const std::vector<server_load>& servers,
                                     const rebalance_config& cfg);

}  // namespace swarm::policy
