#pragma once
// Large byte buffers kept for reuse. A transfer's buffer is otherwise fresh
// memory every time (glibc maps blocks of 32 MiB or more anew, and a reader
// thread's arena trims what it frees), and the kernel zeroing and faulting it
// in cost more than the bytes' copy: 27% of a bench_transfer.sh profile. The
// data plane takes its receive and encode buffers from here; whoever ends a
// buffer's life (a decoded tensor's deleter, a writer that sent it) gives it
// back. A buffer never given back is simply freed: the pool only saves work.
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
  /// Buffers smaller than this are left to malloc, which reuses them well.
  static constexpr size_t min_size = size_t{64} << 10;

  buffer_pool(uint64_t max_bytes, size_t max_buffers);

  /// A string of size `n`; its bytes are unspecified (a kept buffer's old
  /// contents). Served by the smallest kept buffer that holds `n` and is at
  /// most 4 times larger, else allocated (zeroed).
  [[nodiscard]] std::string take(size_t n);

  /// Keeps `s`'s memory for a later take (when it is at least min_size).
  void give(std::string&& s);

  [[nodiscard]] buffer_pool_stats stats() const;

private:
  void trim_locked();

  const uint64_t max_bytes_;
  const size_t max_buffers_;
  mutable std::mutex m_;
  std::deque<std::string> kept_;  ///< least recently given first
  uint64_t held_ = 0;
  buffer_pool_stats stats_;
};

/// The process's pool for data-plane buffers: 512 MiB, 64 buffers (a few of
/// the largest transfers, 64 MiB and up, in flight at once).
[[nodiscard]] buffer_pool& transfer_buffers();

} // namespace swarm
