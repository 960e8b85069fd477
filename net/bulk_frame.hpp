#pragma once
// A bulk frame's header (layout in net/bulk.hpp) and the judgement of one
// received from a peer, apart from the sockets so that a fuzzer can reach it
// (tests/fuzz/bulk_frame.cpp).
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

} // namespace swarm
