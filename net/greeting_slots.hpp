#pragma once
// Who may wait at a door (the guard's public port, the bulk port) before
// showing that it belongs: a connection is a stranger until its handshake or
// hello passed, and strangers are what a flood is made of. Each is bounded
// by a deadline for its whole greeting (net/tls.hpp, net/bulk_reader.cpp);
// these slots bound how many wait at once:
//   - at most max_per_address strangers from one address: more are refused,
//     so one host cannot hold the door;
//   - at most max_strangers in all: a newcomer beyond it takes the slot of
//     the stranger waiting longest, which is cut. An honest peer greets in
//     milliseconds, so to keep it out a flood must open max_strangers
//     connections in that time, not trickle a byte every few seconds.
// Pure bookkeeping, time passed in; the owner holds its own lock around it.

#include <chrono>
#include <map>
#include <string>

namespace swarm {

class greeting_slots {
public:
  using clock = std::chrono::steady_clock;

  greeting_slots(int max_strangers, int max_per_address);

  struct outcome {
    bool admitted = false;  ///< false: refused, `who` holds max_per_address already
    int evict = -1;         ///< a stranger's id to cut for it, or -1
  };

  /// A connection `id` (unique while it waits) from address `who` arrived at `now`.
  outcome arrive(int id, const std::string& who, clock::time_point now);

  /// Connection `id` greeted, or closed before it did; no-op when not waiting.
  void done(int id);

  [[nodiscard]] int waiting() const { return static_cast<int>(by_id_.size()); }

private:
  struct stranger {
    std::string who;
    clock::time_point since;
  };
  int max_strangers_, max_per_address_;
  std::map<int, stranger> by_id_;
  std::map<std::string, int> per_address_;
};

}  // namespace swarm
