#pragma once
// The roles of the swarm binary; each returns the process exit code
// (0 success, 1 runtime failure, 2 bad config or input).

#include <atomic>

#include "apps/thread_split.hpp"
#include "config/config.hpp"

namespace swarm {

/// Set by SIGINT/SIGTERM; every role polls it and shuts down cleanly.
extern std::atomic<bool> stop_requested;
void install_signal_handlers();

int run_coordinator(const app_config& cfg);
int run_server(const app_config& cfg);
int run_trainer(const app_config& cfg);
int run_cluster(const app_config& cfg);
/// Prints a running swarm's overview (asked of --coordinator) and exits.
int run_status(const app_config& cfg);
/// Measures this machine's stage request costs for swarm-sim (apps/calibrate.cpp, a torch TU).
int run_calibrate(const app_config& cfg);

/// Gives the process `threads` (0 = all cores), split between torch's intra-op
/// pool and OpenBLAS's by the model width and precision (apps/thread_split.hpp; 0 = unknown);
/// lives in a torch TU.
thread_split set_torch_threads(int threads, int64_t width = 0, bool bf16 = false);

}  // namespace swarm
