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

std::string judge_hello(const bulk_hello& h, const bulk_token& expected) {
  if (h.magic != bulk_hello_magic)
    return "no hello before its first frame (not a swarm bulk peer)";
  // Compared in constant time: the time a wrong guess takes says nothing of the token.
  if (((h.token.hi ^ expected.hi) | (h.token.lo ^ expected.lo)) != 0)
    return "a hello with another token (a stranger to this swarm's CAF network, or a process that restarted)";
  return "";
}

}  // namespace swarm
