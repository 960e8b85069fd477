#pragma once
// Compression of plain float vectors (the all-reduce's pieces) for code that
// does not include torch. Same codecs and layout as messages/tensor_codec.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "swarm.pb.h"

namespace swarm {

/// `n` float32 values at `p` encoded with `c`.
[[nodiscard]] std::string encode_floats(const float* p, int64_t n, proto::codec c);

/// `n` float32 values from `data`; BAD_REQUEST naming `name` when `data` does not hold them.
[[nodiscard]] caf::expected<std::vector<float>> decode_floats(const std::string& data, proto::codec c, int64_t n,
                                                              const std::string& name);

/// Replaces the `n` values at `p` by what a receiver decodes from
/// encode_floats(p, n, c): a sender that keeps its own copy keeps the same
/// values as everyone it sent them to (bit-identical averaging).
void round_trip_floats(float* p, int64_t n, proto::codec c);

}  // namespace swarm
