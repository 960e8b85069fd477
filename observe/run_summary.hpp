#pragma once
// The few lines a person reads when a cluster run ends, from the run's
// metrics file (every process of the run appends to it): steps, samples,
// time, throughput, loss first and last, drops, reroutes, moves, rounds.
#include <string>

namespace swarm {

/// The summary of the run in `metrics_path` whose events start at unix time
/// `since` (a file appended to by earlier runs keeps their lines too).
[[nodiscard]] std::string run_summary(const std::string& metrics_path, double since);

}  // namespace swarm
