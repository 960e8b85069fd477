// Encoded float vectors from a peer (the all-reduce's pieces): decode_floats
// with any codec, count and bytes. What it accepts has exactly `n` values,
// and BLOCKWISE8 values are finite (its header check promises so).
#include <cmath>

#include "fuzz.hpp"
#include "messages/float_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::fuzz::reader in(data, size);
  const auto codec = static_cast<swarm::proto::codec>(in.take<uint8_t>() % 5);
  const int64_t n = in.take<int32_t>() % (1 << 16);  // negative counts too
  const auto bytes = in.rest();
  auto values = swarm::decode_floats(bytes, codec, n, "piece");
  if (!values)
    return 0;
  SWARM_FUZZ_EXPECT(static_cast<int64_t>(values->size()) == n);
  if (codec == swarm::proto::BLOCKWISE8)
    for (float v : *values)
      SWARM_FUZZ_EXPECT(std::isfinite(v));
  return 0;
}
