#pragma once
// A bulk frame's header (layout in net/bulk.hpp), the hello before a
// connection's first frame, and the judgement of each received from a peer,
// apart from the sockets so that a fuzzer can reach them (tests/fuzz/bulk_frame.cpp).
#include <cstddef>
#include <cstdint>
#include <string>

namespace swarm {

constexpr uint32_t bulk_frame_magic = 0x32425753;  // "SWB2" little-endian
constexpr size_t max_bulk_parts = 8;

struct bulk_frame_header {
  uint32_t magic = bulk_frame_magic;
  uint32_t parts = 0;
  uint64_t dest = 0;
  uint64_t key = 0;
  uint64_t size = 0;
  uint64_t part_size[max_bulk_parts] = {};  ///< only the first `parts` travel
};
constexpr size_t bulk_fixed_header = 32;

/// The header's bytes on the wire: the fixed part and `parts` sizes.
[[nodiscard]] inline size_t header_bytes(const bulk_frame_header& h) {
  return bulk_fixed_header + h.parts * sizeof(uint64_t);
}

/// Whether the fixed part starts a frame (magic, 1..8 parts): its part sizes follow.
[[nodiscard]] inline bool is_frame_start(const bulk_frame_header& h) {
  return h.magic == bulk_frame_magic && h.parts >= 1 && h.parts <= max_bulk_parts;
}

/// Why a whole header is refused, or empty when its parts may follow: not a
/// frame, more than `max_frame` bytes, or part sizes that do not add up.
[[nodiscard]] std::string judge_frame_header(const bulk_frame_header& h, uint64_t max_frame);

/// The receiving endpoint's secret, random per process and handed out only
/// through CAF (its lookup entry): a process that knows it reached this one
/// as a member of the swarm's CAF network (behind the guard, and with TLS a
/// holder of the swarm's certificates), not as a stranger on its bulk port.
struct bulk_token {
  uint64_t hi = 0, lo = 0;
};

/// The first bytes on every bulk connection, before any frame: until they
/// came and name the receiver's token, a connection gets no room for a frame.
constexpr uint32_t bulk_hello_magic = 0x31485753;  // "SWH1" little-endian
struct bulk_hello {
  uint32_t magic = bulk_hello_magic;
  uint32_t reserved = 0;
  bulk_token token;
};
static_assert(sizeof(bulk_hello) == 24, "a bulk hello is 24 bytes on the wire");

/// Why a hello is refused, or empty when it names `expected`.
[[nodiscard]] std::string judge_hello(const bulk_hello& h, const bulk_token& expected);

}  // namespace swarm
