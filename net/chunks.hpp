#pragma once
// Large payloads in pieces (see messages/protocol.hpp): the sender emits all but
// the last piece as (chunk_atom, transfer_id, bytes) messages and puts the last
// piece with the same transfer_id into the request or reply itself; the receiver
// appends pieces per (sender, transfer_id) and completes the payload when the
// request or reply arrives.

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

/// Reassembles payloads on the receiving side.
class chunk_assembler {
public:
  void add(const caf::actor_addr& from, uint64_t transfer_id, const std::string& piece);

  /// The whole payload: the pieces added for (from, transfer_id) followed by
  /// `tail`. BAD_REQUEST when transfer_id is non-zero but no piece arrived.
  [[nodiscard]] caf::expected<std::string> finish(const caf::actor_addr& from, uint64_t transfer_id, std::string tail);

  /// Forgets unfinished payloads of a sender that went down.
  void forget(const caf::actor_addr& from);

  [[nodiscard]] size_t pending() const { return partial_.size(); }

private:
  std::map<std::pair<caf::actor_addr, uint64_t>, std::string> partial_;
};

}  // namespace swarm
