#pragma once
// Large byte buffers kept for reuse. glibc maps every block of 32 MiB or
// more afresh (its largest mmap threshold), so a large transfer's buffer was
// new memory every time, and the kernel zeroing and faulting it in cost more
// than the bytes' copy: 27% of a bench_transfer.sh profile. The data plane
// takes its receive and encode buffers from here; whoever ends a buffer's
// life (a decoded tensor's deleter, shared_parts' last holder, a writer that
// sent a frame) gives it back. A buffer never given back is simply freed.
//
// Only large buffers: below glibc's threshold keep_freed_memory()
// (apps/malloc_reuse.hpp) has malloc hand the block freed last out again,
// still in cache, and a pool that cycled through many would be slower
// (measured: copying 1 MiB into one of 64 kept buffers in turn took 150 us
// here, into malloc's reused block 25 us). Takes are newest first for the
// same reason.
//
// Bounded: it holds at most max_bytes and max_buffers; a buffer given beyond
// them frees the least recently given ones first. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace swarm {

struct buffer_pool_stats {
  uint64_t hits = 0;    ///< takes served by a kept buffer
  uint64_t misses = 0;  ///< takes that allocated
  uint64_t held_bytes = 0;
  uint64_t held = 0;
};

class buffer_pool {
public:
  /// Buffers smaller than `min_size` are left to malloc.
  buffer_pool(uint64_t max_bytes, size_t max_buffers, size_t min_size);

  /// A string of size `n`; its bytes are unspecified (a kept buffer's old
  /// contents). Served by the smallest kept buffer that holds `n` and is at
  /// most 4 times larger, else allocated (zeroed).
  [[nodiscard]] std::string take(size_t n);

  /// An empty string with room for `n` bytes, from the same buffers: for a
  /// writer that appends (nothing zeroed that is about to be overwritten).
  [[nodiscard]] std::string take_empty(size_t n);

  /// Keeps `s`'s memory for a later take (when it is at least min_size).
  void give(std::string&& s);

  [[nodiscard]] buffer_pool_stats stats() const;

private:
  /// The smallest fitting kept buffer (or a fresh one) with capacity >= n; its size unspecified.
  std::string reuse(size_t n);
  void trim_locked();

  const uint64_t max_bytes_;
  const size_t max_buffers_, min_size_;
  mutable std::mutex m_;
  std::deque<std::string> kept_;  ///< least recently given first
  uint64_t held_ = 0;
  buffer_pool_stats stats_;
};

/// The process's pool for data-plane buffers: of 32 MiB and up, at most 8 and
/// 1 GiB (a few of the largest transfers in flight at once).
[[nodiscard]] buffer_pool& transfer_buffers();

}  // namespace swarm
