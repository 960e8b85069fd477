#pragma once
// Large payloads in pieces (see messages/protocol.hpp): the sender emits all but
// the last piece as (chunk_atom, transfer_id, bytes) messages and puts the last
// piece with the same transfer_id into the request or reply itself; the receiver
// appends pieces per (sender, transfer_id) and completes the payload when the
// request or reply arrives.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/expected.hpp>
#include <caf/send.hpp>

#include "messages/protocol.hpp"

namespace swarm {

/// A payload cut for sending: leading chunks, then what the final message carries.
struct cut_payload {
  uint64_t transfer_id = 0;       ///< 0 when the payload fits in one message
  std::vector<std::string> lead;  ///< chunks to send first, in order
  std::string tail;               ///< the last piece
};

/// Cuts `payload` into pieces of at most `chunk_bytes`; `next_id` supplies a
/// sender-unique transfer id when more than one piece is needed.
[[nodiscard]] cut_payload cut(std::string payload, size_t chunk_bytes, uint64_t& next_id);

/// Sends the leading chunks of `p` from `self` to `dest` (any handle that accepts
/// chunk_atom). unsafe_send_as because a typed server replies to untyped requesters.
template <class Self, class Handle>
void send_lead(Self* self, const Handle& dest, cut_payload& p) {
  for (auto& piece : p.lead)
    caf::unsafe_send_as(self, dest, chunk_atom::value, p.transfer_id, std::move(piece));
  p.lead.clear();
}

/// What a chunk_assembler holds at most: a sender that goes beyond it (a
/// stranger streaming pieces that never finish) is refused, not the process's
/// memory. Honest transfers finish within a request's deadline, one or two at
/// a time per sender.
struct chunk_limits {
  uint64_t sender_bytes = uint64_t{1} << 30;  ///< bytes of unfinished payloads from one sender
  uint64_t total_bytes = uint64_t{2} << 30;   ///< bytes of unfinished payloads from all senders
  size_t sender_transfers = 16;               ///< unfinished payloads from one sender
  size_t total_transfers = 4096;              ///< unfinished payloads from all senders
  std::chrono::seconds stale{300};            ///< a payload with no piece for this long is dropped
  /// No bound: for a transfer the receiver asked one chosen peer for (a state download).
  static chunk_limits unbounded();
};

/// Reassembles payloads on the receiving side. Time is passed in.
class chunk_assembler {
public:
  using clock = std::chrono::steady_clock;

  explicit chunk_assembler(chunk_limits limits = {}) : limits_(limits) {}

  /// Appends `piece` to (from, transfer_id). Beyond the limits: BAD_REQUEST,
  /// the transfer dropped and its later pieces refused, so that its finish()
  /// fails instead of yielding a payload with a hole; logged rate-limited.
  caf::error add(const caf::actor_addr& from, uint64_t transfer_id, const std::string& piece, clock::time_point now);

  /// The whole payload: the pieces added for (from, transfer_id) followed by
  /// `tail`. BAD_REQUEST when transfer_id is non-zero but no piece arrived,
  /// or its pieces were refused.
  [[nodiscard]] caf::expected<std::string> finish(const caf::actor_addr& from, uint64_t transfer_id, std::string tail);

  /// Forgets unfinished payloads of a sender that went down.
  void forget(const caf::actor_addr& from);

  [[nodiscard]] size_t pending() const { return partial_.size(); }
  [[nodiscard]] uint64_t held_bytes() const { return total_bytes_; }
  [[nodiscard]] uint64_t refused() const { return refused_; }

private:
  using id = std::pair<caf::actor_addr, uint64_t>;
  struct partial {
    std::string bytes;
    clock::time_point last;
    bool refused = false;  ///< over the limits: pieces dropped, finish() fails
  };
  struct sender {
    uint64_t bytes = 0;
    size_t transfers = 0;
  };
  void drop_stale(clock::time_point now);
  /// Takes `it`'s bytes and transfer off its sender's and the total counts.
  void uncount(std::map<id, partial>::iterator it);
  void erase(std::map<id, partial>::iterator it);
  caf::error refuse(partial& p, const caf::actor_addr& from, uint64_t transfer_id, const std::string& why);

  chunk_limits limits_;
  std::map<id, partial> partial_;
  std::map<caf::actor_addr, sender> senders_;
  uint64_t total_bytes_ = 0, refused_ = 0;
  clock::time_point last_sweep_{};
};

}  // namespace swarm
