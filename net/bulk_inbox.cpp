#include <algorithm>

#include "messages/errors.hpp"
#include "net/bulk.hpp"

namespace swarm {

bulk_inbox::bulk_inbox(std::chrono::seconds ttl, uint64_t max_bytes) : ttl_(ttl), max_bytes_(max_bytes) {}

void bulk_inbox::arrived(uint64_t key, bulk_parts bytes, clock::time_point now) {
  if (auto it = claims_.find(key); it != claims_.end()) {
    auto k = std::move(it->second);
    claims_.erase(it);
    k(std::move(bytes));
    return;
  }
  uint64_t size = 0;
  for (const auto& part : bytes)
    size += part.size();
  total_ += size;
  auto& slot = bytes_[key];
  total_ -= slot.size;  // a repeated key replaces (never happens between honest peers)
  slot = {std::move(bytes), size, now};
  evict(now);
}

bool bulk_inbox::claim(uint64_t key, continuation k, clock::time_point now) {
  evict(now);
  if (auto it = bytes_.find(key); it != bytes_.end()) {
    auto bytes = std::move(it->second.bytes);
    total_ -= it->second.size;
    bytes_.erase(it);
    k(std::move(bytes));
    return true;
  }
  claims_[key] = std::move(k);
  return false;
}

void bulk_inbox::expire(uint64_t key) {
  auto it = claims_.find(key);
  if (it == claims_.end())
    return;
  auto k = std::move(it->second);
  claims_.erase(it);
  k(make_error(errc::PEER_GONE, "the payload's bytes did not arrive over the bulk connection in time"));
}

void bulk_inbox::evict(clock::time_point now) {
  for (auto it = bytes_.begin(); it != bytes_.end();) {
    if (now - it->second.at > ttl_) {
      total_ -= it->second.size;
      it = bytes_.erase(it);
    } else {
      ++it;
    }
  }
  while (total_ > max_bytes_ && !bytes_.empty()) {
    auto oldest = std::min_element(bytes_.begin(), bytes_.end(),
                                   [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
    total_ -= oldest->second.size;
    bytes_.erase(oldest);
  }
}

}  // namespace swarm
