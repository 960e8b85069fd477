#pragma once
// torch::Tensor <-> proto::tensor, raw or compressed: the only place that knows
// both. Quantization runs as libtorch tensor ops on the tensor's own device;
// only the encoded bytes cross to host memory.
//
// BLOCKWISE8 is bitsandbytes' blockwise dynamic quantization (SWARM's 8-bit
// compression; ../shared/notes/blockwise8.md): blocks of 4096 consecutive
// values of the flat tensor, each scaled by its absolute maximum (float32), each
// value replaced by the index of the nearest entry of a 256-entry codebook
// (messages/codebook.hpp), ties to the lower index. Relative L2 error about 1.3%
// on normal data; +-absmax, 0 and an all-zero block decode exactly.
// FP16 clamps to +-65504 and rounds to half (relative error about 0.02%).

#include <string>

#include <ATen/core/Tensor.h>
#include <caf/expected.hpp>

#include "swarm.pb.h"

namespace swarm {

/// Encodes `t` (any device; made contiguous). Floating-point tensors use `c`;
/// others always travel RAW. The dtype field keeps `t`'s type.
[[nodiscard]] proto::tensor encode_tensor(const at::Tensor& t, proto::codec c = proto::RAW);

/// check_tensor(), then decodes onto `device` as the dtype the sender held;
/// the result owns its memory. BAD_REQUEST naming `name` when inconsistent.
[[nodiscard]] caf::expected<at::Tensor> decode_tensor(const proto::tensor& t, const char* name,
                                                      const at::Device& device = at::kCPU);

/// As above, taking `t`'s bytes (its data is empty afterwards): a raw tensor
/// decoded onto the CPU is built on them without a copy, and they go back to
/// transfer_buffers() when it dies; other bytes go back at once.
[[nodiscard]] caf::expected<at::Tensor> decode_tensor(proto::tensor&& t, const char* name,
                                                      const at::Device& device = at::kCPU);

/// The encoded bytes of the flat float tensor `x` with `c` (RAW: float32 elements).
[[nodiscard]] std::string encode_values(const at::Tensor& x, proto::codec c);

/// `n` float32 values decoded from `data` (checked with check_encoded first) onto `device`.
[[nodiscard]] caf::expected<at::Tensor> decode_values(const std::string& data, proto::codec c, int64_t n,
                                                      const at::Device& device, const std::string& name);

}  // namespace swarm
