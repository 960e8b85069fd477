#pragma once
// leadership: what a coordinator elected through etcd (--control,
// apps/control.hpp) shares with its actors: its term, until when it may
// order, and where it records what a successor needs.
//
// Fencing: every order (round begin, reload, move, placement) carries the
// term, and servers refuse a term older than the newest they saw. The lease
// is kept alive by the control loop, which moves `valid_until` forward after
// each renewal: to the renewal's send time plus the lease's TTL, less a
// margin. etcd counts the TTL from when it received the renewal, so this
// process stops ordering before etcd could let another candidate win. An
// actor asks may_order() right before each order it sends: after a SIGSTOP
// the deadline has passed, whatever the mailbox still holds.
//
// The one coordinator without --control has none (a null pointer): term 0,
// always ordering, nothing recorded.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

namespace swarm {

struct leadership {
  using clock = std::chrono::steady_clock;

  int64_t term = 0;
  /// steady_clock nanoseconds since its epoch; moved by the control loop only.
  std::atomic<int64_t> valid_until_ns{std::numeric_limits<int64_t>::max()};
  /// Stores `value` under `key` (relative to the swarm's prefix) in etcd, if
  /// this process still leads then; never blocks the caller. May be empty.
  std::function<void(const std::string& key, const std::string& value)> record;

  [[nodiscard]] bool valid_at(clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() < valid_until_ns.load();
  }
};

/// Whether a coordinator with `l` may send an order now (no leadership: always).
[[nodiscard]] inline bool may_order(const std::shared_ptr<leadership>& l) {
  return !l || l->valid_at(leadership::clock::now());
}

[[nodiscard]] inline int64_t term_of(const std::shared_ptr<leadership>& l) { return l ? l->term : 0; }

inline void record(const std::shared_ptr<leadership>& l, const std::string& key, const std::string& value) {
  if (l && l->record)
    l->record(key, value);
}

}  // namespace swarm
