#include "net/bulk_frame.hpp"

namespace swarm {

std::string judge_frame_header(const bulk_frame_header& h, uint64_t max_frame) {
  if (!is_frame_start(h))
    return "not a swarm bulk frame";
  if (h.size > max_frame)
    return "frame of " + std::to_string(h.size) + " bytes, more than allowed";
  uint64_t left = h.size;  // counted down: a sum of peer-chosen sizes could wrap around
  for (size_t i = 0; i < h.parts; ++i) {
    if (h.part_size[i] > left)
      return "its parts do not add up to its size";
    left -= h.part_size[i];
  }
  return left == 0 ? "" : "its parts do not add up to its size";
}

} // namespace swarm
