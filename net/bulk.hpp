#pragma once
// The bulk data plane: large payloads (activations, gradients, all-reduce
// pieces) travel over a dedicated TCP connection between two processes, while
// the actor message that needs them carries only a key. CAF keeps what it is
// good at (request/response, monitoring, down events, deadlines); the bytes skip
// its serialization, its per-message buffers and its single multiplexer thread
// (measured: CAF moved a 64 MiB string at ~0.2-0.5 of raw TCP on loopback,
// mostly copies into fresh buffers and the page faults they cost).
//
//   sender:   key = endpoint.push(dest, head, data)   (queued; a writer thread per peer process)
//             then an ordinary CAF message to dest naming the key
//   receiver: a reader thread per connection reads one frame into its parts
//             and hands them to the destination actor as a bulk_delivery (a local
//             message, messages/local.hpp: no peer can forge one);
//             the actor's bulk_inbox pairs them with the message naming the
//             key, whichever of the two comes first.
//
// A frame's parts are a head (an encoded message) and the bytes of the tensors
// moved out of it (messages/wire.hpp: take_tensor_data, decode_parts): large
// tensors are neither copied into a serialized message nor parsed out of one.
//
// Connection: a hello (u32 magic "SWH1" | u32 0 | the receiver's 128-bit
// token, net/bulk_frame.hpp), then frames until it closes.
// Frame: u32 magic "SWB2" | u32 parts (1..8) | u64 destination actor id | u64 key
//        | u64 size (all parts) | parts x u64 part size | the parts' bytes.
// A connection that breaks mid-frame loses that frame: the half-received bytes
// are dropped, never delivered, and the waiting side fails the request after its
// deadline with a retryable error (PEER_GONE), as if the peer had died. Bad
// magic or an oversized frame closes the connection (garbage resistance), and
// so does a missing or wrong hello within connect_timeout (one deadline for the
// TLS handshake and the hello together, however slowly their bytes come): a
// stranger on the bulk port holds a reader thread for at most that long, and
// no frame room; and strangers waiting at once are capped per address and in
// all (net/greeting_slots.hpp).
//
// With a TLS context every connection is mutual TLS (net/tls.hpp); a
// handshake is bounded by connect_timeout on both ends.
//
// A peer's bulk address is looked up once per process through CAF (a
// registry entry "swarmbulk" on every node), so nothing else in the protocol
// carries it. Destinations in this process get the bytes handed over directly.
// A peer that cannot be reached (lookup or connect fails within
// connect_timeout, or a write stalls for write_timeout) costs its queued
// frames, which their receivers never claim; the writer thread ends and the
// next push starts a fresh one.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "messages/local.hpp"
#include "messages/protocol.hpp"
#include "net/bulk_frame.hpp"
#include "net/tls.hpp"

