#include "models/activation_cache.hpp"

#include <algorithm>

namespace swarm {

void activation_cache::set_limit(int64_t bytes) {
  stats_.limit_bytes = std::max<int64_t>(bytes, 0);
  make_room(0);
}

void activation_cache::make_room(int64_t incoming) {
  while (!entries_.empty() && stats_.bytes + incoming > stats_.limit_bytes) {
    ++stats_.evicted;
    erase(entries_.begin());
  }
}

void activation_cache::erase(std::list<entry>::iterator it) {
  stats_.bytes -= it->bytes;
  by_key_.erase(it->key);
  entries_.erase(it);
}

void activation_cache::put(const std::string& key, int64_t step, const torch::Tensor& inputs, recorded_forward forward,
                           int64_t bytes) {
  if (auto old = by_key_.find(key); old != by_key_.end())
    erase(old->second);  // a forward sent again: the newer one is what its backward belongs to
  if (bytes > stats_.limit_bytes) {
    ++stats_.evicted;
    return;
  }
  make_room(bytes);
  entries_.push_back({key, step, inputs, std::move(forward), bytes});
  by_key_[key] = std::prev(entries_.end());
  stats_.bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.bytes);
}

std::optional<recorded_forward> activation_cache::take(const std::string& key, int64_t step,
                                                       const torch::Tensor& inputs) {
  const auto found = by_key_.find(key);
  if (found == by_key_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  auto it = found->second;
  // Equal inputs make a reused key (a trainer restarted with its ids) a miss.
  const bool same = it->step == step && it->inputs.sizes() == inputs.sizes() &&
                    it->inputs.scalar_type() == inputs.scalar_type() && torch::equal(it->inputs, inputs);
  std::optional<recorded_forward> out;
  if (same)
    out = std::move(it->forward);
  erase(it);
  ++(same ? stats_.hits : stats_.misses);
  return out;
}

void activation_cache::parameters_changed() {
  stats_.stepped += static_cast<int64_t>(entries_.size());
  entries_.clear();
  by_key_.clear();
  stats_.bytes = 0;
}

}  // namespace swarm
