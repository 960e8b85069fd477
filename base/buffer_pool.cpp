#include "base/buffer_pool.hpp"

#include <limits>

#include <sys/mman.h>

namespace swarm {

namespace {

/// Where the kernel grants huge pages on request (THP "madvise" mode), a
/// fresh buffer faults in 2 MiB at a time instead of 4 KiB.
void advise_huge_pages(void* p, size_t n) {
  constexpr uintptr_t huge = uintptr_t{2} << 20;
  if (n < 2 * huge)
    return;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) & ~(huge - 1);
  if (end > begin)
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace

buffer_pool::buffer_pool(uint64_t max_bytes, size_t max_buffers, size_t min_size)
    : max_bytes_(max_bytes), max_buffers_(max_buffers), min_size_(min_size) {}

std::string buffer_pool::reuse(size_t n) {
  std::string s;
  if (n >= min_size_) {
    std::lock_guard<std::mutex> lock(m_);
    size_t best = kept_.size(), best_cap = std::numeric_limits<size_t>::max();
    // Newest first, so that of equal fits the one given last wins: its bytes
    // are likeliest still in cache.
    for (size_t i = kept_.size(); i-- > 0;) {
      const size_t cap = kept_[i].capacity();
      // At most 4x: a large buffer serving a small transfer would hold memory
      // the next large one needs.
      if (cap >= n && cap / 4 <= n && cap < best_cap) {
        best = i;
        best_cap = cap;
      }
    }
    if (best < kept_.size()) {
      s = std::move(kept_[best]);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
      held_ -= s.capacity();
      ++stats_.hits;
    } else {
      ++stats_.misses;
    }
  }
  if (s.capacity() < n) {
    s.reserve(n);
    advise_huge_pages(s.data(), n);
  }
  return s;
}

std::string buffer_pool::take(size_t n) {
  auto s = reuse(n);
  // A kept buffer is given back at its full capacity (give), so shrinking it
  // to n writes nothing; only a fresh one is zeroed here.
  s.resize(n);
  return s;
}

std::string buffer_pool::take_empty(size_t n) {
  auto s = reuse(n);
  s.clear();  // keeps the capacity
  return s;
}

void buffer_pool::give(std::string&& s) {
  if (s.capacity() < min_size_ || s.capacity() > max_bytes_)
    return;
  // Filled to capacity now, while it is ours and mostly already the right
  // size, so that take() never has to write into it.
  s.resize(s.capacity());
  std::lock_guard<std::mutex> lock(m_);
  held_ += s.capacity();
  kept_.push_back(std::move(s));
  trim_locked();
}

void buffer_pool::trim_locked() {
  while (!kept_.empty() && (held_ > max_bytes_ || kept_.size() > max_buffers_)) {
    held_ -= kept_.front().capacity();
    kept_.pop_front();
  }
}

buffer_pool_stats buffer_pool::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  auto s = stats_;
  s.held_bytes = held_;
  s.held = kept_.size();
  return s;
}

buffer_pool& transfer_buffers() {
  static buffer_pool pool(uint64_t{1} << 30, 8, size_t{32} << 20);
  return pool;
}

}  // namespace swarm
