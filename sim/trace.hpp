#pragma once
// Preemption traces for swarm-sim: when each machine is up. Pure (no SimGrid),
// so it is unit-tested in test_core.
//
// Two formats (../shared/data/traces/README.md, Bamboo's AWS g4dn traces):
//   ms,event,node   per-instance events ("add"/"remove"); one name = one lifetime
//   t,n             instance counts in seconds, a step function; a rise starts
//                   lifetimes, a fall ends the newest ones (which instance went
//                   is not recorded)
// replay() spreads the lifetimes over a number of peer slots.

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace swarm::sim {

/// One machine's time up, seconds since the trace's start.
struct lifetime {
  double start = 0;
  double end = std::numeric_limits<double>::infinity();  ///< inf: never removed
};

/// Parses either format; nullopt with `error` ("FILE:LINE: why") on a bad file.
[[nodiscard]] std::optional<std::vector<lifetime>> read_trace(const std::string& path, std::string* error);
/// The same from text already read (`name` for errors).
[[nodiscard]] std::optional<std::vector<lifetime>> parse_trace(const std::string& text, const std::string& name,
                                                               std::string* error);

/// Up/down switches of one peer slot, in time order (it starts down).
struct slot_plan {
  std::vector<lifetime> up;
};

/// Lays `trace` (scaled by 1/speedup) over `peers` slots: copy c of the trace
/// (c = 0, 1, ...) serves slots as long as needed, each lifetime on the next
/// free slot (a slot takes a new lifetime once its last one ended), every
/// copy's times shifted by a uniform draw in [-jitter_s, +jitter_s] per
/// lifetime (0: copies fail together, as one spot market would). Lifetimes
/// that find no free slot are dropped.
[[nodiscard]] std::vector<slot_plan> replay(const std::vector<lifetime>& trace, int peers, double speedup,
                                            double jitter_s, std::mt19937_64& rng);

/// One kill or restart of a recorded swarm run (`chaos` events of a
/// `swarm --role cluster` metrics file), or when one of the servers it
/// started with first joined, for --churn replay.
struct chaos_action {
  double t = 0;      ///< seconds since the file's first event
  bool kill = true;  ///< false: restart (or join)
  int stage = 0;     ///< "server S.I": the cluster's I-th server launched for stage S
  int index = 0;
  bool join = false;  ///< a first server_join of a server the cluster started with (not a restart)
};

/// The kills and restarts of servers in a metrics file, and the first joins
/// of the servers it started with, in time order; other chaos (stop, wipe,
/// coordinator) is counted in `skipped`. A starting server's name comes from
/// its id, s-PID: the cluster launches a stage's servers one after another,
/// so the I-th lowest PID among those that first joined stage S is "server
/// S.I" (restarted PIDs are in their chaos events). nullopt with `error` when
/// the file cannot be read or has no event.
[[nodiscard]] std::optional<std::vector<chaos_action>> read_chaos_log(const std::string& path, int* skipped,
                                                                      std::string* error);

/// Most lifetimes alive at once.
[[nodiscard]] int peak_alive(const std::vector<lifetime>& trace);

}  // namespace swarm::sim