namespace swarm {

/// What a bulk frame carries: parts[0] the head, then the bytes beside it.
using bulk_parts = std::vector<std::string>;

/// `parts` shared by a sender and its retries; when the last holder drops
/// them, their buffers go back to transfer_buffers() (base/buffer_pool.hpp)
/// for the next payload.
[[nodiscard]] std::shared_ptr<const bulk_parts> shared_parts(bulk_parts parts);

/// A whole payload (e.g. reassembled from chunks) as parts.
inline caf::expected<bulk_parts> one_part(caf::expected<std::string> whole) {
  if (!whole)
    return whole.error();
  return bulk_parts{std::move(*whole)};
}

/// Transfer ids with this bit set name a bulk key; others are inline (net/chunks.hpp).
constexpr uint64_t bulk_flag = uint64_t{1} << 63;
[[nodiscard]] inline bool is_bulk(uint64_t transfer_id) { return (transfer_id & bulk_flag) != 0; }

struct bulk_options {
  std::string host = "127.0.0.1";  ///< address to listen on and to tell peers
  uint16_t port = 0;               ///< port to listen on; 0 = any free one
  /// Larger frames close the connection at their header. A node sets it to
  /// the largest payload its model can produce (models/shape: largest_payload_bytes).
  uint64_t max_frame = uint64_t{4} << 30;
  /// Bytes of frames being received or delivered but not yet taken by their
  /// actor (a busy one's mailbox), all connections together: the memory
  /// peers can make this process hold. A frame whose header would pass it
  /// waits for room, up to read_timeout, else its connection closes.
  uint64_t max_pending = uint64_t{1} << 30;
  /// A frame once begun must keep coming: a connection that sends nothing for
  /// this long mid-frame closes (its frame dropped, its room freed). Between
  /// frames a connection may idle for ever.
  std::chrono::seconds read_timeout{30};
  int max_connections = 256;  ///< accepted connections at once; more are refused
  /// Connections from one address still before their hello; more are refused
  /// at once (net/greeting_slots.hpp). Honest peers greet in milliseconds:
  /// even a host running many nodes rarely has two waiting at once.
  int max_strangers_per_address = 16;
  /// Of max_connections, slots no connection before its hello may hold: a
  /// flood of strangers leaves them to connections that said who they are.
  int member_slots = 16;
  std::chrono::seconds connect_timeout{10};  ///< lookup and connect to a peer, each
  std::chrono::seconds write_timeout{60};    ///< a write that moves nothing this long breaks the connection
  std::shared_ptr<const tls_context> tls;    ///< mutual TLS on every connection, both ways; null = plain TCP
};

/// Counters, for benchmarks and tests.
struct bulk_stats {
  uint64_t frames_sent = 0, bytes_sent = 0, frames_received = 0, bytes_received = 0;
  uint64_t send_failures = 0;  ///< frames dropped because the peer could not be reached or the write failed
  uint64_t bad_frames = 0;     ///< connections closed for garbage
  uint64_t strangers = 0;      ///< connections closed before a hello naming this endpoint's token
  uint64_t crowded = 0;  ///< connections refused or cut at the door: too many strangers waiting (per address or all)
  uint64_t undeliverable = 0;  ///< frames for an actor not attached here (gone)
  uint64_t frames_waited = 0;  ///< frames that waited for room under max_pending
  uint64_t stalled = 0;        ///< connections closed mid-frame (no room in time, or no bytes)
  uint64_t peak_pending = 0;   ///< most bytes held in frames being received at once
};

class bulk_endpoint {
public:
  /// Listens on opts.host (any free port) and registers the lookup entry in
  /// `sys`; an error when it cannot listen.
  static caf::expected<std::shared_ptr<bulk_endpoint>> start(caf::actor_system& sys, bulk_options opts = {});
  ~bulk_endpoint();
  bulk_endpoint(const bulk_endpoint&) = delete;
  bulk_endpoint& operator=(const bulk_endpoint&) = delete;

  [[nodiscard]] uint16_t port() const;
  /// The hello a connection to this endpoint must begin with (tests speak raw frames).
  [[nodiscard]] std::string hello() const;

  /// Frames for `receiver`'s id go to it (as bulk_delivery) from now
  /// on. Held weakly: a receiver that died gets nothing. detach() stops it.
  void attach(const caf::actor& receiver);
  void detach(caf::actor_id id);

  /// Queues a frame of `head` and then `data`'s parts (at most
  /// max_bulk_parts in all) for `dest` and returns the key (bulk_flag set) to
  /// name in the message that follows. Never blocks on the network. `data` is
  /// shared, not copied: a caller may keep it for a retry.
  [[nodiscard]] uint64_t push(const caf::actor& dest, std::string head,
                              std::shared_ptr<const bulk_parts> data = nullptr);

  [[nodiscard]] bulk_stats stats() const;

  struct impl;

private:
  explicit bulk_endpoint(std::shared_ptr<impl> p);
  std::shared_ptr<impl> impl_;  ///< shared: a delivered frame's hold releases its budget through it (bulk_delivery)
};

/// Pairs bytes that arrived (a bulk_delivery) with the message that
/// names their key, in either order; one per receiving actor, used from its
/// thread only. Time is passed in.
class bulk_inbox {
public:
  using clock = std::chrono::steady_clock;
  using continuation = std::function<void(caf::expected<bulk_parts>)>;

  /// Unclaimed bytes are dropped after `ttl` (their message never came: its
  /// sender died in between) and beyond `max_bytes` held, oldest first.
  explicit bulk_inbox(std::chrono::seconds ttl = std::chrono::seconds(120), uint64_t max_bytes = uint64_t{1} << 30);

  /// Bytes for `key` arrived: runs the claim waiting for them, else keeps them.
  void arrived(uint64_t key, bulk_parts bytes, clock::time_point now);

  /// Runs `k` with the bytes of `key` at once when they are here (true);
  /// otherwise keeps it until they arrive or expire(key) says they are late.
  bool claim(uint64_t key, continuation k, clock::time_point now);

  /// A claim's deadline passed: fails it (PEER_GONE: retryable) if still waiting.
  void expire(uint64_t key);

  [[nodiscard]] size_t waiting() const { return claims_.size(); }
  [[nodiscard]] size_t held() const { return bytes_.size(); }

private:
  struct held_bytes {
    bulk_parts bytes;
    uint64_t size = 0;
    clock::time_point at;
  };
  void evict(clock::time_point now);

  std::chrono::seconds ttl_;
  uint64_t max_bytes_, total_ = 0;
  std::map<uint64_t, held_bytes> bytes_;
  std::map<uint64_t, continuation> claims_;
};

}  // namespace swarm
