#include "net/greeting_slots.hpp"

#include <algorithm>

namespace swarm {

greeting_slots::greeting_slots(int max_strangers, int max_per_address)
    : max_strangers_(std::max(1, max_strangers)), max_per_address_(std::max(1, max_per_address)) {}

greeting_slots::outcome greeting_slots::arrive(int id, const std::string& who, clock::time_point now) {
  outcome out;
  if (per_address_[who] >= max_per_address_)
    return out;
  if (waiting() >= max_strangers_) {
    const auto oldest = std::min_element(by_id_.begin(), by_id_.end(),
                                         [](const auto& a, const auto& b) { return a.second.since < b.second.since; });
    out.evict = oldest->first;
    done(oldest->first);  // its cut ends its wait; counted free now, so the newcomer fits
  }
  by_id_[id] = {who, now};
  ++per_address_[who];
  out.admitted = true;
  return out;
}

void greeting_slots::done(int id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end())
    return;
  if (auto a = per_address_.find(it->second.who); a != per_address_.end() && --a->second <= 0)
    per_address_.erase(a);
  by_id_.erase(it);
}

}  // namespace swarm
