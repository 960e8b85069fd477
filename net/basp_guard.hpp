#pragma once
// A validating relay in front of a CAF port. CAF 0.17.6 trusts the first bytes
// of every connection: one 32-byte header with an empty client handshake
// crashes the process, and one length field up to 4 GiB makes its single
// network thread zero-fill a buffer that large (../shared/notes/garbage.md). It
// has no setting against either. So CAF listens on loopback only, and the
// public port is this relay's: it dials CAF for each peer, copies CAF's bytes
// to the peer as they are, and passes the peer's bytes on only frame by frame,
// each BASP header judged first (judge_basp_header); anything else closes that
// one connection.
//
//   peer --TCP--> guard (public port) --TCP, loopback--> CAF (127.0.0.1, any port)
//
// With TLS (CAF's openssl module behind it) the guard cannot read BASP frames;
// it passes TLS records one by one instead (judge_tls_header): a peer speaking
// anything but TLS is closed here, a stranger's handshake is refused by CAF
// (net/tls.hpp), and a connection must finish its side of the handshake
// within handshake_timeout (Debian's CAF spins on a silent one, issue #1060).
//
// Threads: an acceptor, and two per connection (one each way; the second once
// CAF is dialed), so a slow or
// stalled peer holds only its own; a connection that moves nothing for
// idle_timeout, or whose handshake is not complete within handshake_timeout
// (one deadline for all its reads, however slowly its bytes come), is closed.
// Connections still before their handshake are capped per address and in all
// (net/greeting_slots.hpp).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/expected.hpp>

namespace swarm {

/// BASP 0.17 header: u8 operation | 3 bytes | u32 payload length | u64
/// operation data | u64 source actor | u64 destination actor, big-endian.
constexpr size_t basp_header_size = 32;

struct basp_limits {
  uint32_t max_handshake = 1024;                    ///< a real client handshake is ~32 bytes
  uint64_t max_payload = (16u << 20) + (1u << 20);  ///< net.chunk-bytes and headroom
};

/// Why a header is refused, or empty when it may pass (then its payload follows).
/// `first`: the connection's first frame, which must be a client handshake.
[[nodiscard]] std::string judge_basp_header(const unsigned char* header, bool first, const basp_limits& limits);

/// Why a frame is refused for the sender it claims, or empty: a routed message
/// (operation 3) must name the connection's own node, `node` (the payload of its
/// client handshake), as its source; `payload` holds the frame's first `n` bytes.
[[nodiscard]] std::string judge_routed_source(const unsigned char* header, const char* payload, size_t n,
                                              const std::string& node);

/// The payload length a header announces.
[[nodiscard]] uint32_t basp_payload_size(const unsigned char* header);

/// TLS record header: u8 content type | u16 version | u16 length.
constexpr size_t tls_header_size = 5;
/// Largest record body TLS 1.2 allows (2^14 + 2048); TLS 1.3 stays below it.
constexpr uint32_t max_tls_record = (1u << 14) + 2048;

/// Why a TLS record header is refused, or empty. `first`: the connection's
/// first record, which must start a handshake.
[[nodiscard]] std::string judge_tls_header(const unsigned char* header, bool first);
[[nodiscard]] inline uint32_t tls_record_size(const unsigned char* h) { return (uint32_t{h[3]} << 8) | h[4]; }

struct guard_options {
  std::string host = "127.0.0.1";  ///< public address to listen on; empty = every IPv4 interface
  uint16_t port = 0;               ///< public port; 0 = any free one
  uint16_t backend_port = 0;       ///< CAF's port on 127.0.0.1
  basp_limits limits;
  bool tls = false;  ///< the backend speaks TLS: pass records, not BASP frames
  std::chrono::seconds handshake_timeout{10};
  std::chrono::seconds idle_timeout{120};  ///< well above the heartbeat interval
  int max_connections = 256;
  /// Connections from one address still before their handshake; more are
  /// refused at once (net/greeting_slots.hpp): one host cannot hold the door.
  int max_strangers_per_address = 16;
  /// Of max_connections, slots no connection before its handshake may hold.
  int member_slots = 16;
};

struct guard_stats {
  uint64_t accepted = 0, refused = 0;  ///< connections; refused: closed for a bad frame, a timeout or the cap
  uint64_t frames_passed = 0;
};

class basp_guard {
public:
  /// Listens on opts.host:opts.port; an error (BAD_CONFIG) when it cannot.
  static caf::expected<std::unique_ptr<basp_guard>> start(guard_options opts);
  ~basp_guard();
  basp_guard(const basp_guard&) = delete;
  basp_guard& operator=(const basp_guard&) = delete;

  [[nodiscard]] uint16_t port() const;
  [[nodiscard]] guard_stats stats() const;

  struct impl;

private:
  explicit basp_guard(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace swarm
