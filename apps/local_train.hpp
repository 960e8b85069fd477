#pragma once
// --role local: the whole model trained in one process, no actors, no network.
// The reference the swarm is compared with, for loss and for speed: same corpus
// sampler, microbatch, batch size (gradient accumulation) and optimizer.

#include <atomic>

#include "config/config.hpp"

namespace swarm {

class metrics_sink;

/// Trains until cfg.trainer.max_steps (0 = until SIGINT/SIGTERM, polled through
/// `stop_requested`); prints progress and emits `step` events. Returns the exit code.
int run_local(const app_config& cfg, metrics_sink& metrics, const std::atomic<bool>& stop_requested);

}  // namespace swarm
