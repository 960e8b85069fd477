// A bulk connection's first bytes from a peer (net/bulk_frame.hpp): whatever
// they say, an accepted frame header names 1..8 parts whose sizes add up to a
// size within the limit, and an accepted hello names the expected token.
#include "fuzz.hpp"
#include "net/bulk_frame.hpp"

namespace {

void frame_header(swarm::fuzz::reader& in) {
  const auto max_frame = in.take<uint64_t>() >> (in.take<uint8_t>() % 64);
  swarm::bulk_frame_header h;
  const auto fixed = in.bytes(swarm::bulk_fixed_header);
  std::memcpy(&h, fixed.data(), fixed.size());
  if (swarm::is_frame_start(h)) {
    const auto sizes = in.bytes(h.parts * sizeof(uint64_t));
    std::memcpy(h.part_size, sizes.data(), sizes.size());
  }
  if (!swarm::judge_frame_header(h, max_frame).empty())
    return;
  SWARM_FUZZ_EXPECT(h.parts >= 1 && h.parts <= swarm::max_bulk_parts);
  SWARM_FUZZ_EXPECT(h.size <= max_frame);
  uint64_t sum = 0;
  for (size_t i = 0; i < h.parts; ++i) {
    SWARM_FUZZ_EXPECT(h.part_size[i] <= h.size - sum);
    sum += h.part_size[i];
  }
  SWARM_FUZZ_EXPECT(sum == h.size);
}

/// What follows the header: the token expected, then a hello.
void hello(swarm::fuzz::reader& in) {
  const auto expected = in.take<swarm::bulk_token>();
  const auto h = in.take<swarm::bulk_hello>();
  if (!swarm::judge_hello(h, expected).empty())
    return;
  SWARM_FUZZ_EXPECT(h.magic == swarm::bulk_hello_magic);
  SWARM_FUZZ_EXPECT(h.token.hi == expected.hi && h.token.lo == expected.lo);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::fuzz::reader in(data, size);
  frame_header(in);
  hello(in);
  return 0;
}
