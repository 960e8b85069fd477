#pragma once
// A stage server's recorded forwards, kept for the backward of the same
// microbatch so that it need not recompute them (stage_worker::backward).
// Oldest first out when over its budget; every entry is dropped when the
// parameters step, as the optimizer changes them in place and a graph
// recorded on the old ones can no longer be backpropagated through.
// Internal to the stage worker (torch).

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include <torch/torch.h>

#include "models/stage_backward.hpp"
#include "models/stage_worker.hpp"

namespace swarm {

class activation_cache {
public:
  /// Bytes of recorded forwards (recorded_forward_bytes) kept at most; 0 = off.
  void set_limit(int64_t bytes);
  [[nodiscard]] bool enabled() const { return stats_.limit_bytes > 0; }

  /// Keeps `forward` of `inputs` under `key`, recorded at parameter step
  /// `step`; replaces an entry of the same key, evicts the oldest to make room,
  /// and keeps nothing that alone is over the budget.
  void put(const std::string& key, int64_t step, const torch::Tensor& inputs, recorded_forward forward, int64_t bytes);

  /// The forward recorded under `key` at `step` on exactly `inputs`, taken out
  /// (a hit); nullopt otherwise (a miss, and whatever was under `key` is dropped).
  [[nodiscard]] std::optional<recorded_forward> take(const std::string& key, int64_t step, const torch::Tensor& inputs);

  /// The parameters stepped: every entry is dropped (counted as `stepped`).
  void parameters_changed();

  [[nodiscard]] const activation_cache_stats& stats() const { return stats_; }

private:
  struct entry {
    std::string key;
    int64_t step;
    torch::Tensor inputs;
    recorded_forward forward;
    int64_t bytes;
  };
  void erase(std::list<entry>::iterator it);
  /// Drops the oldest entries (counted as evicted) until `incoming` more bytes fit.
  void make_room(int64_t incoming);

  std::list<entry> entries_;  // oldest first
  std::unordered_map<std::string, std::list<entry>::iterator> by_key_;
  activation_cache_stats stats_;
};

}  // namespace swarm
